"""Domain data before the web (seed 001's IntelligentSourceSelector).

When the route stage puts a question in a domain that has a data provider, the provider's
structured facts are fetched first and saved as a `Document` (fetched via "domain"), with the
time they were fetched in its title and text. The report gets them as its first sources, as
"pre-context" it must prefer for figures (`answer.py`); the web then adds the rest.

Weather: Open-Meteo (a place from the question or the picture → geocoding → forecast). A domain
whose provider is not configured — or that has none yet — goes on with the web alone, and the
topic's log says so. Fetched data is cached (`CacheEntry` kind "domain_data") for
`DOMAIN_DATA_TTL_MINUTES`; a failure is a warning and never cached.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_noop

from mindsearch.clients import nominatim, openmeteo
from research.event_text import choice_phrase
from research.models import CacheEntry, Document, Topic
from research.pipeline import cache as result_cache
from research.pipeline.context import RunContext
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.DOMAIN
Domain = Topic.Domain
# Domains whose answers are live data; those without a provider here say so in the log.
LIVE = (Domain.WEATHER, Domain.LOCATION, Domain.FINANCE, Domain.SPORTS, Domain.TRANSPORTATION)


def run(ctx: RunContext) -> Outcome:
    topic = ctx.topic
    if topic.domain not in LIVE or _done(topic):
        return Outcome.CONTINUE
    if topic.domain == Domain.LOCATION:
        _location(ctx)
        return Outcome.CONTINUE
    if topic.domain != Domain.WEATHER:
        ctx.emit(
            STAGE,
            gettext_noop(
                "No data provider for %(domain)s questions yet: the topic goes on with the web alone."
            ),
            args={"domain": choice_phrase(Domain(topic.domain))},
        )
        return Outcome.CONTINUE
    if not openmeteo.is_configured():
        ctx.warn(
            STAGE,
            gettext_noop(
                "Weather data is not configured (OPEN_METEO_URL / OPEN_METEO_GEOCODING_URL are empty): "
                "the topic goes on with the web alone."
            ),
            args={},
        )
        return Outcome.CONTINUE
    _weather(ctx)
    return Outcome.CONTINUE


def _done(topic: Topic) -> bool:
    return (
        topic.events.filter(stage=STAGE).exists()
        or topic.documents.filter(fetched_via=Document.FetchedVia.DOMAIN).exists()
    )


def domain_documents(topic: Topic) -> list[Document]:
    return list(topic.documents.filter(fetched_via=Document.FetchedVia.DOMAIN).order_by("id"))


# --- places ---------------------------------------------------------------------------------------


def _location(ctx: RunContext) -> None:
    topic = ctx.topic
    if not nominatim.is_configured():
        ctx.warn(
            STAGE,
            gettext_noop(
                "Place data is not configured (NOMINATIM_URL is empty): the topic goes on with the web alone."
            ),
            args={},
        )
        return
    language = topic.language if topic.language in ("ru", "en") else "en"
    ctx.emit(STAGE, gettext_noop("Looking the place up in OpenStreetMap"), args={}, done=0, total=1)
    place: dict[str, Any] | None = None
    try:
        for candidate in place_candidates(topic.question, ctx.image_labels):
            found = _cached(
                ctx,
                ("nominatim", settings.NOMINATIM_URL, candidate.lower(), language),
                lambda name=candidate: {
                    "place": async_to_sync(nominatim.search)(name, language=language, user=ctx.owner_id),
                    "url": nominatim.search_url(name, language),
                },
            )
            if found.get("place"):
                place, url, fetched_at = (
                    found["place"],
                    nominatim.place_url(found["place"]) or found["url"],
                    datetime.fromisoformat(found["_fetched_at"]),
                )
                break
    except nominatim.NominatimError as exc:
        ctx.warn(
            STAGE,
            gettext_noop("OpenStreetMap Nominatim failed (%(error)s): the topic goes on with the web alone."),
            args={"error": str(exc)},
        )
        return
    if place is None:
        ctx.warn(
            STAGE,
            gettext_noop(
                "OpenStreetMap knows no place named in the question: the topic goes on with the web alone."
            ),
            args={},
        )
        return
    name = str(place.get("name") or place.get("display_name") or "?")
    when = f"{fetched_at:%Y-%m-%d %H:%M} UTC"
    title = (
        f"OpenStreetMap: {name} (данные получены {when})"
        if language == "ru"
        else f"OpenStreetMap: {name} (fetched {when})"
    )
    document = Document.objects.create(
        topic=topic,
        title=title,
        url=url,
        text=place_markdown(place, fetched_at, language),
        fetched_via=Document.FetchedVia.DOMAIN,
    )
    ctx.emit(
        STAGE,
        gettext_noop("%(place)s from OpenStreetMap, fetched %(time)s"),
        args={"place": str(place.get("display_name") or name), "time": when},
        done=1,
        total=1,
        data={"document_id": document.pk, "provider": "nominatim", "fetched_at": fetched_at.isoformat()},
    )


PLACE_TAGS = {
    "opening_hours": ("Часы работы", "Opening hours"),
    "website": ("Сайт", "Website"),
    "phone": ("Телефон", "Phone"),
    "wheelchair": ("Доступ для колясок", "Wheelchair access"),
    "wikipedia": ("Википедия", "Wikipedia"),
}


def place_markdown(place: dict[str, Any], fetched_at: datetime, language: str) -> str:
    """What OpenStreetMap knows of a place, as short lines of facts."""
    ru = language == "ru"
    when = f"{fetched_at:%Y-%m-%d %H:%M} UTC"
    kind = f"{place.get('category') or place.get('class') or ''}/{place.get('type') or ''}".strip("/")
    lines = [
        f"# {place.get('display_name') or place.get('name')}",
        "",
        (
            f"Источник: OpenStreetMap Nominatim (данные © участники OpenStreetMap, ODbL 1.0), "
            f"получены {when}."
            if ru
            else f"Source: OpenStreetMap Nominatim (data © OpenStreetMap contributors, ODbL 1.0), "
            f"fetched {when}."
        ),
        "",
        f"- {'Адрес' if ru else 'Address'}: {place.get('display_name', '—')}",
        f"- {'Координаты' if ru else 'Coordinates'}: {float(place['lat']):.5f}, {float(place['lon']):.5f}",
    ]
    if kind:
        lines.append(f"- {'Тип объекта' if ru else 'Kind of place'}: {kind}")
    tags = place.get("extratags") or {}
    for tag, names in PLACE_TAGS.items():
        if tags.get(tag):
            lines.append(f"- {names[0] if ru else names[1]}: {tags[tag]}")
    return "\n".join(lines) + "\n"


# --- weather --------------------------------------------------------------------------------------


def _weather(ctx: RunContext) -> None:
    topic = ctx.topic
    language = topic.language if topic.language in ("ru", "en") else "en"
    ctx.emit(STAGE, gettext_noop("Fetching weather data from Open-Meteo"), args={}, done=0, total=1)
    try:
        place = _find_place(ctx, language)
        if place is None:
            ctx.warn(
                STAGE,
                gettext_noop(
                    "Found no place in the question for a weather forecast: "
                    "the topic goes on with the web alone."
                ),
                args={},
            )
            return
        data = _cached(
            ctx,
            ("forecast", settings.OPEN_METEO_URL, round(place.latitude, 3), round(place.longitude, 3)),
            lambda: async_to_sync(openmeteo.forecast)(place, user=ctx.owner_id),
        )
    except openmeteo.OpenMeteoError as exc:
        ctx.warn(
            STAGE,
            gettext_noop("Open-Meteo failed (%(error)s): the topic goes on with the web alone."),
            args={"error": str(exc)},
        )
        return
    fetched_at = datetime.fromisoformat(data["_fetched_at"])
    document = Document.objects.create(
        topic=topic,
        title=_weather_title(place, fetched_at, language),
        url=openmeteo.forecast_url(place),
        text=weather_markdown(place, data, fetched_at, language),
        fetched_via=Document.FetchedVia.DOMAIN,
    )
    ctx.emit(
        STAGE,
        gettext_noop("Weather for %(place)s from Open-Meteo, fetched %(time)s"),
        args={"place": place.label, "time": f"{fetched_at:%Y-%m-%d %H:%M} UTC"},
        done=1,
        total=1,
        data={"document_id": document.pk, "provider": "open-meteo", "fetched_at": fetched_at.isoformat()},
    )


def _find_place(ctx: RunContext, language: str) -> openmeteo.Place | None:
    for candidate in place_candidates(ctx.topic.question, ctx.image_labels):
        found = _cached(
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


def _cached(ctx: RunContext, key_parts: tuple, fetch: Any) -> dict[str, Any]:
    """A provider's answer from the cache (short TTL), or fetched now with the time it was.

    `key_parts` name the provider's URL. Shared between users like the LLM's answers, but kept
    for the owner alone with LLM_CACHE_SCOPE=user or when the place may come from a private
    picture's labels (the fetch time shown with it would tell that someone asked)."""
    kind = CacheEntry.Kind.DOMAIN_DATA
    key = result_cache.make_key("domain", *key_parts)
    private = settings.LLM_CACHE_SCOPE == "user" or bool(ctx.image_labels)
    owner_id = ctx.owner_id if private else None
    cached = result_cache.get(kind, key, owner_id)
    if cached is not None:
        return cached
    payload = {**fetch(), "_fetched_at": timezone.now().astimezone(UTC).isoformat()}
    result_cache.put(
        kind,
        key,
        payload,
        owner_id=owner_id,
        description=f"{STAGE}: {' '.join(map(str, key_parts))}"[:300],
        ttl=timedelta(minutes=settings.DOMAIN_DATA_TTL_MINUTES),
    )
    return payload


# Place names: a capitalised word or two after a preposition ("weather in New York", "погода в
# Казани"), then any capitalised word that does not start the sentence, then the picture's labels.
_AFTER_PREPOSITION = re.compile(
    r"(?:^|\s)(?:in|at|for|near|around|в|во|на|для|около|возле|под|из)\s+"
    r"((?:[A-ZА-ЯЁ][\w'’.-]+)(?:[\s-](?:[A-ZА-ЯЁ][\w'’.-]+))?)"
)
_CAPITALISED = re.compile(r"(?<=[\w,;:]\s)([A-ZА-ЯЁ][\w'’-]{2,}(?:\s[A-ZА-ЯЁ][\w'’-]{2,})?)")
_RUSSIAN_ENDINGS = ("ами", "ях", "ом", "ой", "ем", "ах", "е", "у", "ы", "и", "а")
MAX_CANDIDATES = 3


def place_candidates(question: str, labels: list[str] | None = None) -> list[str]:
    """Up to MAX_CANDIDATES names to geocode, most likely first; a Russian name in an oblique
    case ("в Казани") is also tried as its stem (Open-Meteo matches 3+ letters fuzzily)."""
    found = [m.group(1).rstrip(".") for m in _AFTER_PREPOSITION.finditer(question)]
    found += [m.group(1) for m in _CAPITALISED.finditer(question)]
    found += [label for label in (labels or []) if label[:1].isupper()]
    names: list[str] = []
    for name in found:
        names.append(name)
        stem = _russian_stem(name)
        if stem:
            names.append(stem)
    return list(dict.fromkeys(names))[:MAX_CANDIDATES]


def _russian_stem(name: str) -> str:
    if not re.fullmatch(r"[А-ЯЁа-яё-]+", name) or len(name) < 5:
        return ""
    for ending in _RUSSIAN_ENDINGS:
        if name.endswith(ending):
            return name[: -len(ending)]
    return ""


# WMO weather interpretation codes, as Open-Meteo documents them.
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


def _weather_title(place: openmeteo.Place, fetched_at: datetime, language: str) -> str:
    when = f"{fetched_at:%Y-%m-%d %H:%M} UTC"
    if language == "ru":
        return f"Open-Meteo: прогноз погоды, {place.label} (данные получены {when})"
    return f"Open-Meteo: weather forecast for {place.label} (fetched {when})"


def weather_markdown(
    place: openmeteo.Place, data: dict[str, Any], fetched_at: datetime, language: str
) -> str:
    """The forecast as short lines of facts, each with its date and unit."""
    ru = language == "ru"
    units, current = data.get("current_units") or {}, data.get("current") or {}
    daily, daily_units = data.get("daily") or {}, data.get("daily_units") or {}
    where = f"{place.label} ({place.latitude:.2f}, {place.longitude:.2f})"
    zone = data.get("timezone") or place.timezone or "UTC"
    when = f"{fetched_at:%Y-%m-%d %H:%M} UTC"
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
