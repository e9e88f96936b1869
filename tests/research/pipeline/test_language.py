"""The plan (and the report) in the question's language; the search queries in both."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from research.models import SearchQuery, Topic
from research.pipeline.prompting import load_prompt
from research.pipeline.replies import language_of
from research.pipeline.run import plan_topic
from tests.support.world import World, prompt_kind

pytestmark = pytest.mark.django_db


def test_the_language_a_reply_is_asked_in() -> None:
    assert language_of("Расскажи об Mixture of Tokens") == "русский"
    assert language_of("What hardware is needed to train Mixture of Tokens?") == "английский (English)"
    assert language_of("42?") == "язык запроса"


def test_the_plan_prompt_no_longer_demands_russian() -> None:
    assert "на русском языке" not in load_prompt("plan").text


def plan_requests(world: World) -> list[str]:
    bodies = [json.loads(r.body) for r in world.llm.requests_to("/v1/chat/completions")]
    return [
        b["messages"][-1]["content"] for b in bodies if prompt_kind(b["messages"][0]["content"]) == "plan"
    ]


@pytest.mark.parametrize(
    ("question", "language"),
    [
        ("What hardware is needed to train Mixture of Tokens models?", "английский (English)"),
        ("Какое оборудование нужно для обучения Mixture of Tokens?", "русский"),
    ],
)
def test_the_plan_is_asked_for_in_the_questions_language(
    alice: User, loopback: World, question: str, language: str
) -> None:
    topic = Topic.objects.create(owner=alice, question=question)
    plan_topic(topic.pk)
    (request,) = plan_requests(loopback)
    assert f"Язык подзапросов: {language}" in request


def test_english_questions_are_still_searched_in_russian_and_english(alice: User, loopback: World) -> None:
    from tests.reliability.runs import research

    topic = research(alice, question="What hardware is needed to train Mixture of Tokens models?")
    languages = set(SearchQuery.objects.filter(subquery__topic=topic).values_list("language", flat=True))
    assert languages == {"ru", "en"}


def answer_requests(world: World) -> list[str]:
    bodies = [json.loads(r.body) for r in world.llm.requests_to("/v1/chat/completions")]
    return [
        b["messages"][-1]["content"] for b in bodies if prompt_kind(b["messages"][0]["content"]) == "answer"
    ]


def test_the_report_is_asked_for_in_the_questions_language(alice: User, loopback: World) -> None:
    from tests.reliability.runs import research

    topic = research(alice, question="What hardware is needed to train Mixture of Tokens models?")
    assert topic.status == Topic.Status.COMPLETED, topic.error
    requests = answer_requests(loopback)
    assert requests and all("Язык ответа: английский (English)" in r for r in requests)
    assert "на языке исходного запроса." not in load_prompt("answer").text
