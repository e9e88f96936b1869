"""SearXNG search against a loopback server that answers as SearXNG does."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from mindsearch.clients import websearch
from mindsearch.clients.websearch import SearchError
from mindsearch.models import RateLimitGrant
from tests.support.fakes import FakeService, Fault, Request, Response, searxng_config, searxng_search
from tests.support.processes import free_port

RESULTS: list[dict[str, Any]] = [
    {
        "url": "https://arxiv.org/abs/2310.15961",
        "title": "Mixture of Tokens",
        "content": "Continuous MoE through cross-example aggregation",
        "engine": "arxiv",
        "engines": ["arxiv", "google scholar"],
        "publishedDate": "2023-10-24T17:59:01",
    },
    {"url": "", "title": "No URL, dropped"},
    {
        "url": "https://example.org/post",
        "title": "A post",
        "content": "snippet",
        "publishedDate": "2024-05-01T08:00:00+02:00",
    },
]


@pytest.fixture(autouse=True)
def no_rate_limit(settings):
    settings.LIMIT_SEARXNG_RPM = 0
    settings.SEARXNG_BASIC_AUTH_LOGIN = ""
    settings.SEARXNG_BASIC_AUTH_PASSWORD = ""


@pytest.fixture
def fake(settings):
    route = searxng_search(lambda request: RESULTS, unresponsive=[("google", "timeout"), ("bing", "CAPTCHA")])
    with FakeService({("GET", "/search"): route}) as service:
        settings.SEARXNG_URL = service.url.rstrip("/")
        yield service


def search(query: str = "mixture of tokens", **kwargs) -> websearch.SearchResponse:
    kwargs.setdefault("language", "en")
    return asyncio.run(websearch.search(query, **kwargs))


def test_results_are_parsed(fake) -> None:
    response = search()
    assert [r.url for r in response.results] == [
        "https://arxiv.org/abs/2310.15961",
        "https://example.org/post",
    ]
    first = response.results[0]
    assert first.title == "Mixture of Tokens"
    assert first.snippet == "Continuous MoE through cross-example aggregation"
    assert first.engine == "arxiv"
    assert first.engines == ["arxiv", "google scholar"]
    assert first.position == 1
    assert first.published_at == datetime(2023, 10, 24, 17, 59, 1, tzinfo=UTC)
    assert response.results[1].position == 2
    second = response.results[1].published_at
    offset = second.utcoffset() if second is not None else None
    assert offset is not None and offset.total_seconds() == 7200


def test_unresponsive_engines_are_kept(fake) -> None:
    assert search().unresponsive_engines == ["google: timeout", "bing: CAPTCHA"]


def test_params_sent(fake) -> None:
    search("смесь токенов", language="ru", time_range="month", pageno=2, categories="science")
    request = fake.requests_to("/search")[0]
    assert request.query == {
        "q": ["смесь токенов"],
        "format": ["json"],
        "language": ["ru"],
        "pageno": ["2"],
        "time_range": ["month"],
        "categories": ["science"],
    }


def test_empty_options_are_left_out(fake) -> None:
    search()
    query = fake.requests_to("/search")[0].query
    assert "time_range" not in query
    assert "categories" not in query
    assert query["pageno"] == ["1"]


def test_basic_auth_is_sent(settings) -> None:
    route = searxng_search(lambda request: RESULTS, auth=("searcher", "s3cret"))
    with FakeService({("GET", "/search"): route}) as service:
        settings.SEARXNG_URL = service.url
        settings.SEARXNG_BASIC_AUTH_LOGIN = "searcher"
        settings.SEARXNG_BASIC_AUTH_PASSWORD = "s3cret"
        assert len(search().results) == 2
        assert service.requests[0].headers["authorization"] == "Basic c2VhcmNoZXI6czNjcmV0"


def test_wrong_credentials(settings) -> None:
    route = searxng_search(lambda request: RESULTS, auth=("searcher", "s3cret"))
    with FakeService({("GET", "/search"): route}) as service:
        settings.SEARXNG_URL = service.url
        settings.SEARXNG_BASIC_AUTH_LOGIN = "searcher"
        settings.SEARXNG_BASIC_AUTH_PASSWORD = "wrong"
        with pytest.raises(SearchError, match=r"rejected the basic-auth credentials \(HTTP 401\)"):
            search()
        assert len(service.requests) == 1


def test_json_format_not_enabled(fake) -> None:
    fake.inject(Fault(403, body=b"Forbidden", headers={"Content-Type": "text/html"}))
    with pytest.raises(SearchError, match=r"refused format=json \(HTTP 403\): enable json in search.formats"):
        search()


def test_the_fake_refuses_other_formats_like_searxng(fake) -> None:
    assert searxng_search(lambda request: [])(_request({"format": ["html"]})).status == 403


def _request(query: dict) -> Request:
    return Request("GET", "/search", query, {}, b"")


def test_not_reachable(settings) -> None:
    settings.SEARXNG_URL = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SearchError, match=r"SearXNG is not reachable at http://127.0.0.1"):
        search()


def test_not_json(fake) -> None:
    fake.inject(Fault(200, body=b"<html>not json</html>", headers={"Content-Type": "text/html"}))
    with pytest.raises(SearchError, match=r"something other than JSON"):
        search()


def test_json_but_not_searxng(fake) -> None:
    fake.inject(Fault(200, body=["a", "list"]))
    with pytest.raises(SearchError, match=r"something other than"):
        search()


def test_one_retry_after_a_5xx(fake) -> None:
    fake.inject(Fault(502))
    assert len(search().results) == 2
    assert len(fake.requests) == 2


def test_two_5xx_fail(fake) -> None:
    fake.inject(Fault(502), Fault(503))
    with pytest.raises(SearchError, match=r"HTTP 503"):
        search()
    assert len(fake.requests) == 2


def test_one_retry_after_a_timeout(fake, monkeypatch) -> None:
    monkeypatch.setattr(websearch, "TIMEOUT_SECONDS", 0.3)
    fake.inject(Fault.hang(1.0))
    assert len(search().results) == 2


def test_two_timeouts_fail(fake, monkeypatch) -> None:
    monkeypatch.setattr(websearch, "TIMEOUT_SECONDS", 0.3)
    fake.inject(Fault.hang(1.0), Fault.hang(1.0))
    with pytest.raises(SearchError, match=r"did not answer within 0.3 s"):
        search()


def test_429_from_the_limiter_is_not_retried(fake) -> None:
    fake.inject(Fault(429, body="Too Many Requests"))
    with pytest.raises(SearchError, match=r"HTTP 429"):
        search()
    assert len(fake.requests) == 1


def test_not_configured(settings) -> None:
    settings.SEARXNG_URL = ""
    assert not websearch.is_configured()
    with pytest.raises(SearchError, match=r"SEARXNG_URL"):
        search()


def test_url_with_a_path_prefix(settings) -> None:
    route = searxng_search(lambda request: RESULTS)
    with FakeService({("GET", "/searxng/search"): route}) as service:
        settings.SEARXNG_URL = f"{service.url}searxng"
        assert len(search().results) == 2


@pytest.mark.django_db(transaction=True)
def test_a_rate_limit_slot_is_taken_per_request(fake, settings) -> None:
    settings.LIMIT_SEARXNG_RPM = 600
    fake.inject(Fault(500))
    search()
    assert RateLimitGrant.objects.filter(name="searxng").count() == 2


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-01-02T03:04:05", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05Z", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02", datetime(2024, 1, 2, tzinfo=UTC)),
        ("", None),
        (None, None),
        ("yesterday", None),
        (1700000000, None),
    ],
)
def test_parse_date(value, expected) -> None:
    assert websearch.parse_date(value) == expected


def test_fake_fills_searxng_fields() -> None:
    payload = searxng_search(lambda request: [{"url": "https://a.example/"}])(_request({"format": ["json"]}))
    assert isinstance(payload, Response) and isinstance(payload.body, dict)
    item = payload.body["results"][0]
    assert {"url", "title", "content", "engine", "engines", "score", "category"} <= item.keys()


# --- the instance's /config (the status page's probe; the time filter's engines) ----------------


def test_read_config_lists_the_enabled_engines_with_basic_auth(settings) -> None:
    routes = {("GET", "/config"): searxng_config("duckduckgo", "arxiv", timed=("arxiv",))}
    with FakeService(routes) as service:
        settings.SEARXNG_URL = service.url
        settings.SEARXNG_BASIC_AUTH_LOGIN, settings.SEARXNG_BASIC_AUTH_PASSWORD = "searcher", "s3cret"
        config = asyncio.run(websearch.read_config(2.0))
        assert service.requests[0].headers["authorization"].startswith("Basic ")
    assert config.status == 200 and config.is_json
    assert [(e["name"], e["time_range_support"]) for e in config.engines or []] == [
        ("duckduckgo", False),
        ("arxiv", True),
    ]


def test_read_config_of_something_else(settings) -> None:
    routes = {("GET", "/config"): lambda request: Response(200, "<html>")}
    with FakeService(routes) as service:
        settings.SEARXNG_URL = service.url
        assert asyncio.run(websearch.read_config(2.0)) == websearch.InstanceConfig(200)
        service.routes[("GET", "/config")] = lambda request: Response(200, {"instance_name": "x"})
        assert asyncio.run(websearch.read_config(2.0)) == websearch.InstanceConfig(200, is_json=True)
        service.inject(Fault(401, body="Unauthorized"))
        assert asyncio.run(websearch.read_config(2.0)).status == 401
