"""OpenStreetMap Nominatim: a place's name to what OSM knows of it (address, coordinates, type,
opening hours, website). Every request waits for its turn under `LIMIT_NOMINATIM_RPS` (the
public instance's usage policy: at most one a second) and names the application in its
User-Agent — the public instance answers a library's stock User-Agent with HTTP 403.

Its ways of failing, repeated by the stand-in in `tests/support/domain_world.py`: nothing found
is an empty JSON array; a blocked client is HTTP 403 with an HTML page; too many requests is
HTTP 429. A timeout, a dropped connection, a 5xx or a 429 is tried once more.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings

from mindsearch.clients import ratelimit, retry

SERVICE = "nominatim"
USER_AGENT = "MindSearch/1.0 (self-hosted research workspace; domain data before the web)"


class NominatimError(Exception):
    """Nominatim could not answer; the message is shown in the topic's log."""


def is_configured() -> bool:
    return bool(settings.NOMINATIM_URL)


def search_url(query: str, language: str) -> str:
    params = {
        "q": query,
        "format": "jsonv2",
        "limit": 1,
        "addressdetails": 1,
        "extratags": 1,
        "accept-language": language,
    }
    return f"{settings.NOMINATIM_URL.rstrip('/')}/search?{urlencode(params)}"


def place_url(place: dict[str, Any]) -> str:
    """The place's page on openstreetmap.org (what a reader can open), or "" when it has no
    node/way/relation id; Nominatim's data is OpenStreetMap's, whichever instance answered."""
    kind, number = place.get("osm_type"), place.get("osm_id")
    if kind in ("node", "way", "relation") and isinstance(number, int) and number > 0:
        return f"https://www.openstreetmap.org/{kind}/{number}"
    return ""


async def search(query: str, *, language: str, user: int | None) -> dict[str, Any] | None:
    """The best match for `query` (Nominatim's jsonv2 object), or None when nothing matches."""
    if len(query.strip()) < 2:
        return None
    url = search_url(query.strip(), language)
    places = await retry.with_retries(lambda: _get_once(url, user), error=NominatimError)
    if not places:
        return None
    first = places[0]
    try:
        float(first["lat"]), float(first["lon"])
    except (KeyError, TypeError, ValueError) as exc:
        raise NominatimError("Nominatim's answer has no coordinates") from exc
    return first


async def _get_once(url: str, user: int | None) -> list[dict[str, Any]]:
    await ratelimit.acquire(SERVICE, settings.LIMIT_NOMINATIM_RPS, 1.0, user=user)
    response = await retry.get(url, name="Nominatim", headers={"User-Agent": USER_AGENT})
    if response.status_code == 403:
        raise NominatimError("Nominatim refused this server (HTTP 403: blocked by its usage policy)")
    places = retry.answer_of(
        response, name="Nominatim", error=NominatimError, expected=list, what="a list of places"
    )
    return [place for place in places if isinstance(place, dict)]
