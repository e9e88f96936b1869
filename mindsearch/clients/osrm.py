"""OSRM's route service: the fastest route between two points, its distance and duration
(`/route/v1/{profile}/{lon},{lat};{lon},{lat}`). No key. Every request waits for its turn under
`LIMIT_OSRM_RPS` (the public demo server allows one a second).

Its ways of failing, repeated by the stand-in in `tests/support/domain_world.py`: an answer is
`{"code": "Ok", "routes": […], "waypoints": […]}`; every error is HTTP 400 with
`{"code": …, "message": …}` — `NoRoute` (no road joins the points: an answer, not an outage),
`NoSegment` (a point is too far from any road), `InvalidQuery`, `InvalidValue`, `TooBig`; too
many requests is HTTP 429. A timeout, a dropped connection, a 5xx or a 429 is tried once more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from django.conf import settings

from mindsearch.clients import ratelimit, retry

SERVICE = "osrm"
# Codes that are answers about the points, not failures of the service.
NO_ROUTE = ("NoRoute", "NoSegment")


class OsrmError(Exception):
    """OSRM could not answer; the message is shown in the topic's log."""


class NoRoute(OsrmError):
    """OSRM answered that no route joins the points (`NoRoute`, `NoSegment`)."""


@dataclass(frozen=True)
class Point:
    latitude: float
    longitude: float


def is_configured() -> bool:
    return bool(settings.OSRM_URL)


def route_url(origin: Point, destination: Point, profile: str = "") -> str:
    profile = quote(profile or settings.OSRM_PROFILE or "driving", safe="")
    points = ";".join(f"{p.longitude:.6f},{p.latitude:.6f}" for p in (origin, destination))
    return (
        f"{settings.OSRM_URL.rstrip('/')}/route/v1/{profile}/{points}"
        "?overview=false&alternatives=false&steps=false"
    )


async def route(origin: Point, destination: Point, *, user: int | None, profile: str = "") -> dict[str, Any]:
    """The best route: {"distance": metres, "duration": seconds, "waypoints": [names]}."""
    url = route_url(origin, destination, profile)
    body = await retry.with_retries(lambda: _get_once(url, user), error=OsrmError)
    routes = body.get("routes")
    if not isinstance(routes, list) or not routes or not isinstance(routes[0], dict):
        raise NoRoute("OSRM found no route between the points")
    best = routes[0]
    try:
        distance, duration = float(best["distance"]), float(best["duration"])
    except (KeyError, TypeError, ValueError) as exc:
        raise OsrmError("OSRM's route has no distance or duration") from exc
    waypoints = body.get("waypoints")
    names = (
        [str(w.get("name") or "") for w in waypoints if isinstance(w, dict)]
        if isinstance(waypoints, list)
        else []
    )
    return {"distance": distance, "duration": duration, "waypoints": names}


async def _get_once(url: str, user: int | None) -> dict[str, Any]:
    await ratelimit.acquire(SERVICE, settings.LIMIT_OSRM_RPS, 1.0, user=user)
    response = await retry.get(url, name="OSRM")
    body = retry.json_or_none(response)
    code = str(body.get("code") or "") if isinstance(body, dict) else ""
    message = str(body.get("message") or "") if isinstance(body, dict) else ""
    if code in NO_ROUTE:
        raise NoRoute(f"OSRM: {code} ({message})" if message else f"OSRM: {code}")
    if response.status_code != 200 or code != "Ok":
        detail = f"{code}: {message}" if code else f"HTTP {response.status_code}"
        raise OsrmError(f"OSRM refused the request ({detail})")
    assert isinstance(body, dict)
    return body
