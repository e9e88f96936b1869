"""The topic page asks the database a bounded number of queries (issue 26): each kind of row
read once, whatever the topic holds — more follow-ups, search results, events or sources add
rows to the queries, never queries. Counted, never timed: query counts are deterministic, and
bench/pages.py measures what the page costs in CPU."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import caches
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from research import presenters, workflow
from research.models import FollowUp, Hit, HitScore, LLMCall, RunEvent, Topic
from research.pipeline.followup import answer_pending
from research.pipeline.run import plan_topic, run_topic
from tests.support.world import TOPIC, World

pytestmark = pytest.mark.django_db

# A finished topic of the loopback world with one answered follow-up, signed in as its owner:
# the page's panels rendered (the fragment cache empty) and read from the cache. Was 29 and 18.
FIRST_VIEW_QUERIES = 24
CACHED_VIEW_QUERIES = 14


def researched(owner: User) -> Topic:
    topic = Topic.objects.create(owner=owner, question=TOPIC, auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    workflow.ask_followup(Topic.objects.get(pk=topic.pk), question="Where is Mixture of Tokens used?")
    answer_pending(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert topic.followups.get().status == FollowUp.Status.COMPLETED
    return topic


def queries(client: Client, topic: Topic, *, cached: bool) -> list[str]:
    url = reverse("topic_detail", args=[topic.pk])
    client.get(url)  # the stored renderings made, the panels cached
    if not cached:
        caches["fragments"].clear()
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return [query["sql"] for query in captured]


def test_the_topic_page_reads_each_kind_of_row_once(
    alice: User, alice_client: Client, loopback: World
) -> None:
    topic = researched(alice)
    first, cached = queries(alice_client, topic, cached=False), queries(alice_client, topic, cached=True)
    assert len(first) <= FIRST_VIEW_QUERIES, "\n".join(first)
    assert len(cached) <= CACHED_VIEW_QUERIES, "\n".join(cached)
    # The report is read once per view (the thread, the panels, the versions and the export
    # button share it); the cached view reads the report panel's rows not at all.
    assert sum(sql.startswith('SELECT "research_report"') for sql in cached) == 1, "\n".join(cached)
    assert not any(sql.startswith(('SELECT "research_citation"', 'SELECT "research_hit"')) for sql in cached)

    more(topic)
    assert len(queries(alice_client, topic, cached=False)) == len(first)
    assert len(queries(alice_client, topic, cached=True)) == len(cached)
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert page.count('class="followup"') == 4 and "followup-meta" in page


def more(topic: Topic) -> None:
    """Three more answered follow-ups (each with its LLM calls), forty more events, ten more
    scored search results."""
    answered = topic.followups.get()
    assert answered.finished_at is not None
    for position in range(2, 5):
        began = answered.finished_at + timedelta(minutes=position)
        copy = FollowUp.objects.create(
            topic=topic,
            position=position,
            question=f"{answered.question} ({position})",
            status=FollowUp.Status.COMPLETED,
            answer=answered.answer,
            citations=answered.citations,
            finished_at=began + timedelta(seconds=30),
        )
        FollowUp.objects.filter(pk=copy.pk).update(created_at=began)
        call = LLMCall.objects.create(topic=topic, stage="followup", model="m", prompt_tokens=10)
        LLMCall.objects.filter(pk=call.pk).update(created_at=began + timedelta(seconds=10))
    presenters.store_thread(topic)
    last = topic.events.order_by("-seq").values_list("seq", flat=True).first() or 0
    RunEvent.objects.bulk_create(
        RunEvent(topic=topic, seq=last + i, stage="read", message="Read a page", done=i, total=40)
        for i in range(1, 41)
    )
    subquery = topic.subqueries.first()
    assert subquery is not None
    for i in range(10):
        url = f"https://example.org/more-{i}"
        hit = Hit.objects.create(
            topic=topic, subquery=subquery, url=url, normalized_url=url, title=f"More {i}"
        )
        HitScore.objects.create(hit=hit, **dict.fromkeys(HitScore.CRITERIA, 5.0))


def test_each_answer_s_cost_is_its_own_window_s_calls(alice: User, settings: Any) -> None:
    """The thread's costs, read for all answers in one query, are what each answer's own
    window of calls holds (as `followup_usage` reads one)."""
    from django.utils import timezone

    topic = Topic.objects.create(owner=alice, question="Q", status=Topic.Status.COMPLETED)
    now = timezone.now()
    rows = []
    for position, calls in ((1, 2), (2, 0), (3, 3)):
        began = now + timedelta(minutes=position)
        followup = FollowUp.objects.create(
            topic=topic, position=position, question="q", status=FollowUp.Status.COMPLETED,
            finished_at=began + timedelta(seconds=30),
        )  # fmt: skip
        FollowUp.objects.filter(pk=followup.pk).update(created_at=began)
        for i in range(calls):
            call = LLMCall.objects.create(
                topic=topic, stage="followup", model="m", prompt_tokens=100 * position
            )
            LLMCall.objects.filter(pk=call.pk).update(created_at=began + timedelta(seconds=i + 1))
        followup.refresh_from_db()
        rows.append(followup)
    LLMCall.objects.create(topic=topic, stage="answer", model="m", prompt_tokens=7)  # outside every window
    together = presenters.followup_usages(rows)
    assert together == {f.pk: presenters.followup_usage(f) for f in rows}
    assert [(together[f.pk] or {}).get("tokens") for f in rows] == [200, None, 900]
