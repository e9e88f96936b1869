"""Fault matrix, SearXNG rows: down, refusing, slow, rate-limited and empty, end to end.

A search that fails for every query fails the topic with SearXNG's reason and keeps the plan
and the queries; a search that fails for some queries only is a warning and the run goes on.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.contrib.auth.models import User

from mindsearch.clients import websearch
from research.models import SearchQuery, SubQuery, Topic
from tests.reliability.runs import research, row_counts, warnings_of
from tests.support.fakes import Fault, Response
from tests.support.world import World

pytestmark = pytest.mark.django_db

SEARCH = "/search"


def assert_failed_keeping_the_plan(topic: Topic, message: str) -> None:
    assert topic.status == Topic.Status.FAILED
    assert message in topic.error, topic.error
    saved = row_counts(topic)
    assert saved["subqueries"] == 3 and saved["search_queries"] == 12, saved
    assert set(SubQuery.objects.filter(topic=topic).values_list("origin", flat=True)) == {"llm"}


def test_a_slow_answer_is_retried_once_and_the_run_completes(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(websearch, "TIMEOUT_SECONDS", 2.0)
    loopback.searxng.inject(Fault.hang(5.0, path=SEARCH))
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    hung = loopback.searxng.requests_to(SEARCH)[0]
    asked = [(r.param("q"), r.param("language")) for r in loopback.searxng.requests_to(SEARCH)]
    assert asked.count((hung.param("q"), hung.param("language"))) == 2
    assert not warnings_of(topic, "search")


def test_searxng_slower_than_the_timeout_every_time_fails_the_topic_clearly(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(websearch, "TIMEOUT_SECONDS", 0.3)
    loopback.searxng.latency = 1.0
    topic = research(alice)
    assert_failed_keeping_the_plan(topic, "SearXNG did not answer within 0.3 s")
    tries = Counter((r.param("q"), r.param("language")) for r in loopback.searxng.requests_to(SEARCH))
    # One retry each, no more. (Under load some tries time out before the fake accepts them.)
    assert tries and max(tries.values()) <= 2


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (Response(401, "Unauthorized", {"WWW-Authenticate": 'Basic realm="searxng"'}), "basic-auth"),
        (Response(403, b"<html>403</html>", {"Content-Type": "text/html"}), "enable json"),
        (Response(429, "Too Many Requests"), "limiter refused the search (HTTP 429)"),
        (Response(502, "Bad Gateway"), "SearXNG failed (HTTP 502)"),
        (Response(200, b"<html>not json</html>", {"Content-Type": "text/html"}), "other than JSON"),
    ],
)
def test_searxng_refusing_every_search_fails_the_topic_with_its_reason(
    alice: User, loopback: World, answer: Response, message: str
) -> None:
    loopback.searxng.routes[("GET", SEARCH)] = lambda request: answer
    topic = research(alice)
    assert_failed_keeping_the_plan(topic, message)


def test_some_failed_searches_are_warnings_and_the_run_completes(alice: User, loopback: World) -> None:
    search = loopback.searxng.routes[("GET", SEARCH)]
    # The third English query of each sub-query ("… arxiv") fails both of its tries.
    loopback.searxng.routes[("GET", SEARCH)] = lambda request: (
        Response(502, "Bad Gateway") if request.param("q").endswith("arxiv") else search(request)
    )
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    failed = [m for m in warnings_of(topic, "search") if "Search failed" in m]
    assert len(failed) == 3 and all("HTTP 502" in m for m in failed)
    assert SearchQuery.objects.filter(subquery__topic=topic, searched_at__isnull=True).count() == 3


def test_no_results_at_all_fails_the_topic_saying_so(alice: User, loopback: World) -> None:
    loopback.searxng.routes[("GET", SEARCH)] = lambda request: Response(
        200, {"query": request.param("q"), "results": [], "unresponsive_engines": []}
    )
    topic = research(alice)
    assert topic.status == Topic.Status.FAILED
    assert "found nothing" in topic.error, topic.error
    assert row_counts(topic)["search_queries"] == 12
    assert SearchQuery.objects.filter(subquery__topic=topic, result_count=0).count() == 12
