"""The cost shown before *Approve* (research/estimate.py) and a topic's own token cap
(research/pipeline/cap.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from research import estimate
from research.models import LLMCall, Report, Round, SearchQuery, SubQuery, Topic
from research.pipeline.run import plan_topic, run_topic
from tests.support.world import TOPIC, World

pytestmark = pytest.mark.django_db


def research(owner: User, **fields: Any) -> Topic:
    topic = Topic.objects.create(owner=owner, question=TOPIC, auto_approve=True, **fields)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def paid_tokens(topic: Topic) -> int:
    calls = LLMCall.objects.filter(topic=topic, cache_hit=False)
    return sum(call.prompt_tokens + call.completion_tokens for call in calls)


def test_a_capped_topic_completes_under_its_cap_with_a_report_that_says_so(
    alice: User, loopback: World
) -> None:
    free = research(alice)
    assert free.status == Topic.Status.COMPLETED
    LLMCall.objects.all().delete()  # the next run must pay again: no cache to lean on
    from research.models import CacheEntry

    CacheEntry.objects.all().delete()
    cap = paid_tokens(free) or 1
    capped = research(alice, token_cap=max(1, cap // 4))
    assert capped.status == Topic.Status.COMPLETED, capped.error
    report = Report.objects.get(topic=capped)
    assert "capped" in report.marks
    messages = " ".join(capped.events.values_list("message", flat=True))
    assert "Continuing without the LLM" in messages
    # Past the cap no call is made: what was paid is the cap plus the one call that crossed it.
    paid = list(LLMCall.objects.filter(topic=capped, cache_hit=False, error=""))
    assert paid and sum(c.prompt_tokens + c.completion_tokens for c in paid[:-1]) < capped.token_cap


def test_a_deep_topic_plans_no_round_past_its_cap(alice: User, loopback: World) -> None:
    topic = research(alice, mode=Topic.Mode.DEEP, token_cap=1)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert Round.objects.get(topic=topic, number=1).stop_reason == Round.Stop.CAP
    assert not topic.subqueries.filter(round=2).exists()


def history_topic(owner: User, *, subqueries: int, calls: int, tokens: int, minutes: int) -> Topic:
    now = timezone.now()
    topic = Topic.objects.create(
        owner=owner,
        question="q",
        status=Topic.Status.COMPLETED,
        started_at=now - timedelta(minutes=minutes),
        finished_at=now,
    )
    for position in range(subqueries):
        sub = SubQuery.objects.create(topic=topic, position=position, text=f"s{position}")
        SearchQuery.objects.create(subquery=sub, language="ru", text="q", searched_at=now)
    for _ in range(calls):
        LLMCall.objects.create(
            topic=topic,
            user=owner,
            stage="score_hits",
            model="m",
            prompt_tokens=tokens // calls,
            completion_tokens=0,
        )
    return topic


def test_the_estimate_scales_this_instances_history_to_the_plan(alice: User) -> None:
    plan = Topic.objects.create(owner=alice, question="q", status=Topic.Status.AWAITING_APPROVAL)
    for position in range(4):
        SubQuery.objects.create(topic=plan, position=position, text=f"p{position}")
    first_guess = estimate.estimate(plan)
    assert first_guess["measured"] is False and first_guess["planned"] == 4
    assert first_guess["calls"].mid == estimate.PROFILE[Topic.Mode.QUICK]["calls"] * 4
    # Three runs of 2 sub-queries: 10, 12 and 14 calls; 20 000, 24 000 and 28 000 tokens.
    for calls in (10, 12, 14):
        history_topic(alice, subqueries=2, calls=calls, tokens=calls * 2000, minutes=calls // 2)
    measured = estimate.estimate(plan)
    assert measured["measured"] is True and measured["history"] == 3
    assert measured["calls"].mid == pytest.approx(24.0)  # 6 calls per sub-query × 4
    assert measured["tokens"].mid == pytest.approx(48_000)
    assert measured["tokens"].low < measured["tokens"].mid < measured["tokens"].high
    assert measured["searches"].mid == pytest.approx(4.0)
    assert measured["cost"] is None  # no prices configured


def test_the_plan_shows_the_estimate_and_approve_takes_a_cap(alice: User, alice_client: Client) -> None:
    topic = Topic.objects.create(owner=alice, question="q", status=Topic.Status.AWAITING_APPROVAL)
    SubQuery.objects.create(topic=topic, position=1, text="first")
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "the likely cost" in page and "model calls" in page and 'name="token_cap"' in page
    refused = alice_client.post(
        reverse("plan_approve", args=[topic.pk]), {"token_cap": "lots"}, headers={"HX-Request": "true"}
    )
    assert refused.status_code == 400 and "number of tokens" in refused.content.decode()
    topic.refresh_from_db()
    assert topic.status == Topic.Status.AWAITING_APPROVAL and topic.token_cap is None
    approved = alice_client.post(reverse("plan_approve", args=[topic.pk]), {"token_cap": "150 000"})
    assert approved.status_code == 302
    topic.refresh_from_db()
    assert (topic.status, topic.token_cap) == (Topic.Status.QUEUED, 150_000)


def test_the_api_takes_a_cap(alice: User, alice_client: Client) -> None:
    created = alice_client.post(
        "/api/topics",
        {"question": "What is MoT?", "sources": "docs", "token_cap": 5000},
        content_type="application/json",
    )
    assert created.status_code == 201 and created.json()["token_cap"] == 5000
    assert Topic.objects.get(pk=created.json()["id"]).token_cap == 5000


def planned_topic(owner: User, subqueries: int, **fields: Any) -> Topic:
    topic = Topic.objects.create(owner=owner, question="q", status=Topic.Status.AWAITING_APPROVAL, **fields)
    for position in range(subqueries):
        SubQuery.objects.create(topic=topic, position=position, text=f"p{position}")
    return topic


def test_the_search_requests_count_the_scholarly_indexes_a_topic_asks(
    alice: User, alice_client: Client, settings: Any
) -> None:
    for name in ("OPENALEX_URL", "ARXIV_URL", "PUBMED_URL", "CROSSREF_URL"):
        setattr(settings, name, f"http://127.0.0.1:9/{name.lower()}/")
    web = estimate.PROFILE[Topic.Mode.QUICK]["searches"] * 3
    # Per sub-query: OpenAlex and Crossref its Russian and English query, arXiv and PubMed the
    # English one — 6 requests; a papers topic asks no web search.
    papers_only = estimate.estimate(planned_topic(alice, 3, sources=Topic.Sources.PAPERS))
    assert papers_only["paper_searches"].mid == 18 and papers_only["searches"].mid == 18
    always = estimate.estimate(planned_topic(alice, 3, papers=Topic.Papers.ALWAYS))
    assert always["searches"].mid == web + 18
    never = estimate.estimate(planned_topic(alice, 3, papers=Topic.Papers.NEVER))
    assert never["paper_searches"] is None and never["searches"].mid == web
    # A deep run's rounds add sub-queries: more requests, and a wider range.
    deep = estimate.estimate(planned_topic(alice, 3, sources=Topic.Sources.PAPERS, mode=Topic.Mode.DEEP))
    assert deep["paper_searches"].low == 18 < deep["paper_searches"].mid < deep["paper_searches"].high
    # Fewer indexes configured, fewer requests: arXiv alone takes the English query only.
    settings.OPENALEX_URL = settings.PUBMED_URL = settings.CROSSREF_URL = ""
    topic = planned_topic(alice, 3, sources=Topic.Sources.PAPERS)
    assert estimate.estimate(topic)["searches"].mid == 3
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "3–3 search requests (3–3 of them to scholarly indexes)" in page


def test_a_long_reports_estimate_follows_the_pages_it_reads_and_the_evidence_its_sections_get(
    alice: User,
) -> None:
    """A long sectioned report reads twice the pages per sub-query (read.pages_per_subquery):
    the estimate adds that reading's share of the run; and a section's evidence is modelled
    within twice its share of the pages this instance reads, so short pages cost less."""
    from research.models import Document

    def plan(length: str) -> Topic:
        topic = Topic.objects.create(
            owner=alice,
            question="q",
            status=Topic.Status.AWAITING_APPROVAL,
            report_kind="detailed",
            report_length=length,
            outline=["A", "B", "C", "D", "E"],
        )
        for position in range(3):
            SubQuery.objects.create(topic=topic, position=position, text=f"p{position}")
        return topic

    short, long = plan("short"), plan("long")
    base = estimate.PROFILE[Topic.Mode.QUICK]
    reading = estimate.READING_SHARE * (read_pages(long) / read_pages(short) - 1)
    short_calls = estimate.estimate(short)["calls"].mid - base["calls"] * 3
    long_calls = estimate.estimate(long)["calls"].mid - base["calls"] * 3
    assert long_calls - short_calls == pytest.approx(reading * base["calls"] * 3)
    # No page read yet: a page is taken as PAGE_CHARS long, and no section's share binds.
    long_pages = estimate.estimate(long)["tokens"].mid, estimate.estimate(short)["tokens"].mid
    Document.objects.create(
        topic=long, url="https://example.org/a", title="a", text="x" * 1500, fetched_via="reader"
    )
    assert estimate.page_chars() == 1500
    # On pages of 1,500 characters a long section's share (10 sources × 1,500 × 2 / 5 sections)
    # is under its 12,000 characters; a short one's (5 × 1,500 × 2 / 5) is its 3,000.
    assert estimate.estimate(long)["tokens"].mid < long_pages[0]
    assert estimate.estimate(short)["tokens"].mid == pytest.approx(long_pages[1])


def read_pages(topic: Topic) -> int:
    from research.pipeline.stages import read

    return read.pages_per_subquery(topic)
