"""Fault matrix: the worker killed with SIGKILL in the middle of each stage.

A real qcluster runs the Mixture of Tokens topic against the loopback world. The services hold every request
of the chosen stage but the first for a few seconds, so the kill lands with part of the stage
saved and part in flight. A second qcluster then resumes the topic (the worker's own
`resume_stalled_topics` job re-queues it) and it must complete with no duplicate rows, every
row saved before the kill kept, and no answered call (LLM, search or reader) asked again.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import Model
from django_q.tasks import async_task

from research.models import (
    CacheEntry,
    Document,
    Hit,
    HitScore,
    LLMCall,
    Report,
    RunEvent,
    SearchQuery,
    SubQuery,
    Summary,
    SummaryScore,
    Topic,
)
from research.tasks import resume_stalled_topics
from tests.reliability.runs import Ledger, is_finished, kill_tree, wait_until
from tests.support import processes
from tests.support.fakes import Request
from tests.support.world import TOPIC, World, prompt_kind, world

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

# An answer that left the service this long before the kill must have been saved by then.
SAVE_GRACE = 1.0


def llm_kind(request: Request) -> str:
    kind = prompt_kind(request.json()["messages"][0]["content"])
    if kind == "score":  # hits and summaries share the prompt; hits come with their URL
        return "score_hits" if "Описание:" in request.json()["messages"][-1]["content"] else "score_summaries"
    return kind


def all_but_first(matches: Callable[[Request], bool]) -> Callable[[Request], bool]:
    seen = itertools.count()
    return lambda request: matches(request) and next(seen) >= 1


def llm_stage(kind: str, *, first_too: bool = False) -> Callable[[Request], bool]:
    def matches(request: Request) -> bool:
        return request.method == "POST" and llm_kind(request) == kind

    return matches if first_too else all_but_first(matches)


def llm_asked(w: World, kind: str) -> bool:
    return any(r.method == "POST" and llm_kind(r) == kind for r in list(w.llm.requests))


@dataclass(frozen=True)
class Stage:
    service: str  # the service whose answers are held
    held: Callable[[], Callable[[Request], bool]]  # makes the predicate: which requests wait
    half_done: Callable[[Topic, World], bool]  # part of the stage is saved


def saved(model: type[Model], path: str) -> Callable[[Topic, World], bool]:
    return lambda topic, w: model._default_manager.filter(**{path: topic}).exists()


def searched(topic: Topic, w: World) -> bool:
    return CacheEntry.objects.filter(kind=CacheEntry.Kind.SEARCH_RESULTS).exists()


def read_on(topic: Topic, w: World) -> bool:
    """A page saved and another being read: a web topic reads a sub-query's best page while the
    next sub-queries are still searched (research/pipeline/overlap.py), so the first page can be
    saved well before the second is asked for."""
    return saved(Document, "topic")(topic, w) and len(w.reader.requests) >= 2


def summarising_on(topic: Topic, w: World) -> bool:
    """A summary saved and another being written (see `read_on`)."""
    asked = sum(1 for r in list(w.llm.requests) if r.method == "POST" and llm_kind(r) == "summarise")
    return saved(Summary, "document__topic")(topic, w) and asked >= 2


STAGES = {
    "route": Stage("llm", lambda: llm_stage("route", first_too=True), lambda t, w: llm_asked(w, "route")),
    "plan": Stage("llm", lambda: llm_stage("plan", first_too=True), lambda t, w: llm_asked(w, "plan")),
    "queries": Stage("llm", lambda: llm_stage("queries"), saved(SearchQuery, "subquery__topic")),
    "search": Stage("searxng", lambda: all_but_first(lambda r: r.path == "/search"), searched),
    "score_hits": Stage("llm", lambda: llm_stage("score_hits"), saved(HitScore, "hit__topic")),
    "read": Stage("reader", lambda: all_but_first(lambda r: True), lambda t, w: read_on(t, w)),
    "summarise": Stage("llm", lambda: llm_stage("summarise"), lambda t, w: summarising_on(t, w)),
    "score_summaries": Stage(
        "llm", lambda: llm_stage("score_summaries"), saved(SummaryScore, "summary__document__topic")
    ),
    "answer": Stage("llm", lambda: llm_stage("answer", first_too=True), lambda t, w: llm_asked(w, "answer")),
}


def saved_rows(topic: Topic) -> dict[str, set]:
    scores = SummaryScore.objects.filter(summary__document__topic=topic)
    return {
        "subqueries": set(SubQuery.objects.filter(topic=topic).values_list("pk", "text")),
        "search_queries": set(SearchQuery.objects.filter(subquery__topic=topic).values_list("pk", "text")),
        "hits": set(Hit.objects.filter(topic=topic).values_list("pk", "normalized_url")),
        "hit_scores": set(HitScore.objects.filter(hit__topic=topic).values_list("pk", "total")),
        "documents": set(Document.objects.filter(topic=topic).values_list("pk", "url")),
        "summaries": set(Summary.objects.filter(document__topic=topic).values_list("pk", "text")),
        "summary_scores": set(scores.values_list("pk", "total")),
    }


def never(request: Request) -> bool:
    return False


def ledgers(w: World, stage: str) -> dict[str, Ledger]:
    chosen = STAGES[stage]
    keys = {"llm": lambda r: r.body.decode(), "searxng": lambda r: r.raw_path, "reader": lambda r: r.raw_path}
    services = {"llm": w.llm, "searxng": w.searxng, "reader": w.reader}
    return {
        name: Ledger(services[name], keys[name], slow=chosen.held() if name == chosen.service else never)
        for name in services
    }


def assert_no_duplicates(topic: Topic) -> None:
    assert SubQuery.objects.filter(topic=topic).count() == 3
    queries = SearchQuery.objects.filter(subquery__topic=topic)
    assert queries.count() == len(set(queries.values_list("subquery", "language", "position")))
    hits = Hit.objects.filter(topic=topic)
    assert HitScore.objects.filter(hit__topic=topic).count() == hits.count()
    documents = Document.objects.filter(topic=topic)
    assert documents.count() == len(set(documents.values_list("url", flat=True)))
    assert Summary.objects.filter(document__topic=topic).count() == documents.count()
    assert SummaryScore.objects.filter(summary__document__topic=topic).count() == documents.count()
    assert Report.objects.filter(topic=topic).count() == 1
    assert RunEvent.objects.filter(topic=topic, stage="done").count() == 1
    assert LLMCall.objects.filter(topic=topic, stage="plan", cache_hit=False, error="").count() == 1


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_worker_killed_mid_stage_is_resumed_without_duplicates_or_repaid_calls(
    stage: str, alice: User, settings: Any
) -> None:
    settings.RESUME_STALLED_AFTER_SECONDS = 0
    half_done = STAGES[stage].half_done
    # Extra pages give every sub-query hits of its own and more than one scoring batch.
    with world(extra_pages=30) as w:
        ledger = ledgers(w, stage)
        env = processes.process_env(**w.env(), LOG_LEVEL="WARNING")
        topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
        with processes.qcluster(env) as first:
            async_task("research.tasks.plan", topic.pk)
            wait_until(lambda: half_done(topic, w) or is_finished(topic.pk), 120, f"{stage} never began")
            killed_at = time.monotonic()
            kill_tree(first.pid)
        topic.refresh_from_db()
        assert not topic.is_finished, (
            f"the run ended ({topic.status} {topic.error}) before the kill in {stage}"
        )
        held = ledger[STAGES[stage].service].held
        assert any(at < killed_at for at in held), f"no request of {stage} was in flight at the kill"
        before = saved_rows(topic)
        with processes.qcluster(env):
            assert resume_stalled_topics() == [topic.pk]
            wait_until(lambda: is_finished(topic.pk), 180, "the resumed topic did not finish")
        topic.refresh_from_db()
        assert topic.status == Topic.Status.COMPLETED, topic.error
        for name, service_ledger in ledger.items():
            assert service_ledger.repaid(killed_at - SAVE_GRACE) == [], f"{name} answers asked again"
    after = saved_rows(topic)
    for name, rows in before.items():
        assert rows <= after[name], f"{name} saved before the kill were lost or changed"
    assert_no_duplicates(topic)
