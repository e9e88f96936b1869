"""How real SearXNG instances behave, and the search stage coping with it.

- With `time_range` given, SearXNG skips every engine without time-range support (searx's
  `search/__init__.py`: engines whose `time_range_support` is false are left out of the
  request); an instance whose engines all lack it answers with no results and no error.
- Engines suspended after errors or a CAPTCHA, or timing out, are listed in
  `unresponsive_engines` as [name, reason] pairs; when all of them fail the answer is empty.
- Results come 10 to a page, further pages with `pageno`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from mindsearch.clients import websearch
from research.models import CacheEntry, Hit, RunEvent, SearchQuery, Topic
from research.pipeline.stages import search
from tests.reliability.runs import research
from tests.support.fakes import Request, Response, searxng_config
from tests.support.world import World

pytestmark = pytest.mark.django_db

SEARCH = "/search"
RECENT_QUESTION = "What improvements to Mixture of Tokens were published in the past 6 months?"


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(websearch, "BACKOFF_SECONDS", 0.01)
    monkeypatch.setattr(websearch, "_configs", {})  # a port reused by another test's SearXNG


def body_of(response: Response) -> dict[str, Any]:
    body = response.body
    if isinstance(body, dict):
        return body
    assert isinstance(body, str | bytes), body
    parsed: dict[str, Any] = json.loads(body)
    return parsed


def wrap_results(world: World, change: Callable[[Request, Response], Response]) -> None:
    original = world.searxng.routes[("GET", SEARCH)]
    world.searxng.routes[("GET", SEARCH)] = lambda request: change(request, original(request))


def engines_without_time_ranges(request: Request, response: Response) -> Response:
    """An instance whose engines all lack time-range support: a filtered search finds nothing."""
    if request.param("time_range"):
        return Response(200, {**body_of(response), "results": [], "number_of_results": 0})
    return response


def dated(published: dict[str, str]) -> Callable[[Request, Response], Response]:
    """Results carry a publishedDate for the pages named (by slug)."""

    def change(request: Request, response: Response) -> Response:
        results = [
            {**item, "publishedDate": published.get(item["url"].split("/pages/")[1].split("?")[0])}
            for item in body_of(response)["results"]
        ]
        return Response(200, {**body_of(response), "results": results})

    return change


def research_a_recent_question(
    owner: User, loopback: World, engines: Callable[[Request, Response], Response], *, timed: bool = False
) -> Topic:
    """RECENT_QUESTION researched where `engines` shape each answer, the MoT paper dates from 900
    days ago and the improvements page from 20; `timed`: of brave and bing, brave alone supports
    time ranges (the instance's /config says so)."""
    now = timezone.now()
    published = {
        "mot-paper": (now - timedelta(days=900)).isoformat(),
        "mot-improve": (now - timedelta(days=20)).isoformat(),
    }
    if timed:
        loopback.searxng.routes[("GET", "/config")] = searxng_config("brave", "bing", timed=("brave",))
    wrap_results(loopback, lambda request, response: dated(published)(request, engines(request, response)))
    topic = research(owner, question=RECENT_QUESTION)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    return topic


def test_a_time_filter_that_empties_every_search_is_widened_and_the_topic_completes(
    alice: User, loopback: World
) -> None:
    topic = research_a_recent_question(alice, loopback, engines_without_time_ranges)
    assert topic.time_range == "year"
    asked = loopback.searxng.requests_to(SEARCH)
    assert {r.param("time_range") for r in asked} == {"year", ""}
    urls = set(Hit.objects.filter(topic=topic).values_list("normalized_url", flat=True))
    # Dated outside the period: dropped; dated inside, or undated: kept.
    assert not any(url.endswith("/pages/mot-paper") for url in urls)
    assert any(url.endswith("/pages/mot-improve") for url in urls)
    assert any(url.endswith("/pages/mot-uses") for url in urls)
    widened = RunEvent.objects.filter(topic=topic, stage="search", message__contains="with the time filter")
    assert widened.exists()


def one_engine_with_time_ranges(request: Request, response: Response) -> Response:
    """An instance where one of its engines supports time ranges (its /config says so): a
    filtered search finds two pages."""
    if request.param("time_range"):
        results = [item for item in body_of(response)["results"] if "/pages/mot-paper" not in item["url"]]
        return Response(200, {**body_of(response), "results": results[:2], "number_of_results": 2})
    return response


def test_a_time_filter_that_leaves_few_results_is_widened_and_keeps_them_first(
    alice: User, loopback: World
) -> None:
    topic = research_a_recent_question(alice, loopback, one_engine_with_time_ranges, timed=True)
    asked = loopback.searxng.requests_to(SEARCH)
    assert {r.param("time_range") for r in asked} == {"year", ""}
    # Every query kept more than the filter's two results; the old page is not among them.
    counts = list(SearchQuery.objects.filter(subquery__topic=topic).values_list("result_count", flat=True))
    assert counts and sum(count is not None and count > 2 for count in counts) * 2 > len(counts), counts
    hits = Hit.objects.filter(topic=topic)
    assert hits.filter(normalized_url__endswith="/pages/mot-improve").exists()
    assert not hits.filter(normalized_url__endswith="/pages/mot-paper").exists()
    widened = RunEvent.objects.filter(topic=topic, stage="search", message__startswith="Only 2 results for")
    assert widened.exists()


def engines_that_filter_know_part_of_the_web(request: Request, response: Response) -> Response:
    """The engines that support time ranges answer a filtered search with six results, none of
    them the recent page only the skipped engine indexes (nor the old page, which they filter out)."""
    if request.param("time_range"):
        hidden = ("/pages/mot-improve?", "/pages/mot-paper?")
        results = [item for item in body_of(response)["results"] if not any(h in item["url"] for h in hidden)]
        return Response(200, {**body_of(response), "results": results[:6], "number_of_results": 6})
    return response


def test_a_time_filtered_answer_short_of_a_page_is_widened_when_the_filter_skips_engines(
    alice: User, loopback: World
) -> None:
    """Six results are not "thin", yet they are all the filtering engines know of the period:
    the recent page only a skipped engine indexes is found by asking without the filter."""
    topic = research_a_recent_question(alice, loopback, engines_that_filter_know_part_of_the_web, timed=True)
    filtered = [r for r in loopback.searxng.requests_to(SEARCH) if r.param("time_range")]
    assert filtered and all(r.param("time_range") == "year" for r in filtered)
    assert "" in {r.param("time_range") for r in loopback.searxng.requests_to(SEARCH)}
    hits = Hit.objects.filter(topic=topic)
    assert hits.filter(normalized_url__endswith="/pages/mot-improve").exists()
    assert not hits.filter(normalized_url__endswith="/pages/mot-paper").exists()
    widened = RunEvent.objects.filter(topic=topic, stage="search", message__startswith="Only 6 results for")
    assert widened.exists()


def merged_from_several_engines(request: Request, response: Response) -> Response:
    """Page 1 as an instance with several engines sends it: each engine's ten merged, twenty-two
    results, the ones only one engine found last."""
    results = body_of(response)["results"]
    if request.param("pageno", "1") != "1" or not results:
        return response
    extra = [
        {
            **results[0],
            "url": f"{results[0]['url'].split('/pages/')[0]}/pages/one-engine-{i}",
            "engines": ["mojeek"],
        }
        for i in range(22 - len(results))
    ]
    return Response(200, {**body_of(response), "results": results + extra, "number_of_results": 22})


def test_every_result_of_an_answer_page_is_kept_not_the_first_ten(alice: User, loopback: World) -> None:
    wrap_results(loopback, merged_from_several_engines)
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    counts = list(SearchQuery.objects.filter(subquery__topic=topic).values_list("result_count", flat=True))
    assert counts and all(count is not None and count >= 22 for count in counts), counts
    # What only one engine found, below the tenth place, is a hit like the rest (cut at ten, at most
    # nine of them would be).
    assert Hit.objects.filter(topic=topic, url__contains="/pages/one-engine-").count() >= 12


def test_without_an_llm_the_first_ten_of_a_page_are_used(alice: User, loopback: World, settings: Any) -> None:
    """The keyword fallback cannot tell a rare relevant page from a look-alike below the tenth place."""
    wrap_results(loopback, merged_from_several_engines)
    settings.AITUNNEL_API_KEY = ""
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    # Of each answer page's 22 results the first ten: at most nine of those only one engine found.
    assert 0 < Hit.objects.filter(topic=topic, url__contains="/pages/one-engine-").count() < 10


def test_a_time_filter_that_finds_something_is_kept(alice: User, loopback: World) -> None:
    topic = research(alice, question=RECENT_QUESTION)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert {r.param("time_range") for r in loopback.searxng.requests_to(SEARCH)} == {"year"}


def test_a_thin_time_filtered_answer_is_kept_when_every_engine_supports_the_filter(
    alice: User, loopback: World
) -> None:
    loopback.searxng.routes[("GET", "/config")] = searxng_config("brave", "bing", timed=("brave", "bing"))
    wrap_results(loopback, one_engine_with_time_ranges)
    topic = research(alice, question=RECENT_QUESTION)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert {r.param("time_range") for r in loopback.searxng.requests_to(SEARCH)} == {"year"}


def all_engines_down(request: Request, response: Response) -> Response:
    body = {**body_of(response), "results": [], "number_of_results": 0}
    body["unresponsive_engines"] = [["google", "Suspended: CAPTCHA"], ["bing", "timeout"]]
    return Response(200, body)


def test_engines_that_did_not_answer_are_an_outage_retried_never_cached(alice: User, loopback: World) -> None:
    healthy = loopback.searxng.routes[("GET", SEARCH)]
    wrap_results(loopback, all_engines_down)
    failed = research(alice)
    assert failed.status == Topic.Status.FAILED
    assert "did not answer (google: Suspended: CAPTCHA; bing: timeout)" in failed.error, failed.error
    assert "found nothing" not in failed.error
    tries = [(r.param("q"), r.param("language")) for r in loopback.searxng.requests_to(SEARCH)]
    assert max(tries.count(t) for t in tries) == websearch.ENGINES_DOWN_ATTEMPTS
    assert not CacheEntry.objects.filter(kind=CacheEntry.Kind.SEARCH_RESULTS).exists()

    # The engines come back: the same question asked again searches again and completes.
    loopback.searxng.routes[("GET", SEARCH)] = healthy
    before = len(loopback.searxng.requests_to(SEARCH))
    again = research(alice)
    assert again.status == Topic.Status.COMPLETED, again.error
    assert len(loopback.searxng.requests_to(SEARCH)) > before


def test_some_engines_missing_is_cached_briefly(alice: User, loopback: World) -> None:
    def partial(request: Request, response: Response) -> Response:
        return Response(200, {**body_of(response), "unresponsive_engines": [["google", "timeout"]]})

    wrap_results(loopback, partial)
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    entries = CacheEntry.objects.filter(kind=CacheEntry.Kind.SEARCH_RESULTS)
    assert entries.exists()
    latest = timezone.now() + search.PARTIAL_TTL
    assert all(entry.expires_at <= latest for entry in entries)
    assert SearchQuery.objects.filter(
        subquery__topic=topic, unresponsive_engines=["google: timeout"]
    ).exists()


def test_no_results_and_no_outage_says_nothing_was_found(alice: User, loopback: World) -> None:
    wrap_results(loopback, lambda request, response: Response(200, {**body_of(response), "results": []}))
    topic = research(alice)
    assert topic.status == Topic.Status.FAILED
    assert "found nothing" in topic.error, topic.error


def test_a_full_first_page_with_few_new_hits_asks_for_page_two(alice: User, loopback: World) -> None:
    def paged(request: Request, response: Response) -> Response:
        # Page 1 is ten copies of pages every query finds; page 2 has the rest.
        results = body_of(response)["results"]
        if request.param("pageno") == "2":
            return Response(200, {**body_of(response), "results": results})
        first = [{**results[0], "url": f"{results[0]['url']}&copy={i}"} for i in range(10)] if results else []
        return Response(200, {**body_of(response), "results": first})

    wrap_results(loopback, paged)
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    pages = [r.param("pageno") for r in loopback.searxng.requests_to(SEARCH)]
    assert "2" in pages
    second = Hit.objects.filter(topic=topic, position__gte=10)
    assert second.exists()
