"""Web search through a SearXNG instance's JSON API."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin

import httpx
from django.conf import settings

from mindsearch.clients import probe, ratelimit, tls

TIMEOUT_SECONDS = 20.0
ATTEMPTS = 2
# An answer with no results because every engine failed (suspended after errors or a CAPTCHA,
# timed out) is asked again after a pause that doubles: engines come back after a while.
ENGINES_DOWN_ATTEMPTS = 3
BACKOFF_SECONDS = 2.0


@dataclass(frozen=True)
class SearchResult:
    url: str
    title: str
    snippet: str
    engine: str
    engines: list[str]
    position: int
    published_at: datetime | None


@dataclass(frozen=True)
class SearchResponse:
    results: list[SearchResult]
    unresponsive_engines: list[str]


class SearchError(Exception):
    """The search could not be run; the message is shown to the user."""


class _Retryable(SearchError):
    """A failure worth one more try: a timeout, a dropped connection, a 5xx."""


class EnginesDown(SearchError):
    """SearXNG answered, but with no results because its engines did not: an outage, not an
    answer (never cached as "nothing found")."""

    def __init__(self, engines: list[str]) -> None:
        self.engines = engines
        super().__init__(f"the search engines did not answer ({'; '.join(engines)})")


def is_configured() -> bool:
    return bool(settings.SEARXNG_URL)


async def search(
    query: str,
    *,
    language: str,
    time_range: str = "",
    pageno: int = 1,
    categories: str = "",
    user: int | None = None,
) -> SearchResponse:
    """Run one SearXNG search: one retry on a timeout, connection error or 5xx; an answer whose
    engines all failed is asked again with backoff and then raised as `EnginesDown`. Every try
    waits for its turn, in `user`'s share, under the global limit."""
    if not is_configured():
        raise SearchError("SearXNG is not configured: set SEARXNG_URL")
    params = search_params(
        query, language=language, time_range=time_range, pageno=pageno, categories=categories
    )
    for attempt in range(ENGINES_DOWN_ATTEMPTS):
        response = await _search_retrying(params, user)
        if response.results or not response.unresponsive_engines:
            return response
        if attempt < ENGINES_DOWN_ATTEMPTS - 1:
            await asyncio.sleep(BACKOFF_SECONDS * 2**attempt)
    raise EnginesDown(response.unresponsive_engines)


async def _search_retrying(params: dict[str, Any], user: int | None) -> SearchResponse:
    for _retry in range(ATTEMPTS - 1):
        try:
            return await _search_once(params, user)
        except _Retryable:
            pass
    return await _search_once(params, user)


async def _search_once(params: dict[str, Any], user: int | None) -> SearchResponse:
    await ratelimit.acquire_search(user=user)
    return parse_response(await _get(params))


def search_params(
    query: str, *, language: str, time_range: str, pageno: int, categories: str
) -> dict[str, Any]:
    params: dict[str, Any] = {"q": query, "format": "json", "language": language, "pageno": pageno}
    if time_range:
        params["time_range"] = time_range
    if categories:
        params["categories"] = categories
    return params


def _search_url() -> str:
    return urljoin(settings.SEARXNG_URL.rstrip("/") + "/", "search")


def _auth() -> tuple[str, str] | None:
    if not settings.SEARXNG_BASIC_AUTH_LOGIN:
        return None
    return settings.SEARXNG_BASIC_AUTH_LOGIN, settings.SEARXNG_BASIC_AUTH_PASSWORD


async def _get(params: dict[str, Any]) -> dict[str, Any]:
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS, auth=_auth(), verify=tls.context()) as client:
            response = await client.get(_search_url(), params=params, headers={"Accept": "application/json"})
    except httpx.TimeoutException:
        raise _Retryable(f"SearXNG did not answer within {TIMEOUT_SECONDS:g} s") from None
    except httpx.HTTPError as exc:
        raise _Retryable(
            f"SearXNG is not reachable at {settings.SEARXNG_URL}: {exc or type(exc).__name__}"
        ) from exc
    _raise_for_status(response.status_code)
    try:
        return response.json()
    except ValueError:
        raise SearchError("SearXNG answered with something other than JSON") from None


# What /config says of the instance's engines, per SEARXNG_URL, for this long.
CONFIG_TTL_SECONDS = 600.0
_configs: dict[str, tuple[float, list[dict[str, Any]] | None]] = {}


async def time_filter_hides_engines(categories: str = "") -> bool | None:
    """Does a time-filtered search skip engines of these categories ("" is SearXNG's "general")?

    SearXNG leaves every engine without `time_range_support` out of a time-filtered search
    (searx/search/__init__.py), so such a search may come back thin rather than empty. The
    instance's `/config` lists its enabled engines with their categories and that flag; None when
    it cannot be read (an instance or a proxy that does not serve it), so the caller can tell
    "no" from "unknown".
    """
    engines = await _engines()
    if engines is None:
        return None
    wanted = {c.strip() for c in categories.split(",") if c.strip()} or {"general"}
    asked = [e for e in engines if wanted & set(e.get("categories") or [])]
    return any(not e.get("time_range_support") for e in asked)


async def _engines() -> list[dict[str, Any]] | None:
    url = settings.SEARXNG_URL
    known = _configs.get(url)
    if known is not None and time.monotonic() - known[0] < CONFIG_TTL_SECONDS:
        return known[1]
    try:
        config = await read_config(TIMEOUT_SECONDS)
    except probe.Unreachable:
        config = None
    engines = config.engines if config is not None and config.status == 200 else None
    _configs[url] = (time.monotonic(), engines)
    return engines


@dataclass(frozen=True)
class InstanceConfig:
    """What SearXNG's /config answered: its HTTP status; whether the body is a JSON object
    (`is_json`, as SearXNG's is); and the enabled engines it lists (None when it has no list)."""

    status: int
    is_json: bool = False
    engines: list[dict[str, Any]] | None = None


async def read_config(timeout: float) -> InstanceConfig:
    """The instance's /config, asked once with the basic auth the searches send (for the status
    page and the time filter's engines). It takes no slot of the search limit: /config runs no
    engine, and the status page must answer while searches hold the next slots.
    probe.Unreachable when nothing answered within `timeout` seconds; any HTTP answer is
    returned as it is."""
    url = urljoin(settings.SEARXNG_URL.rstrip("/") + "/", "config")
    response = await probe.get(url, timeout=timeout, auth=_auth(), verify=tls.context())
    if response.status_code != 200:
        return InstanceConfig(response.status_code)
    try:
        payload = response.json()
    except ValueError:
        return InstanceConfig(response.status_code)
    if not isinstance(payload, dict):
        return InstanceConfig(response.status_code)
    listed = payload.get("engines")
    if not isinstance(listed, list):
        return InstanceConfig(response.status_code, is_json=True)
    enabled = [e for e in listed if isinstance(e, dict) and e.get("enabled")]
    return InstanceConfig(response.status_code, is_json=True, engines=enabled)


def _raise_for_status(status: int) -> None:
    if status == 200:
        return
    if status == 401:
        raise SearchError("SearXNG rejected the basic-auth credentials (HTTP 401)")
    if status == 403:
        raise SearchError("SearXNG refused format=json (HTTP 403): enable json in search.formats")
    if status == 429:
        raise SearchError("SearXNG's limiter refused the search (HTTP 429)")
    if status >= 500:
        raise _Retryable(f"SearXNG failed (HTTP {status})")
    raise SearchError(f"SearXNG answered HTTP {status}")


def parse_response(payload: Any) -> SearchResponse:
    """SearchResponse from SearXNG's JSON; results without a web URL are dropped.

    A result's URL becomes a link on the topic page: a javascript: or data: URL from an engine
    would be a script link there, and it is no page to read anyway.
    """
    if not isinstance(payload, dict):
        raise SearchError("SearXNG answered with something other than its JSON results")
    items = [
        item for item in payload.get("results") or [] if isinstance(item, dict) and _is_web(item.get("url"))
    ]
    results = [_result(item, position) for position, item in enumerate(items, start=1)]
    return SearchResponse(
        results, [_unresponsive(entry) for entry in payload.get("unresponsive_engines") or []]
    )


def _is_web(url: Any) -> bool:
    return isinstance(url, str) and url.strip().lower().startswith(("http://", "https://"))


def _result(item: dict[str, Any], position: int) -> SearchResult:
    engine = str(item.get("engine") or "")
    return SearchResult(
        url=str(item["url"]),
        title=str(item.get("title") or ""),
        snippet=str(item.get("content") or ""),
        engine=engine,
        engines=[str(e) for e in item.get("engines") or ([engine] if engine else [])],
        position=position,
        published_at=parse_date(item.get("publishedDate")),
    )


def _unresponsive(entry: Any) -> str:
    if isinstance(entry, (list, tuple)) and len(entry) == 2:
        return f"{entry[0]}: {entry[1]}"
    return str(entry)


def parse_date(value: Any) -> datetime | None:
    """SearXNG's publishedDate (ISO 8601, sometimes without a zone, which means UTC)."""
    if not value or not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
