"""The front of a round overlapped per sub-query (research/pipeline/overlap.py): a sub-query's
hits are scored and its best page read while later sub-queries still wait for the search
limiter; the rows are those of the stages run one after another; a run stopped midway resumes
without asking anything twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from research.models import Document, Hit, SearchQuery, Summary, Topic
from research.pipeline import overlap
from research.pipeline.context import db
from research.pipeline.run import plan_topic, run_topic
from tests.support.world import TOPIC, World, prompt_kind, world

pytestmark = pytest.mark.django_db


@pytest.fixture
def limited(settings: Any) -> Iterator[World]:
    """The loopback world with a search limit that spaces searches half a second apart."""
    with world(search_latency=0.2, extra_pages=30, queries_per_language=3) as w:
        for name, value in w.settings().items():
            setattr(settings, name, value)
        settings.LIMIT_SEARXNG_RPM = 120
        yield w


def _kinds(w: World) -> list[tuple[float, str]]:
    return [
        (request.arrived, prompt_kind(request.json()["messages"][0]["content"]))
        for request in w.llm.requests_to("/v1/chat/completions")
    ]


def test_hits_are_scored_and_pages_read_while_later_searches_wait(alice: User, limited: World) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
    assert plan_topic(topic.pk)
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    last_search = max(request.arrived for request in limited.searxng.requests)
    first = {kind: min(at for at, k in _kinds(limited) if k == kind) for kind in ("score", "summarise")}
    # Run as stages, every scoring call and summary came after the last search.
    assert first["score"] < last_search
    assert first["summarise"] < last_search
    assert min(request.arrived for request in limited.reader.requests) < last_search


def test_the_overlapped_front_makes_the_rows_the_stages_make(alice: User, limited: World) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
    plan_topic(topic.pk)
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    assert not SearchQuery.objects.filter(subquery__topic=topic, searched_at__isnull=True).exists()
    assert not Hit.objects.filter(topic=topic, score__isnull=True).exists()
    # Each URL once, owned by one sub-query; the topic-wide reading budget: five pages a sub-query.
    urls = Hit.objects.filter(topic=topic).values_list("normalized_url", flat=True)
    assert len(urls) == len(set(urls))
    assert Document.objects.filter(topic=topic).count() == 5 * topic.subqueries.count()
    assert (
        Summary.objects.filter(document__topic=topic).count() == Document.objects.filter(topic=topic).count()
    )
    # Every sub-query has a page (its best hit is always read).
    assert set(Document.objects.filter(topic=topic).values_list("hit__subquery", flat=True)) == set(
        topic.subqueries.values_list("pk", flat=True)
    )


def test_a_run_killed_in_the_overlapped_front_resumes_without_asking_twice(
    alice: User, limited: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
    plan_topic(topic.pk)
    scored = overlap._score

    async def killed_at_the_second(ctx: Any, subquery: Any, progress: Any) -> None:
        if subquery.position > 1:
            raise RuntimeError("worker killed")
        await scored(ctx, subquery, progress)

    monkeypatch.setattr(overlap, "_score", killed_at_the_second)
    with pytest.raises(RuntimeError):
        run_topic(topic.pk)
    assert Hit.objects.filter(topic=topic, score__isnull=False).exists()
    assert Hit.objects.filter(topic=topic, score__isnull=True).exists()
    monkeypatch.setattr(overlap, "_score", scored)
    topic.set_status(Topic.Status.QUEUED)
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    searches = Counter((r.param("q"), r.param("pageno", "1")) for r in limited.searxng.requests)
    assert max(searches.values()) == 1
    chats = limited.llm.requests_to("/v1/chat/completions")
    asked = Counter(request.json()["messages"][-1]["content"] for request in chats)
    assert max(asked.values()) == 1
    assert not Hit.objects.filter(topic=topic, score__isnull=True).exists()


def test_topics_that_need_every_hit_at_once_run_the_stages(alice: User, limited: World) -> None:
    from research.pipeline.context import RunContext

    web = Topic.objects.create(owner=alice, question=TOPIC)
    assert overlap.applies(RunContext.for_topic(web))
    both = Topic.objects.create(owner=alice, question=TOPIC, sources=Topic.Sources.BOTH)
    assert not overlap.applies(RunContext.for_topic(both))


def test_a_page_of_results_is_saved_in_a_few_statements(
    alice: User, django_assert_max_num_queries: Any
) -> None:
    from research.models import SubQuery
    from research.pipeline.stages import search

    topic = Topic.objects.create(owner=alice, question=TOPIC)
    subquery = SubQuery.objects.create(topic=topic, position=1, text="Mixture of Tokens")
    first, second = (
        SearchQuery.objects.create(subquery=subquery, language="en", position=i, text=f"q{i}") for i in (0, 1)
    )

    def page(urls: list[str]) -> dict:
        results = [
            {"url": url, "title": url, "snippet": "", "engine": "bing", "published_at": None} for url in urls
        ]
        return {"results": results, "unresponsive_engines": []}

    urls = [f"https://example.org/{i}?utm_source=x" for i in range(20)]
    with django_assert_max_num_queries(4):
        assert search._save_hits(topic, first, page(urls)) == 20
    # Known URLs (after normalising) and repeats within the page are not new.
    again = [f"https://example.org/{i}" for i in range(15, 25)] + ["https://example.org/24"]
    assert search._save_hits(topic, second, page(again)) == 5
    assert Hit.objects.filter(topic=topic).count() == 25
    assert Hit.objects.filter(search_query=second).count() == 5
    assert list(
        Hit.objects.filter(search_query=second).order_by("position").values_list("position", flat=True)
    ) == [5, 6, 7, 8, 9]
    second.refresh_from_db()
    assert second.result_count == 11 and second.searched_at is not None


def test_cancel_stops_the_overlapped_front_between_two_calls(
    alice: User, limited: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The front runs searches, scoring and reading as one step of the run loop: a Cancel made
    while it runs stops it at the next call, not after every sub-query is searched and scored."""
    topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
    plan_topic(topic.pk)
    searched = overlap._search

    async def cancelled_after_the_first(ctx: Any, query: Any, progress: Any, failures: list[str]) -> Any:
        response = await searched(ctx, query, progress, failures)
        await db(Topic.objects.filter(pk=topic.pk).update)(status=Topic.Status.CANCELLED)
        return response

    monkeypatch.setattr(overlap, "_search", cancelled_after_the_first)
    run_topic(topic.pk)
    asked = SearchQuery.objects.filter(subquery__topic=topic).count()
    # Searches leave every half second; the Cancel is seen within a second of it.
    assert len(limited.searxng.requests) <= 4 < asked, "the search went on after the Cancel"
    assert not limited.reader.requests
    assert Topic.objects.get(pk=topic.pk).status == Topic.Status.CANCELLED
