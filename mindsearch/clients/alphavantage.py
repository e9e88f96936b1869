"""Alpha Vantage: a company's name to its ticker (SYMBOL_SEARCH), a ticker to its latest quote
(GLOBAL_QUOTE) and its company facts (OVERVIEW); a currency pair to its rate
(CURRENCY_EXCHANGE_RATE, physical and digital currencies). Needs a key (free at alphavantage.co; the free
tier allows 25 requests a day). Every request waits for its turn under `LIMIT_ALPHA_VANTAGE_RPM`.

The real API's ways of failing, repeated by the stand-in in `tests/support/domain_world.py`: almost
everything is HTTP 200. A bad call or key is `{"Error Message": …}`; a rate or daily limit is
`{"Note": …}` (per minute) or `{"Information": …}` (per day, or a premium-only endpoint); a ticker
it has no quote for is `{"Global Quote": {}}` and no company facts `{}`; nothing found is
`{"bestMatches": []}`. Numbers are strings, and a missing one is "None" or "-". A timeout, a
dropped connection, a 5xx or a 429 is tried once more; a limit answer is not (it lasts a minute
or the rest of the day).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import httpx
from django.conf import settings

from mindsearch.clients import ratelimit, retry, tls

SERVICE = "alpha-vantage"
MAX_MESSAGE_CHARS = 160


class AlphaVantageError(Exception):
    """Alpha Vantage could not answer; the message is shown in the topic's log."""


def is_configured() -> bool:
    return bool(settings.ALPHA_VANTAGE_URL and settings.ALPHA_VANTAGE_API_KEY)


def query_url(function: str, **params: str) -> str:
    """The query as a reader may see it: without the key (it is added when the request is sent)."""
    return f"{settings.ALPHA_VANTAGE_URL.rstrip('/')}/query?{urlencode({'function': function, **params})}"


async def search(keywords: str, *, user: int | None) -> list[dict[str, str]]:
    """Tickers matching `keywords`, best first, as {symbol, name, type, region, currency, score}."""
    if len(keywords.strip()) < 2:
        return []
    body = await _get_json(query_url("SYMBOL_SEARCH", keywords=keywords.strip()), user)
    matches = body.get("bestMatches")
    if not isinstance(matches, list):
        raise AlphaVantageError("Alpha Vantage's symbol search has no bestMatches")
    fields = {
        "symbol": "1. symbol",
        "name": "2. name",
        "type": "3. type",
        "region": "4. region",
        "currency": "8. currency",
        "score": "9. matchScore",
    }
    return [
        {field: str(match.get(key) or "") for field, key in fields.items()}
        for match in matches
        if isinstance(match, dict) and match.get("1. symbol")
    ]


async def quote(symbol: str, *, user: int | None) -> dict[str, str] | None:
    """GLOBAL_QUOTE's fields without their numbering ("05. price" → "price"), or None when
    Alpha Vantage has no quote for the ticker (an empty "Global Quote")."""
    body = await _get_json(query_url("GLOBAL_QUOTE", symbol=symbol), user)
    found = body.get("Global Quote")
    if not isinstance(found, dict):
        raise AlphaVantageError("Alpha Vantage's quote answer has no Global Quote")
    cleaned = {key.split(". ", 1)[-1]: str(value) for key, value in found.items() if value is not None}
    return cleaned if cleaned.get("price") else None


async def exchange_rate(source: str, target: str, *, user: int | None) -> dict[str, str] | None:
    """CURRENCY_EXCHANGE_RATE's fields without their numbering ("5. Exchange Rate" →
    "Exchange Rate"), or None when the answer has no rate."""
    body = await _get_json(
        query_url("CURRENCY_EXCHANGE_RATE", from_currency=source, to_currency=target), user
    )
    found = body.get("Realtime Currency Exchange Rate")
    if not isinstance(found, dict):
        raise AlphaVantageError("Alpha Vantage's answer has no Realtime Currency Exchange Rate")
    cleaned = {key.split(". ", 1)[-1]: str(value) for key, value in found.items() if value is not None}
    return cleaned if cleaned.get("Exchange Rate") else None


async def overview(symbol: str, *, user: int | None) -> dict[str, str] | None:
    """OVERVIEW's company facts, or None when it has none for the ticker (an empty object)."""
    body = await _get_json(query_url("OVERVIEW", symbol=symbol), user)
    return {key: str(value) for key, value in body.items() if value is not None} if body else None


async def reachable() -> None:
    """Whether Alpha Vantage answers, without spending one of the key's few daily requests: a
    query without the key must come back as its JSON "Error Message"; AlphaVantageError if not."""
    await ratelimit.acquire(SERVICE, settings.LIMIT_ALPHA_VANTAGE_RPM, 60.0, user=None)
    try:
        async with httpx.AsyncClient(timeout=retry.TIMEOUT_SECONDS, verify=tls.context()) as client:
            response = await client.get(query_url("SYMBOL_SEARCH", keywords="IBM"))
    except httpx.HTTPError as exc:
        raise AlphaVantageError(f"Alpha Vantage is not reachable ({type(exc).__name__})") from None
    body = retry.json_or_none(response)
    if not isinstance(body, dict) or "Error Message" not in body:
        raise AlphaVantageError(f"Alpha Vantage answered HTTP {response.status_code}, not its JSON")


async def _get_json(url: str, user: int | None) -> dict[str, Any]:
    return await retry.with_retries(lambda: _get_once(url, user), error=AlphaVantageError)


def _short(text: object) -> str:
    """The start of Alpha Vantage's message, without the key (its limit message names the key:
    "We have detected your API key as … and our standard API rate limit is 25 requests per day")."""
    text = " ".join(str(text).split())
    if settings.ALPHA_VANTAGE_API_KEY:
        text = text.replace(settings.ALPHA_VANTAGE_API_KEY, "***")
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


async def _get_once(url: str, user: int | None) -> dict[str, Any]:
    await ratelimit.acquire(SERVICE, settings.LIMIT_ALPHA_VANTAGE_RPM, 60.0, user=user)
    keyed = f"{url}&{urlencode({'apikey': settings.ALPHA_VANTAGE_API_KEY})}"
    response = await retry.get(keyed, name="Alpha Vantage", key_in_url=True)
    body: dict[str, Any] = retry.answer_of(response, name="Alpha Vantage", error=AlphaVantageError)
    if "Error Message" in body:
        raise AlphaVantageError(f"Alpha Vantage refused the request: {_short(body['Error Message'])}")
    for limit in ("Note", "Information"):
        if limit in body and len(body) == 1:
            raise AlphaVantageError(f"Alpha Vantage's limit: {_short(body[limit])}")
    return body
