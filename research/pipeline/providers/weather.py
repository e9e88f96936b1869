"""Weather: Open-Meteo's forecast for the place a question (or its picture) names, found by its
geocoding."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils.translation import gettext_noop

from mindsearch.clients import openmeteo
from research.models import Topic
from research.pipeline.context import RunContext
from research.pipeline.providers.common import STAGE, cached, fetched, language_of, publish, web_alone
from research.pipeline.question_domain import place_candidates

DOMAIN = Topic.Domain.WEATHER
NOT_CONFIGURED = gettext_noop(
    "Weather data is not configured (OPEN_METEO_URL / OPEN_METEO_GEOCODING_URL are empty): "
    "the topic goes on with the web alone."
)
# Why a topic gets no data from this provider, each a whole sentence for the translators.
NO_WEATHER_PLACE = gettext_noop(
    "Found no place in the question for a weather forecast: the topic goes on with the web alone."
)
OPEN_METEO_FAILED = gettext_noop("Open-Meteo failed (%(error)s): the topic goes on with the web alone.")


def fetch(ctx: RunContext) -> None:
    language = language_of(ctx.topic)
    ctx.emit(STAGE, gettext_noop("Fetching weather data from Open-Meteo"), args={}, done=0, total=1)
    try:
        place = _find_place(ctx, language)
        if place is None:
            web_alone(ctx, NO_WEATHER_PLACE)
            return
        data = cached(
            ctx,
            ("forecast", settings.OPEN_METEO_URL, round(place.latitude, 3), round(place.longitude, 3)),
            lambda: async_to_sync(openmeteo.forecast)(place, user=ctx.owner_id),
        )
    except openmeteo.OpenMeteoError as exc:
        web_alone(ctx, OPEN_METEO_FAILED, error=str(exc))
        return
    fetched_at = datetime.fromisoformat(data["_fetched_at"])
    publish(
        ctx,
        fetched_at,
        "open-meteo",
        url=openmeteo.forecast_url(place),
        text=weather_markdown(place, data, fetched_at, language),
        ru=f"Open-Meteo: прогноз погоды, {place.label}",
        en=f"Open-Meteo: weather forecast for {place.label}",
        message=gettext_noop("Weather for %(place)s from Open-Meteo, fetched %(time)s"),
        args={"place": place.label},
    )


def _find_place(ctx: RunContext, language: str) -> openmeteo.Place | None:
    for candidate in place_candidates(ctx.topic.question, ctx.image_labels):
        found = cached(
            ctx,
            ("geocode", settings.OPEN_METEO_GEOCODING_URL, candidate.lower(), language),
            lambda name=candidate: _place_payload(
                async_to_sync(openmeteo.geocode)(name, language=language, user=ctx.owner_id)
            ),
        )
        if found.get("place"):
            return openmeteo.Place(**found["place"])
    return None


def _place_payload(place: openmeteo.Place | None) -> dict[str, Any]:
    return {"place": place.__dict__ if place else None}


WMO = {
    0: ("ясно", "clear sky"),
    1: ("преимущественно ясно", "mainly clear"),
    2: ("переменная облачность", "partly cloudy"),
    3: ("пасмурно", "overcast"),
    45: ("туман", "fog"),
    48: ("изморозь, туман", "depositing rime fog"),
    51: ("слабая морось", "light drizzle"),
    53: ("морось", "moderate drizzle"),
    55: ("сильная морось", "dense drizzle"),
    56: ("ледяная морось", "freezing drizzle"),
    57: ("сильная ледяная морось", "dense freezing drizzle"),
    61: ("небольшой дождь", "slight rain"),
    63: ("дождь", "moderate rain"),
    65: ("сильный дождь", "heavy rain"),
    66: ("ледяной дождь", "freezing rain"),
    67: ("сильный ледяной дождь", "heavy freezing rain"),
    71: ("небольшой снег", "slight snowfall"),
    73: ("снег", "moderate snowfall"),
    75: ("сильный снег", "heavy snowfall"),
    77: ("снежные зёрна", "snow grains"),
    80: ("небольшой ливень", "slight rain showers"),
    81: ("ливень", "moderate rain showers"),
    82: ("сильный ливень", "violent rain showers"),
    85: ("небольшой снегопад", "slight snow showers"),
    86: ("сильный снегопад", "heavy snow showers"),
    95: ("гроза", "thunderstorm"),
    96: ("гроза с небольшим градом", "thunderstorm with slight hail"),
    99: ("гроза с сильным градом", "thunderstorm with heavy hail"),
}


def _sky(code: Any, language: str) -> str:
    try:
        names = WMO.get(int(code))
    except (TypeError, ValueError):
        names = None
    return names[0 if language == "ru" else 1] if names else "?"


def weather_markdown(
    place: openmeteo.Place, data: dict[str, Any], fetched_at: datetime, language: str
) -> str:
    """The forecast as short lines of facts, each with its date and unit."""
    ru = language == "ru"
    units, current = data.get("current_units") or {}, data.get("current") or {}
    daily, daily_units = data.get("daily") or {}, data.get("daily_units") or {}
    where = f"{place.label} ({place.latitude:.2f}, {place.longitude:.2f})"
    zone = data.get("timezone") or place.timezone or "UTC"
    when = fetched(fetched_at)
    lines = [
        (f"# Прогноз погоды: {where}" if ru else f"# Weather forecast: {where}"),
        "",
        (
            f"Источник: Open-Meteo, данные получены {when}; время местное ({zone})."
            if ru
            else f"Source: Open-Meteo, fetched {when}; times are local ({zone})."
        ),
        "",
    ]

    def value(name: str, row: dict, unit_row: dict, index: int | None = None) -> str:
        raw = row.get(name)
        if index is not None:
            raw = raw[index] if isinstance(raw, list) and index < len(raw) else None
        return "—" if raw is None else f"{raw} {unit_row.get(name, '')}".strip()

    if current:
        lines += [
            (f"## Сейчас ({current.get('time', '')})" if ru else f"## Now ({current.get('time', '')})"),
            "",
            (
                f"- {_sky(current.get('weather_code'), language)}; температура "
                f"{value('temperature_2m', current, units)} (ощущается как "
                f"{value('apparent_temperature', current, units)}); влажность "
                f"{value('relative_humidity_2m', current, units)}; "
                f"осадки {value('precipitation', current, units)}; "
                f"ветер {value('wind_speed_10m', current, units)}."
                if ru
                else f"- {_sky(current.get('weather_code'), language)}; temperature "
                f"{value('temperature_2m', current, units)} (feels like "
                f"{value('apparent_temperature', current, units)}); humidity "
                f"{value('relative_humidity_2m', current, units)}; precipitation "
                f"{value('precipitation', current, units)}; wind {value('wind_speed_10m', current, units)}."
            ),
            "",
        ]
    days = daily.get("time") or []
    if days:
        lines += ["## По дням" if ru else "## Day by day", ""]
    for i, day in enumerate(days):
        low = value("temperature_2m_min", daily, daily_units, i)
        high = value("temperature_2m_max", daily, daily_units, i)
        rain = value("precipitation_sum", daily, daily_units, i)
        chance = value("precipitation_probability_max", daily, daily_units, i)
        wind = value("wind_speed_10m_max", daily, daily_units, i)
        sky = _sky((daily.get("weather_code") or [None] * (i + 1))[i], language)
        lines.append(
            f"- {day}: {sky}; температура от {low} до {high}; осадки {rain} (вероятность до {chance}); "
            f"ветер до {wind}."
            if ru
            else f"- {day}: {sky}; temperature {low} to {high}; precipitation {rain} "
            f"(probability up to {chance}); wind up to {wind}."
        )
    return "\n".join(lines).strip() + "\n"


def is_configured() -> bool:
    return openmeteo.is_configured()
