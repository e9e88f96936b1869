"""Whole topics through a real OpenAI-compatible server: llama.cpp's own server with
SmolLM2-135M-Instruct (tests/support/llama_server.py), the loopback SearXNG, reader and pages of
tests/support/world.py around it. The model is small and often answers past the format asked:
the topic must complete all the same — each unreadable answer a fallback that the events name —
and a window too small for the prompts must be budgeted to, not fail the calls.

Few and quick on purpose (CI time): quick mode, one topic per server, its plan approved with one
sub-query."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from mindsearch.clients import llm
from research import progress, workflow
from research.models import FollowUp, LLMCall, Report, RunEvent, SearchQuery, Topic
from research.pipeline.followup import answer_pending
from research.pipeline.run import plan_topic, run_topic
from tests.e2e_llm.conftest import NORMAL_CONTEXT
from tests.mindsearch.test_status import row
from tests.support.llama_server import MODEL_NAME, LlamaServer
from tests.support.world import World, loopback_world

pytestmark = pytest.mark.django_db

QUESTION = "What is Mixture of Tokens, where is it used and what improvements exist?"
FOLLOW_UP = "Which improvements of Mixture of Tokens are there?"


def pointed_at(settings: Any, server: LlamaServer) -> Iterator[World]:
    with loopback_world(settings) as world:
        for name, value in server.settings().items():
            setattr(settings, name, value)
        llm.forget_endpoints()
        yield world
        llm.forget_endpoints()


@pytest.fixture
def real_world(settings: Any, llama: LlamaServer) -> Iterator[World]:
    yield from pointed_at(settings, llama)


@pytest.fixture
def small_world(settings: Any, llama_small: LlamaServer) -> Iterator[World]:
    yield from pointed_at(settings, llama_small)


@pytest.fixture
def drafts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The report's text as the page saw it while it was being written."""
    saved: list[str] = []
    real = progress.save_draft

    def recording(topic_id: int, text: str) -> int:
        saved.append(text)
        return real(topic_id, text)

    monkeypatch.setattr(progress, "save_draft", recording)
    return saved


def research(owner: User) -> Topic:
    """The model plans the topic; the plan is approved as a reviewer may trim it on the page, to
    its first sub-query; the topic runs. Every stage still asks the model (queries, scores, one
    summary per page read, the report); the two other sub-queries' query calls, which SmolLM2
    writes to their 448-token limit, are not paid (CI time, docs/TESTING.md)."""
    topic = Topic.objects.create(owner=owner, question=QUESTION, language="en")
    plan_topic(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.AWAITING_APPROVAL, (topic.status, topic.error)
    first = topic.subqueries.order_by("position").first()
    assert first is not None
    trimmed = workflow.ShownPlan(topic.plan_version(), [(first.pk, first.text)])
    workflow.approve_plan(topic, trimmed, queue=False)
    run_topic(topic.pk)
    topic.refresh_from_db()
    assert list(topic.subqueries.values_list("text", flat=True)) == [first.text]
    return topic


def searched(topic: Topic) -> list[tuple[str, int | None]]:
    """What the plan searched for and how many results each query had, for a failure's message."""
    rows = SearchQuery.objects.filter(subquery__topic=topic).order_by("subquery__position", "position")
    return list(rows.values_list("text", "result_count"))


def warned_stages(topic: Topic) -> set[str]:
    return set(topic.events.filter(level=RunEvent.Level.WARNING).values_list("stage", flat=True))


def test_a_whole_topic_completes_through_the_real_model(
    alice: User, real_world: World, drafts: list[str]
) -> None:
    started = time.monotonic()
    topic = research(alice)
    elapsed = time.monotonic() - started
    assert topic.status == Topic.Status.COMPLETED, (topic.error, searched(topic))
    calls = LLMCall.objects.filter(topic=topic)
    answered = calls.filter(error="", cache_hit=False)
    # The real model was asked at every step that asks one, and answered most of them.
    assert answered.filter(model=MODEL_NAME).exists(), list(calls.values("stage", "model", "error"))
    assert {"plan", "answer"} <= set(calls.values_list("stage", flat=True))
    # Each step whose call failed says so in the events, by its stage.
    failed = set(calls.exclude(error="").values_list("stage", flat=True))
    assert failed <= warned_stages(topic) | {"llm"}, (failed, warned_stages(topic))
    # The report was streamed as it was written, then checked and saved with its sources.
    report = Report.objects.get(topic=topic)
    assert report.markdown.strip() and report.sources
    assert drafts and all(not re.search(r"</?think>", text) for text in drafts)
    assert topic.events.filter(stage="citecheck").exists()
    # A follow-up is answered through the same server.
    followup = workflow.ask_followup(topic, question=FOLLOW_UP)
    assert answer_pending(topic.pk) == [followup.pk]
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.COMPLETED, followup.error
    assert followup.answer.strip()
    print(f"\nquick topic through {MODEL_NAME}: {elapsed:.0f} s, {calls.count()} calls")


def test_a_window_too_small_for_the_prompts_is_budgeted_not_failed(alice: User, small_world: World) -> None:
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    # The report's sources were trimmed to the window, and the log says so.
    trimmed = topic.events.filter(message__startswith="The sources did not fit the model's context window")
    assert trimmed.filter(stage="answer").exists(), list(topic.events.values_list("stage", "message"))
    # The report was written by the model from them, not by the extractive engine.
    calls = LLMCall.objects.filter(topic=topic)
    assert calls.filter(stage="answer", error="").exists(), list(calls.values_list("stage", "error"))
    assert Report.objects.get(topic=topic).model == MODEL_NAME
    # A step whose prompt still overflowed fell back saying so, never silently.
    overflowed = {call.stage for call in calls if "context window" in call.error}
    assert overflowed <= warned_stages(topic), (overflowed, warned_stages(topic))


def test_the_status_page_checks_the_real_model(
    alice: User, alice_client: Client, real_world: World, settings: Any
) -> None:
    settings.STATUS_CACHE_SECONDS = 0
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    page = alice_client.post("/status/model-check/").content.decode()
    # One plan call answered, and the page says what the pipeline makes of it, either way.
    assert "The pipeline reads" in page or "would use keyword sub-queries instead" in page, page
    assert 'class="model-answer"' in page
    call = LLMCall.objects.get(stage="model-check")
    assert call.model == MODEL_NAME and call.completion_tokens > 0
    # The window is the server's own (its /props), and the answers were seen streaming.
    abilities = row(page, "LLM abilities")
    assert f"context window {NORMAL_CONTEXT} tokens, as the server reports it" in abilities, abilities
    assert "streams its answers" in abilities
