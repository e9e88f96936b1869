"""One way of asking the small JSON services asked before the web (Open-Meteo, Nominatim,
Alpha Vantage, TheSportsDB, OSRM): `get` sends one request and turns a failure worth another
try (a timeout, a dropped connection, a 5xx, a 429) into `Retryable`; `with_retries` tries it
again after a pause, and after the last attempt turns it into the client's own error, which the
topic's log shows. Each client reads the answer its service's way."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx

from mindsearch.clients import tls

T = TypeVar("T")

TIMEOUT_SECONDS = 15.0
ATTEMPTS = 2
PAUSE_SECONDS = 1.0


class Retryable(Exception):
    """A failure another attempt may not meet."""


async def with_retries(attempt: Callable[[], Awaitable[T]], *, error: type[Exception]) -> T:
    for number in range(1, ATTEMPTS + 1):
        try:
            return await attempt()
        except Retryable as failure:
            if number == ATTEMPTS:
                raise error(f"{failure} (gave up after {number} attempts)") from failure
            await asyncio.sleep(PAUSE_SECONDS)
    raise AssertionError("unreachable")


def json_or_none(response: httpx.Response) -> Any:
    """The answer's JSON, or None when it is not JSON (an error page, an empty body)."""
    try:
        return response.json()
    except ValueError:
        return None


def answer_of(
    response: httpx.Response,
    *,
    name: str,
    error: type[Exception],
    expected: type = dict,
    what: str = "a JSON object",
    hint: str = "",
    reason: Callable[[httpx.Response], str] | None = None,
) -> Any:
    """The JSON of an HTTP 200 answer, of the `expected` type (`what` in a message); `error`
    when the service refused (with its `reason`) or answered something else (with a `hint`)."""
    if response.status_code != 200:
        why = f": {reason(response)}" if reason and reason(response) else ""
        raise error(f"{name} refused the request (HTTP {response.status_code}){why}")
    body = json_or_none(response)
    if body is None:
        raise error(f"{name} answered, but not with JSON{hint}")
    if not isinstance(body, expected):
        raise error(f"{name} answered, but not with {what}")
    return body


def _no_reason(response: httpx.Response) -> str:
    return ""


async def get(
    url: str,
    *,
    name: str,
    headers: Mapping[str, str] | None = None,
    key_in_url: bool = False,
    reason: Callable[[httpx.Response], str] = _no_reason,
) -> httpx.Response:
    """One GET asking for JSON from the service the log calls `name`; any answer but a 5xx or a
    429 is returned. `key_in_url`: a connection error's message may quote the URL, and so the
    key, so only the kind of failure is named. `reason`: the service's own words for a 5xx or
    429, added to the message."""
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS, verify=tls.context()) as client:
            response = await client.get(url, headers={"Accept": "application/json", **(headers or {})})
    except httpx.TimeoutException:
        raise Retryable(f"{name} did not answer within {TIMEOUT_SECONDS:g} s") from None
    except httpx.HTTPError as exc:
        if key_in_url:
            raise Retryable(f"{name} is not reachable ({type(exc).__name__})") from None
        raise Retryable(f"{name} is not reachable: {exc}") from exc
    if response.status_code == 429 or response.status_code >= 500:
        raise Retryable(f"{name} answered HTTP {response.status_code} {reason(response)}".strip())
    return response
