"""Open-Meteo: a place name to coordinates (geocoding API), coordinates to a forecast (forecast
API). No key. Every request waits for its turn under the global limit `LIMIT_OPEN_METEO_RPM`.

The real API's ways of failing, which the loopback stand-in in `tests/support/domain_world.py`
repeats: a name it cannot find is an answer without a `results` key at all (not an empty list);
a bad parameter is HTTP 400 with `{"error": true, "reason": …}`; too many requests is HTTP 429
with the same body. A timeout, a dropped connection, a 5xx or a 429 is tried once more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
from django.conf import settings

from mindsearch.clients import ratelimit, retry

SERVICE = "open-meteo"
FORECAST_DAYS = 7
CURRENT = "temperature_2m,relative_humidity_2m,apparent_temperature,precipitation,weather_code,wind_speed_10m"
DAILY = (
    "weather_code,temperature_2m_max,temperature_2m_min,precipitation_sum,"
    "precipitation_probability_max,wind_speed_10m_max"
)


class OpenMeteoError(Exception):
    """Open-Meteo could not answer; the message is shown in the topic's log."""


@dataclass(frozen=True)
class Place:
    name: str
    latitude: float
    longitude: float
    country: str = ""
    admin1: str = ""
    timezone: str = ""

    @property
    def label(self) -> str:
        return ", ".join(part for part in (self.name, self.admin1, self.country) if part)


def is_configured() -> bool:
    return bool(settings.OPEN_METEO_URL and settings.OPEN_METEO_GEOCODING_URL)


def geocoding_url(name: str, language: str) -> str:
    params = {"name": name, "count": 1, "language": language, "format": "json"}
    return f"{settings.OPEN_METEO_GEOCODING_URL.rstrip('/')}/v1/search?{urlencode(params)}"


def forecast_url(place: Place, days: int = FORECAST_DAYS) -> str:
    params = {
        "latitude": f"{place.latitude:.4f}",
        "longitude": f"{place.longitude:.4f}",
        "current": CURRENT,
        "daily": DAILY,
        "timezone": "auto",
        "forecast_days": days,
    }
    return f"{settings.OPEN_METEO_URL.rstrip('/')}/v1/forecast?{urlencode(params)}"


async def geocode(name: str, *, language: str, user: int | None) -> Place | None:
    """The best match for a place name, or None when Open-Meteo knows no such place."""
    if len(name.strip()) < 2:
        return None
    answer = await _get_json(geocoding_url(name.strip(), language), user)
    results = answer.get("results") or []  # no match: the key is missing altogether
    if not results or not isinstance(results[0], dict):
        return None
    first = results[0]
    try:
        return Place(
            name=str(first.get("name") or name),
            latitude=float(first["latitude"]),
            longitude=float(first["longitude"]),
            country=str(first.get("country") or ""),
            admin1=str(first.get("admin1") or ""),
            timezone=str(first.get("timezone") or ""),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise OpenMeteoError("Open-Meteo's geocoding answer has no coordinates") from exc


async def forecast(place: Place, *, user: int | None, days: int = FORECAST_DAYS) -> dict[str, Any]:
    """The forecast API's JSON for a place: `current`, `daily` and their units."""
    answer = await _get_json(forecast_url(place, days), user)
    if not isinstance(answer.get("daily"), dict) or not isinstance(answer.get("current"), dict):
        raise OpenMeteoError("Open-Meteo's forecast answer has no current or daily data")
    return answer


async def _get_json(url: str, user: int | None) -> dict[str, Any]:
    return await retry.with_retries(lambda: _get_once(url, user), error=OpenMeteoError)


def _reason(response: httpx.Response) -> str:
    """Open-Meteo's words for a refusal: `{"error": true, "reason": …}`."""
    body = retry.json_or_none(response)
    return str(body.get("reason") or "") if isinstance(body, dict) and body.get("error") else ""


async def _get_once(url: str, user: int | None) -> dict[str, Any]:
    await ratelimit.acquire(SERVICE, settings.LIMIT_OPEN_METEO_RPM, 60.0, user=user)
    response = await retry.get(url, name="Open-Meteo", reason=_reason)
    body: dict[str, Any] = retry.answer_of(response, name="Open-Meteo", error=OpenMeteoError, reason=_reason)
    if body.get("error"):
        raise OpenMeteoError(f"Open-Meteo refused the request: {_reason(response)}")
    return body
