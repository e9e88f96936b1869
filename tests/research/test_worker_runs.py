"""Topics run by real qcluster processes: a global search limit across two workers, and a
worker killed mid-run whose topic is resumed by a new one without duplicates or repaid calls."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from django.contrib.auth.models import User
from django_q.tasks import async_task

from research.models import Document, Hit, HitScore, LLMCall, RunEvent, SubQuery, Summary, Topic
from research.tasks import resume_stalled_topics
from tests.support import processes
from tests.support.world import TOPIC, world

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def wait_until(condition: Callable[[], bool], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.2)


def approved_topic(owner: User, subqueries: list[str]) -> Topic:
    topic = Topic.objects.create(owner=owner, question=TOPIC, status=Topic.Status.QUEUED)
    for position, text in enumerate(subqueries):
        SubQuery.objects.create(topic=topic, position=position, text=text, origin=SubQuery.Origin.USER)
    return topic


def finished(*topics: Topic) -> bool:
    return all(Topic.objects.get(pk=t.pk).is_finished for t in topics)


def max_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    return max((sum(1 for t in times[i:] if t < start + window) for i, start in enumerate(times)), default=0)


def test_two_workers_share_one_searxng_limit(alice: User, bob: User) -> None:
    with world() as w:
        env = processes.process_env(**{**w.env(), "LIMIT_SEARXNG_RPM": "4", "MINDSEARCH_WORKERS": "2"})
        topics = [
            approved_topic(alice, ["Что такое Mixture of Tokens в машинном обучении?"]),
            approved_topic(bob, ["Какие есть улучшения Mixture of Tokens и их преимущества?"]),
        ]
        started = time.monotonic()
        with processes.qcluster(env):
            for topic in topics:
                async_task("research.tasks.run", topic.pk)
            wait_until(lambda: finished(*topics), 240, "topics did not finish")
        searches = [request.arrived for request in w.searxng.requests_to("/search")]
    assert [Topic.objects.get(pk=t.pk).status for t in topics] == [Topic.Status.COMPLETED] * 2
    assert len(searches) == 8  # 2 Russian + 2 English queries for each topic
    # 8 searches at 4 a minute: the second four wait a minute, and no 60-s window sees more than 4.
    assert max_in_window(searches, 60.0) == 4
    assert time.monotonic() - started > 60


def kill_tree(proc: psutil.Process) -> None:
    family = [proc, *proc.children(recursive=True)]
    for member in family:
        member.kill()
    psutil.wait_procs(family, timeout=10)


def test_a_killed_worker_is_resumed_without_duplicates_or_repaid_calls(alice: User, settings: Any) -> None:
    settings.RESUME_STALLED_AFTER_SECONDS = 0
    latency = 0.5
    with world(llm_latency=latency) as w:
        env = processes.process_env(**w.env())
        topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
        with processes.qcluster(env) as first:
            async_task("research.tasks.plan", topic.pk)
            # Kill in the middle of scoring hits: some batches answered, some in flight.
            wait_until(
                lambda: HitScore.objects.filter(hit__topic=topic).exists(), 120, "scoring never started"
            )
            kill_started = time.monotonic()
            kill_tree(psutil.Process(first.pid))
            killed_at = time.monotonic()
        assert Topic.objects.get(pk=topic.pk).status == Topic.Status.RUNNING
        with processes.qcluster(env):
            assert resume_stalled_topics() == [topic.pk]
            wait_until(lambda: finished(topic), 180, "the resumed topic did not finish")
        assert Topic.objects.get(pk=topic.pk).status == Topic.Status.COMPLETED
        bodies = Counter(request.body for request in w.llm.requests)
        # In flight at the kill: asked within an answer's latency (and a second of slack for a
        # loaded machine) before the kill began, up to its end — killing the tree and waiting
        # for it can itself take a second under load.
        in_flight = [r for r in w.llm.requests if kill_started - latency - 1.0 <= r.arrived <= killed_at]
    # Only calls that were in flight at the kill may have been asked twice; every answered one
    # was saved and served from the cache on resume.
    repeated = sum(count - 1 for count in bodies.values())
    assert repeated <= len(in_flight)
    assert LLMCall.objects.filter(topic=topic, stage="plan", cache_hit=False).count() == 1
    assert Hit.objects.filter(topic=topic).count() == len(
        set(Hit.objects.filter(topic=topic).values_list("url"))
    )
    assert HitScore.objects.filter(hit__topic=topic).count() == Hit.objects.filter(topic=topic).count()
    assert (
        Summary.objects.filter(document__topic=topic).count() == Document.objects.filter(topic=topic).count()
    )
    assert RunEvent.objects.filter(topic=topic, stage="done").count() == 1
