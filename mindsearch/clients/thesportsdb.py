"""TheSportsDB (its v1 JSON API): a team's name to the team (`searchteams.php`), a team to its
next and last events (`eventsnext.php`, `eventslast.php`). The key is part of the path
(`/api/v1/json/{key}/…`): "123" is the public free key (the older test key "3" serves sample
data); a Patreon key gives more. Every request waits for its turn under `LIMIT_THESPORTSDB_RPM`
(the free tier allows 30 a minute).

Its ways of failing, repeated by the stand-in in `tests/support/domain_world.py`: nothing found is
`{"teams": null}` / `{"events": null}` / `{"results": null}` (null, not an empty list); the last
events come under `results`, the next under `events`; every field may be null (a score before
the match, a time not yet fixed, a venue) and numbers are strings; too many requests is HTTP 429;
a bad key can answer with an HTML page or an empty body. A timeout, a dropped connection, a 5xx or
a 429 is tried once more.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings

from mindsearch.clients import ratelimit, retry

SERVICE = "thesportsdb"


class SportsDBError(Exception):
    """TheSportsDB could not answer; the message is shown in the topic's log."""


def is_configured() -> bool:
    return bool(settings.THESPORTSDB_URL and settings.THESPORTSDB_API_KEY)


def api_url(endpoint: str, **params: str) -> str:
    key = quote(settings.THESPORTSDB_API_KEY, safe="")
    return f"{settings.THESPORTSDB_URL.rstrip('/')}/api/v1/json/{key}/{endpoint}?{urlencode(params)}"


def team_url(team: dict[str, Any]) -> str:
    """The team's page on thesportsdb.com (what a reader can open), or "" without an id."""
    number = str(team.get("idTeam") or "")
    return f"https://www.thesportsdb.com/team/{number}" if number.isdigit() else ""


async def search_teams(name: str, *, user: int | None) -> list[dict[str, Any]]:
    """Teams named `name` (TheSportsDB's team objects), best first; [] when none."""
    if len(name.strip()) < 2:
        return []
    return await _list(api_url("searchteams.php", t=name.strip()), "teams", user)


async def next_events(team_id: str, *, user: int | None) -> list[dict[str, Any]]:
    return await _list(api_url("eventsnext.php", id=team_id), "events", user)


async def last_events(team_id: str, *, user: int | None) -> list[dict[str, Any]]:
    return await _list(api_url("eventslast.php", id=team_id), "results", user)


async def _list(url: str, key: str, user: int | None) -> list[dict[str, Any]]:
    body = await _get_json(url, user)
    items = body.get(key)
    if items is None:  # nothing found: null, not []
        return []
    if not isinstance(items, list):
        raise SportsDBError(f"TheSportsDB's answer has no list of {key}")
    return [item for item in items if isinstance(item, dict)]


async def _get_json(url: str, user: int | None) -> dict[str, Any]:
    return await retry.with_retries(lambda: _get_once(url, user), error=SportsDBError)


async def _get_once(url: str, user: int | None) -> dict[str, Any]:
    await ratelimit.acquire(SERVICE, settings.LIMIT_THESPORTSDB_RPM, 60.0, user=user)
    response = await retry.get(url, name="TheSportsDB", key_in_url=True)
    body: dict[str, Any] = retry.answer_of(
        response, name="TheSportsDB", error=SportsDBError, hint=" (is THESPORTSDB_API_KEY right?)"
    )
    return body
