"""Fault matrix, LLM rows: every way the OpenAI-compatible endpoint fails, end to end.

Each test researches the Mixture of Tokens topic in-process against the loopback world with one fault
injected at the LLM's HTTP boundary, and ends with the topic completed (with the LLM, or by the
extractive engine when the LLM keeps failing, saying so) and every row it saved kept.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from mindsearch.clients import llm as llm_client
from research.models import HitScore, LLMCall, Report, SubQuery, Summary, Topic
from tests.reliability.runs import research, warnings_of
from tests.support.fakes import Fault, Response
from tests.support.world import World

pytestmark = pytest.mark.django_db

CHAT = "/v1/chat/completions"


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The back-off schedule is the client's own test; here it only has to be short."""
    monkeypatch.setattr(llm_client, "BACKOFF_SECONDS", 0.01)


def openai_error(status: int, message: str) -> dict:
    return {"error": {"message": message, "type": "server_error", "param": None, "code": None}}


def always(w: World, response: Response) -> None:
    w.llm.routes[("POST", CHAT)] = lambda request: response


def first_call(topic: Topic) -> LLMCall:
    call = LLMCall.objects.filter(topic=topic).order_by("created_at", "id").first()
    assert call is not None, "no LLM call was recorded"
    return call


def assert_given_up_and_finished_without_llm(topic: Topic, w: World, reason: str) -> None:
    assert topic.status == Topic.Status.COMPLETED, topic.error
    given_up = warnings_of(topic, "llm")
    assert given_up and all(reason in warning for warning in given_up), given_up
    # Given up on while planning: no later stage asked it, and each ask took its 4 attempts.
    calls = LLMCall.objects.filter(topic=topic)
    assert set(calls.values_list("stage", flat=True)) <= {"route", "plan", "queries"}
    assert calls.exists() and len(w.llm.requests) <= 4 * calls.count()
    assert topic.report.model == ""  # the report says it was written without an LLM
    assert set(SubQuery.objects.filter(topic=topic).values_list("origin", flat=True)) == {"fallback"}
    assert HitScore.objects.filter(hit__topic=topic).exists()
    assert Summary.objects.filter(document__topic=topic).exists()


def test_429_with_retry_after_is_waited_for_and_the_run_completes_with_the_llm(
    alice: User, loopback: World
) -> None:
    limited = Fault(429, {"Retry-After": "1"}, openai_error(429, "Rate limit reached"), path=CHAT)
    loopback.llm.inject(limited, limited)
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    retried = first_call(topic)
    assert retried.attempts == 3 and retried.error == ""
    first, second, third = loopback.llm.requests[:3]
    assert second.arrived - first.arrived >= 0.95 and third.arrived - second.arrived >= 0.95
    assert set(SubQuery.objects.filter(topic=topic).values_list("origin", flat=True)) == {"llm"}
    assert topic.report.model == "test-model"


def test_429_that_never_ends_hands_the_run_to_the_extractive_engine(alice: User, loopback: World) -> None:
    always(loopback, Response(429, openai_error(429, "Rate limit reached"), {"Retry-After": "0"}))
    topic = research(alice)
    assert_given_up_and_finished_without_llm(topic, loopback, "rate-limiting us (HTTP 429)")


def test_500s_are_retried_and_the_run_completes_with_the_llm(alice: User, loopback: World) -> None:
    loopback.llm.inject(*[Fault(500, path=CHAT), Fault(502, path=CHAT), Fault(503, path=CHAT)])
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert first_call(topic).attempts == 4
    assert topic.report.model == "test-model"
    assert not warnings_of(topic)


def test_500s_that_never_end_hand_the_run_to_the_extractive_engine(alice: User, loopback: World) -> None:
    always(loopback, Response(500, openai_error(500, "The server had an error")))
    topic = research(alice)
    assert_given_up_and_finished_without_llm(topic, loopback, "failed (HTTP 500)")
    errors = LLMCall.objects.filter(topic=topic).values_list("error", flat=True)
    assert errors and all("gave up after 4 attempts" in error for error in errors)


def test_a_timeout_is_retried_and_the_run_completes_with_the_llm(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llm_client, "TIMEOUT_SECONDS", 2.0)
    monkeypatch.setattr(llm_client, "QUEUE_TIMEOUT_SECONDS", 2.0)  # the hang is before the first byte
    loopback.llm.inject(Fault.hang(5.0, path=CHAT))
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert first_call(topic).attempts == 2
    assert topic.report.model == "test-model"


def test_an_endpoint_that_always_hangs_is_given_up_on(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llm_client, "TIMEOUT_SECONDS", 0.3)
    monkeypatch.setattr(llm_client, "QUEUE_TIMEOUT_SECONDS", 0.3)  # nothing ever comes
    loopback.llm.latency = 1.5
    topic = research(alice)
    assert_given_up_and_finished_without_llm(topic, loopback, "did not answer within 0.3 s")


def test_empty_answers_fall_back_to_extractive_summaries(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loopback.script, "summarise", lambda user: "")
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    summaries = Summary.objects.filter(document__topic=topic)
    assert summaries.exists() and set(summaries.values_list("origin", flat=True)) == {"fallback"}
    assert all(summary.text.strip() for summary in summaries)
    assert any("empty answer" in message for message in warnings_of(topic, "summarise"))
    # The stages before kept what the LLM gave them.
    assert set(HitScore.objects.filter(hit__topic=topic).values_list("origin", flat=True)) == {"llm"}


def test_malformed_json_scores_fall_back_to_keywords(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    malformed = '```json\n[{"заголовок": "Mixture" "полнота": 9}, {oops}]\n```'
    monkeypatch.setattr(loopback.script, "score", lambda user: malformed)
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert set(HitScore.objects.filter(hit__topic=topic).values_list("origin", flat=True)) == {"fallback"}
    assert any("no usable JSON" in message for message in warnings_of(topic, "score_hits"))
    assert topic.report.model == "test-model"  # a bad answer is not a dead LLM


def test_truncated_json_keeps_the_complete_rows(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = loopback.script.score

    def cut_off(user: str) -> str:
        answer = whole(user)
        rows = json.loads(answer.removeprefix("```json\n").removesuffix("\n```"))
        text = json.dumps(rows, ensure_ascii=False)
        # The answer stops in the middle of the last row, as when max_tokens runs out.
        return text[: text.rindex("{") + 25] if len(rows) > 1 else text

    monkeypatch.setattr(loopback.script, "score", cut_off)
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    origins = list(HitScore.objects.filter(hit__topic=topic).values_list("origin", flat=True))
    assert origins.count("llm") > origins.count("fallback") > 0
    assert Report.objects.filter(topic=topic).exists()
