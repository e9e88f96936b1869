"""Domain data before the web: a provider chosen by the question's domain.

When the route stage puts a question in a domain that has a data provider, the provider's
structured facts are fetched first and saved as a `Document` (fetched via "domain"), with the
time they were fetched in its title and text. The report gets them as its first sources, as
"pre-context" it must prefer for figures (`answer.py`); the web then adds the rest.

Weather: Open-Meteo (a place from the question or the picture → geocoding → forecast). Places:
OpenStreetMap Nominatim. Finance: Alpha Vantage (a company's name → its ticker → quote and company
facts). Sports: TheSportsDB (a team's name → the team, its next and last events). Transport: OSRM
(a route's two ends found through Nominatim → distance and duration). A domain whose provider is
not configured goes on with the web alone, and the topic's log says so. Fetched data is cached
(`CacheEntry` kind "domain_data") for `DOMAIN_DATA_TTL_MINUTES`; a failure is a warning and never
cached. What the question names (a place, a company, a team, a route's ends) is read by
`question_domain.py`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_noop

from mindsearch.clients import alphavantage, nominatim, openmeteo, osrm, thesportsdb
from research.models import CacheEntry, Document, Topic
from research.pipeline import cache as result_cache
from research.pipeline.context import RunContext
from research.pipeline.question_domain import (
    currency_pair,
    name_candidates,
    nominative_guesses,
    place_candidates,
    route_ends,
)
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.DOMAIN
Domain = Topic.Domain
# Domains whose answers are live data; those without a provider here say so in the log.
LIVE = (Domain.WEATHER, Domain.LOCATION, Domain.FINANCE, Domain.SPORTS, Domain.TRANSPORTATION)


def run(ctx: RunContext) -> Outcome:
    """Fetch the domain's data once; `Topic.domain_data_checked` says it was asked for, whatever
    came of it (a document, or a warning that the topic goes on with the web alone)."""
    topic = ctx.topic
    if topic.domain not in LIVE or _done(topic):
        return Outcome.CONTINUE
    provider, configured, not_configured = PROVIDERS[Domain(topic.domain)]
    if configured():
        provider(ctx)
    else:
        ctx.warn(STAGE, not_configured, args={})
    topic.domain_data_checked = True
    topic.save(update_fields=["domain_data_checked", "updated_at"])
    return Outcome.CONTINUE


def _done(topic: Topic) -> bool:
    """Asked for already; or its document saved by a run that stopped before it could say so."""
    return topic.domain_data_checked or topic.domain_documents.exists()


# Why a topic gets no domain data, each a whole sentence for the translators; said by `_web_alone`.
WEB_ALONE = {
    "nominatim_failed": gettext_noop(
        "OpenStreetMap Nominatim failed (%(error)s): the topic goes on with the web alone."
    ),
    "no_osm_place": gettext_noop(
        "OpenStreetMap knows no place named in the question: the topic goes on with the web alone."
    ),
    "no_quote": gettext_noop(
        "Alpha Vantage has no quote for %(symbol)s: the topic goes on with the web alone."
    ),
    "no_route_asked": gettext_noop(
        "Found no route in the question (from … to …): the topic goes on with the web alone."
    ),
    "no_weather_place": gettext_noop(
        "Found no place in the question for a weather forecast: the topic goes on with the web alone."
    ),
    "open_meteo_failed": gettext_noop("Open-Meteo failed (%(error)s): the topic goes on with the web alone."),
    "no_company": gettext_noop(
        "Alpha Vantage knows no company named in the question: the topic goes on with the web alone."
    ),
    "alpha_vantage_failed": gettext_noop(
        "Alpha Vantage failed (%(error)s): the topic goes on with the web alone."
    ),
    "no_team": gettext_noop(
        "TheSportsDB knows no team named in the question: the topic goes on with the web alone."
    ),
    "no_team_id": gettext_noop("TheSportsDB gave no id for %(team)s: the topic goes on with the web alone."),
    "sportsdb_failed": gettext_noop("TheSportsDB failed (%(error)s): the topic goes on with the web alone."),
    "no_osrm_route": gettext_noop(
        "OSRM found no route from %(origin)s to %(destination)s (%(error)s): "
        "the topic goes on with the web alone."
    ),
    "no_route_end": gettext_noop(
        "OpenStreetMap knows no place named %(place)s: the topic goes on with the web alone."
    ),
}


def _web_alone(ctx: RunContext, reason: str, **args: str) -> None:
    """Warn that the topic gets no domain data, and why (`WEB_ALONE`): it goes on with the web alone."""
    ctx.warn(STAGE, WEB_ALONE[reason], args=args)


def _language(topic: Topic) -> str:
    return topic.language if topic.language in ("ru", "en") else "en"


def _fetched(fetched_at: datetime) -> str:
    return f"{fetched_at:%Y-%m-%d %H:%M} UTC"


def _title(fetched_at: datetime, language: str, *, ru: str, en: str) -> str:
    """A domain document's title in the question's language, saying when its data was fetched."""
    when = _fetched(fetched_at)
    return f"{ru} (данные получены {when})" if language == "ru" else f"{en} (fetched {when})"


def _publish(
    ctx: RunContext,
    fetched_at: datetime,
    provider: str,
    *,
    url: str,
    text: str,
    ru: str,
    en: str,
    message: str,
    args: dict[str, str],
) -> None:
    """The provider's data saved as the topic's domain document (`_title` of `ru` and `en`), and the
    stage's done event naming it: `message` with `args` and the time it was fetched."""
    title = _title(fetched_at, _language(ctx.topic), ru=ru, en=en)
    document = Document.objects.create(
        topic=ctx.topic, title=title, url=url, text=text, fetched_via=Document.FetchedVia.DOMAIN
    )
    ctx.emit(
        STAGE,
        message,
        args={**args, "time": _fetched(fetched_at)},
        done=1,
        total=1,
        data={"document_id": document.pk, "provider": provider, "fetched_at": fetched_at.isoformat()},
    )


# --- places ---------------------------------------------------------------------------------------


def _location(ctx: RunContext) -> None:
    topic = ctx.topic
    language = _language(topic)
    ctx.emit(STAGE, gettext_noop("Looking the place up in OpenStreetMap"), args={}, done=0, total=1)
    try:
        found = _find_osm(ctx, place_candidates(topic.question, ctx.image_labels), language)
    except nominatim.NominatimError as exc:
        _web_alone(ctx, "nominatim_failed", error=str(exc))
        return
    if found is None:
        _web_alone(ctx, "no_osm_place")
        return
    place, url, fetched_at = found
    name = str(place.get("name") or place.get("display_name") or "?")
    _publish(
        ctx,
        fetched_at,
        "nominatim",
        url=url,
        text=place_markdown(place, fetched_at, language),
        ru=f"OpenStreetMap: {name}",
        en=f"OpenStreetMap: {name}",
        message=gettext_noop("%(place)s from OpenStreetMap, fetched %(time)s"),
        args={"place": str(place.get("display_name") or name)},
    )


def _find_osm(
    ctx: RunContext, names: list[str], language: str
) -> tuple[dict[str, Any], str, datetime] | None:
    """The first of `names` OpenStreetMap knows: (place, its openstreetmap.org page, fetched at)."""
    for candidate in names:
        found = _cached(
            ctx,
            ("nominatim", settings.NOMINATIM_URL, candidate.lower(), language),
            lambda name=candidate: {
                "place": async_to_sync(nominatim.search)(name, language=language, user=ctx.owner_id),
                "url": nominatim.search_url(name, language),
            },
        )
        if found.get("place"):
            place, fetched_at = found["place"], datetime.fromisoformat(found["_fetched_at"])
            return place, nominatim.place_url(place) or found["url"], fetched_at
    return None


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
    when = _fetched(fetched_at)
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
    language = _language(ctx.topic)
    ctx.emit(STAGE, gettext_noop("Fetching weather data from Open-Meteo"), args={}, done=0, total=1)
    try:
        place = _find_place(ctx, language)
        if place is None:
            _web_alone(ctx, "no_weather_place")
            return
        data = _cached(
            ctx,
            ("forecast", settings.OPEN_METEO_URL, round(place.latitude, 3), round(place.longitude, 3)),
            lambda: async_to_sync(openmeteo.forecast)(place, user=ctx.owner_id),
        )
    except openmeteo.OpenMeteoError as exc:
        _web_alone(ctx, "open_meteo_failed", error=str(exc))
        return
    fetched_at = datetime.fromisoformat(data["_fetched_at"])
    _publish(
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


def weather_markdown(
    place: openmeteo.Place, data: dict[str, Any], fetched_at: datetime, language: str
) -> str:
    """The forecast as short lines of facts, each with its date and unit."""
    ru = language == "ru"
    units, current = data.get("current_units") or {}, data.get("current") or {}
    daily, daily_units = data.get("daily") or {}, data.get("daily_units") or {}
    where = f"{place.label} ({place.latitude:.2f}, {place.longitude:.2f})"
    zone = data.get("timezone") or place.timezone or "UTC"
    when = _fetched(fetched_at)
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


# --- finance: Alpha Vantage -------------------------------------------------------------------------


def _finance(ctx: RunContext) -> None:
    """The exchange rate of a currency pair the question names, else a company's stock quote; where
    Alpha Vantage fails, either way, the topic goes on with the web alone."""
    topic = ctx.topic
    language = _language(topic)
    pair = currency_pair(topic.question)
    try:
        if pair is not None:
            _exchange_rate(ctx, pair, language)
        else:
            _stock_quote(ctx, language)
    except alphavantage.AlphaVantageError as exc:
        _web_alone(ctx, "alpha_vantage_failed", error=str(exc))


def _stock_quote(ctx: RunContext, language: str) -> None:
    ctx.emit(STAGE, gettext_noop("Looking the company up at Alpha Vantage"), args={}, done=0, total=1)
    url = settings.ALPHA_VANTAGE_URL
    match = None
    for name in name_candidates(ctx.topic.question, ctx.image_labels):
        found = _cached(
            ctx,
            ("alpha-vantage search", url, name.lower()),
            lambda name=name: {"matches": async_to_sync(alphavantage.search)(name, user=ctx.owner_id)},
        )
        if found["matches"]:
            match = found["matches"][0]
            break
    if match is None:
        _web_alone(ctx, "no_company")
        return
    symbol = match["symbol"]
    data = _cached(ctx, ("alpha-vantage quote", url, symbol), lambda: _quote_and_overview(ctx, symbol))
    if not data["quote"]:
        _web_alone(ctx, "no_quote", symbol=f"{symbol} ({match['name']})")
        return
    fetched_at = datetime.fromisoformat(data["_fetched_at"])
    company = (data["overview"] or {}).get("Name") or match["name"] or symbol
    _publish(
        ctx,
        fetched_at,
        "alpha-vantage",
        url=alphavantage.query_url("GLOBAL_QUOTE", symbol=symbol),
        text=finance_markdown(match, data["quote"], data["overview"], fetched_at, language),
        ru=f"Alpha Vantage: котировка {company} ({symbol})",
        en=f"Alpha Vantage: {company} ({symbol}) stock quote",
        message=gettext_noop("%(company)s (%(symbol)s) from Alpha Vantage, fetched %(time)s"),
        args={"company": company, "symbol": symbol},
    )


def _exchange_rate(ctx: RunContext, pair: tuple[str, str], language: str) -> None:
    source, target = pair
    ctx.emit(STAGE, gettext_noop("Fetching the exchange rate from Alpha Vantage"), args={}, done=0, total=1)
    data = _cached(
        ctx,
        ("alpha-vantage fx", settings.ALPHA_VANTAGE_URL, source, target),
        lambda: {"rate": async_to_sync(alphavantage.exchange_rate)(source, target, user=ctx.owner_id)},
    )
    if not data["rate"]:
        _web_alone(ctx, "no_quote", symbol=f"{source}/{target}")
        return
    fetched_at = datetime.fromisoformat(data["_fetched_at"])
    _publish(
        ctx,
        fetched_at,
        "alpha-vantage",
        url=alphavantage.query_url("CURRENCY_EXCHANGE_RATE", from_currency=source, to_currency=target),
        text=rate_markdown(data["rate"], fetched_at, language),
        ru=f"Alpha Vantage: курс {source} → {target}",
        en=f"Alpha Vantage: {source} → {target} exchange rate",
        message=gettext_noop("%(pair)s exchange rate from Alpha Vantage, fetched %(time)s"),
        args={"pair": f"{source} → {target}"},
    )


def rate_markdown(rate: dict[str, str], fetched_at: datetime, language: str) -> str:
    """An exchange rate as short lines: the rate, bid and ask, and when Alpha Vantage had it."""
    ru = language == "ru"
    source, target = rate.get("From_Currency Code", "?"), rate.get("To_Currency Code", "?")
    refreshed = f"{rate.get('Last Refreshed', '—')} {rate.get('Time Zone', '')}".strip()
    lines = [
        f"# {source} → {target}",
        "",
        (
            f"Источник: Alpha Vantage, данные получены {_fetched(fetched_at)}; курс обновлён {refreshed}."
            if ru
            else f"Source: Alpha Vantage, fetched {_fetched(fetched_at)}; rate last refreshed {refreshed}."
        ),
        "",
        f"- 1 {rate.get('From_Currency Name', source)} ({source}) = {rate.get('Exchange Rate')} "
        f"{rate.get('To_Currency Name', target)} ({target})",
    ]
    bid, ask = _number(rate.get("Bid Price")), _number(rate.get("Ask Price"))
    if bid and ask:
        lines.append(f"- {'Покупка / продажа' if ru else 'Bid / ask'}: {bid} / {ask}")
    return "\n".join(lines) + "\n"


def _quote_and_overview(ctx: RunContext, symbol: str) -> dict[str, Any]:
    """The quote, and the company facts when Alpha Vantage has them: a limit or an error on the
    second call leaves the quote (the facts are a complement, and the day's calls are few)."""
    quote = async_to_sync(alphavantage.quote)(symbol, user=ctx.owner_id)
    overview = None
    if quote:
        try:
            overview = async_to_sync(alphavantage.overview)(symbol, user=ctx.owner_id)
        except alphavantage.AlphaVantageError:
            overview = None
    return {"quote": quote, "overview": overview}


def _number(value: object) -> str:
    """Alpha Vantage's number as given, "" for its "None", "-" and empty strings."""
    text = str(value or "").strip()
    return "" if text in ("None", "-", "0000-00-00") else text


def _big(value: str) -> str:
    try:
        number = float(value)
    except ValueError:
        return value
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if abs(number) >= size:
            return f"{number / size:.2f} {unit}"
    return value


OVERVIEW_FIELDS = (
    ("Exchange", "Биржа", "Exchange", str),
    ("Sector", "Сектор", "Sector", str),
    ("Industry", "Отрасль", "Industry", str),
    ("MarketCapitalization", "Рыночная капитализация", "Market capitalisation", _big),
    ("PERatio", "P/E", "P/E", str),
    ("EPS", "Прибыль на акцию (EPS)", "Earnings per share (EPS)", str),
    ("DividendYield", "Дивидендная доходность", "Dividend yield", str),
    ("52WeekHigh", "Максимум за 52 недели", "52-week high", str),
    ("52WeekLow", "Минимум за 52 недели", "52-week low", str),
    ("AnalystTargetPrice", "Целевая цена аналитиков", "Analyst target price", str),
    ("LatestQuarter", "Последний отчётный квартал", "Latest quarter", str),
)


def finance_markdown(
    match: dict[str, str],
    quote: dict[str, str],
    overview: dict[str, str] | None,
    fetched_at: datetime,
    language: str,
) -> str:
    """The quote and company facts as short lines, each with its unit or date."""
    ru = language == "ru"
    overview = overview or {}
    symbol = quote.get("symbol") or match.get("symbol", "?")
    currency = overview.get("Currency") or match.get("currency") or ""
    day = _number(quote.get("latest trading day"))
    name = overview.get("Name") or match.get("name") or symbol
    lines = [
        f"# {name} ({symbol})",
        "",
        (
            f"Источник: Alpha Vantage, данные получены {_fetched(fetched_at)}; последний торговый день "
            f"{day or '—'}; цены в {currency or 'валюте биржи'}."
            if ru
            else f"Source: Alpha Vantage, fetched {_fetched(fetched_at)}; latest trading day {day or '—'}; "
            f"prices in {currency or 'the exchange currency'}."
        ),
        "",
    ]

    def line(ru_label: str, en_label: str, value: str) -> None:
        if value:
            lines.append(f"- {ru_label if ru else en_label}: {value}")

    price = _number(quote.get("price"))
    line("Цена", "Price", f"{price} {currency}".strip())
    change, percent, before = (_number(quote.get(k)) for k in ("change", "change percent", "previous close"))
    if change:
        since = f"с закрытия {before}" if ru else f"since the previous close {before}"
        line("Изменение", "Change", f"{change} ({percent or '?'}) {since}")
    low, high, opened = (_number(quote.get(k)) for k in ("low", "high", "open"))
    if low and high:
        opening = f" ({'открытие' if ru else 'open'} {opened})" if opened else ""
        line("Диапазон дня", "Day's range", f"{low} – {high}{opening}")
    line("Объём торгов", "Volume", _number(quote.get("volume")))
    for key, ru_label, en_label, show in OVERVIEW_FIELDS:
        value = _number(overview.get(key))
        line(ru_label, en_label, show(value) if value else "")
    return "\n".join(lines) + "\n"


# --- sports: TheSportsDB ----------------------------------------------------------------------------


def _sports(ctx: RunContext) -> None:
    topic = ctx.topic
    language = _language(topic)
    ctx.emit(STAGE, gettext_noop("Looking the team up in TheSportsDB"), args={}, done=0, total=1)
    # The key changes what TheSportsDB answers (the free key lists less): it names the cache entry,
    # by a hash, so the key is not written into the cache's description.
    source = (settings.THESPORTSDB_URL, hashlib.sha256(settings.THESPORTSDB_API_KEY.encode()).hexdigest()[:8])
    try:
        team = None
        for name in name_candidates(topic.question, ctx.image_labels):
            found = _cached(
                ctx,
                ("thesportsdb teams", *source, name.lower()),
                lambda name=name: {"teams": async_to_sync(thesportsdb.search_teams)(name, user=ctx.owner_id)},
            )
            if found["teams"]:
                team = _best_team(found["teams"], name)
                break
        if team is None:
            _web_alone(ctx, "no_team")
            return
        team_id = str(team.get("idTeam") or "")
        if not team_id.isdigit():  # its events can't be asked for, nor its page linked
            _web_alone(ctx, "no_team_id", team=str(team.get("strTeam") or name))
            return
        events = _cached(ctx, ("thesportsdb events", *source, team_id), lambda: _team_events(ctx, team_id))
    except thesportsdb.SportsDBError as exc:
        _web_alone(ctx, "sportsdb_failed", error=str(exc))
        return
    fetched_at = datetime.fromisoformat(events["_fetched_at"])
    name = str(team.get("strTeam") or "?")
    _publish(
        ctx,
        fetched_at,
        "thesportsdb",
        url=thesportsdb.team_url(team),  # never an API address: those hold the key
        text=sports_markdown(team, events["next"], events["last"], fetched_at, language),
        ru=f"TheSportsDB: {name}, ближайшие и последние матчи",
        en=f"TheSportsDB: {name}, next and last events",
        message=gettext_noop("%(team)s from TheSportsDB, fetched %(time)s"),
        args={"team": name},
    )


def _best_team(teams: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The team whose name is the one asked for, else TheSportsDB's first."""
    wanted = name.lower()
    exact = [t for t in teams if str(t.get("strTeam") or "").lower() == wanted]
    return (exact or teams)[0]


def _team_events(ctx: RunContext, team_id: str) -> dict[str, Any]:
    return {
        "next": async_to_sync(thesportsdb.next_events)(team_id, user=ctx.owner_id),
        "last": async_to_sync(thesportsdb.last_events)(team_id, user=ctx.owner_id),
    }


def _text(value: object) -> str:
    return " ".join(str(value).split()) if value not in (None, "") else ""


def _event_time(event: dict[str, Any]) -> str:
    """When the event is, in UTC: its timestamp, or its date and time; a time not fixed yet (null,
    or "00:00:00" beside no timestamp) is left out."""
    stamp = _text(event.get("strTimestamp"))
    if stamp and "T" in stamp:
        day, clock = stamp.split("T", 1)
        return f"{day} {clock[:5]} UTC"
    day, clock = _text(event.get("dateEvent")), _text(event.get("strTime"))
    if day and clock and clock[:5] != "00:00":
        return f"{day} {clock[:5]} UTC"
    return day or "?"


ROUTINE_STATUSES = ("Match Finished", "FT", "NS", "Not Started")


def _event_line(event: dict[str, Any], language: str, *, played: bool) -> str:
    ru = language == "ru"
    home, away = _text(event.get("strHomeTeam")), _text(event.get("strAwayTeam"))
    title = f"{home} – {away}" if home and away else _text(event.get("strEvent")) or "?"
    scores = (_text(event.get("intHomeScore")), _text(event.get("intAwayScore")))
    if played:
        unknown = "счёт неизвестен" if ru else "score not known"
        score = f"{scores[0]}:{scores[1]}" if all(scores) else unknown
        title = f"{home} {score} {away}" if home and away else f"{title} ({score})"
    details = [_text(event.get("strLeague"))]
    if _text(event.get("intRound")) and _text(event.get("intRound")) != "0":
        details.append(f"{'тур' if ru else 'round'} {_text(event.get('intRound'))}")
    venue = _text(event.get("strVenue"))
    where = f"; {'стадион' if ru else 'venue'} {venue}" if venue else ""
    status = _text(event.get("strStatus"))
    shown_status = f"; {status}" if status and status not in ROUTINE_STATUSES else ""
    detail = ", ".join(d for d in details if d)
    return f"- {_event_time(event)}: {title}" + (f" ({detail})" if detail else "") + where + shown_status


def sports_markdown(
    team: dict[str, Any],
    upcoming: list[dict[str, Any]],
    last: list[dict[str, Any]],
    fetched_at: datetime,
    language: str,
) -> str:
    """The team, its next events and its last results as short lines, times in UTC."""
    ru = language == "ru"
    name = _text(team.get("strTeam")) or "?"
    facts = [
        (("Лига", "League"), _text(team.get("strLeague"))),
        (("Вид спорта", "Sport"), _text(team.get("strSport"))),
        (("Страна", "Country"), _text(team.get("strCountry"))),
        (("Стадион", "Stadium"), _text(team.get("strStadium"))),
        (("Основан", "Founded"), _text(team.get("intFormedYear"))),
    ]
    lines = [
        f"# {name}",
        "",
        (
            f"Источник: TheSportsDB, данные получены {_fetched(fetched_at)}; время матчей – UTC."
            if ru
            else f"Source: TheSportsDB, fetched {_fetched(fetched_at)}; event times are UTC."
        ),
        "",
    ]
    lines += [
        f"- {label[0] if ru else label[1]}: {value}" for label, value in facts if value not in ("", "0")
    ]
    lines += ["", "## Ближайшие матчи" if ru else "## Next events", ""]
    lines += [_event_line(e, language, played=False) for e in upcoming] or [
        "- TheSportsDB не знает ближайших матчей (бесплатный ключ показывает не все)."
        if ru
        else "- TheSportsDB lists no upcoming event (its free key lists only some)."
    ]
    lines += ["", "## Последние результаты" if ru else "## Last results", ""]
    lines += [_event_line(e, language, played=True) for e in last] or [
        "- TheSportsDB не знает последних матчей." if ru else "- TheSportsDB lists no past event."
    ]
    return "\n".join(lines) + "\n"


# --- transport: OSRM, with the places from Nominatim -----------------------------------------------


def _transport(ctx: RunContext) -> None:
    topic = ctx.topic
    language = _language(topic)
    ends = route_ends(topic.question)
    if ends is None:
        _web_alone(ctx, "no_route_asked")
        return
    ctx.emit(STAGE, gettext_noop("Finding the route with OSRM"), args={}, done=0, total=1)
    places = []
    try:
        for end in ends:
            found = _find_osm(ctx, nominative_guesses(end), language)
            if found is None:
                _web_alone(ctx, "no_route_end", place=end)
                return
            places.append(found[0])
    except nominatim.NominatimError as exc:
        _web_alone(ctx, "nominatim_failed", error=str(exc))
        return
    origin, destination = (osrm.Point(float(p["lat"]), float(p["lon"])) for p in places)
    ends_key = tuple(f"{p.latitude:.5f},{p.longitude:.5f}" for p in (origin, destination))
    key = ("osrm", settings.OSRM_URL, settings.OSRM_PROFILE, *ends_key)
    try:
        data = _cached(ctx, key, lambda: async_to_sync(osrm.route)(origin, destination, user=ctx.owner_id))
    except osrm.OsrmError as exc:
        _web_alone(ctx, "no_osrm_route", origin=ends[0], destination=ends[1], error=str(exc))
        return
    fetched_at = datetime.fromisoformat(data["_fetched_at"])
    names = [str(p.get("name") or p.get("display_name") or "?") for p in places]
    _publish(
        ctx,
        fetched_at,
        "osrm",
        url=directions_url(origin, destination),
        text=route_markdown(places, data, fetched_at, language),
        ru=f"OSRM: маршрут {names[0]} → {names[1]}",
        en=f"OSRM: route {names[0]} → {names[1]}",
        message=gettext_noop("Route %(origin)s → %(destination)s from OSRM, fetched %(time)s"),
        args={"origin": names[0], "destination": names[1]},
    )


def directions_url(origin: osrm.Point, destination: osrm.Point) -> str:
    """The route on openstreetmap.org (a page a reader can open; OSRM's data is OpenStreetMap's)."""
    points = ";".join(f"{p.latitude:.5f},{p.longitude:.5f}" for p in (origin, destination))
    route = points.replace(";", "%3B")
    return f"https://www.openstreetmap.org/directions?engine=fossgis_osrm_car&route={route}"


def _duration(seconds: float, language: str) -> str:
    minutes = round(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    if language == "ru":
        return f"{hours} ч {minutes} мин" if hours else f"{minutes} мин"
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def route_markdown(
    places: list[dict[str, Any]], data: dict[str, Any], fetched_at: datetime, language: str
) -> str:
    """The route's two ends, distance and duration as short lines."""
    ru = language == "ru"
    start, end = places
    profile = settings.OSRM_PROFILE

    def where(place: dict[str, Any]) -> str:
        return f"{place.get('display_name')} ({float(place['lat']):.5f}, {float(place['lon']):.5f})"

    names = " → ".join(str(p.get("name") or p.get("display_name")) for p in places)
    km = f"{data['distance'] / 1000:.1f} {'км' if ru else 'km'}"
    lines = [
        f"# Маршрут: {names}" if ru else f"# Route: {names}",
        "",
        (
            f"Источник: OSRM (профиль {profile}) и OpenStreetMap Nominatim (данные © участники "
            f"OpenStreetMap, ODbL 1.0), получены {_fetched(fetched_at)}. Время в пути – оценка "
            "маршрутизатора без учёта пробок."
            if ru
            else f"Source: OSRM (profile {profile}) and OpenStreetMap Nominatim (data © OpenStreetMap "
            f"contributors, ODbL 1.0), fetched {_fetched(fetched_at)}. The duration is the router's "
            "estimate, without live traffic."
        ),
        "",
        f"- {'Откуда' if ru else 'From'}: {where(start)}",
        f"- {'Куда' if ru else 'To'}: {where(end)}",
        f"- {'Расстояние по дорогам' if ru else 'Distance by road'}: {km}",
        f"- {'Время в пути' if ru else 'Travel time'}: {_duration(data['duration'], language)}",
    ]
    roads = [name for name in data.get("waypoints") or [] if name]
    if roads:
        label = "Дороги у начала и конца" if ru else "Roads at the start and end"
        lines.append(f"- {label}: {', '.join(roads)}")
    return "\n".join(lines) + "\n"


# Each live domain's provider: (fetch, is it configured, what the log says when it is not).
PROVIDERS: dict[str, tuple[Callable[[RunContext], None], Callable[[], bool], str]] = {
    Domain.WEATHER: (
        _weather,
        openmeteo.is_configured,
        gettext_noop(
            "Weather data is not configured (OPEN_METEO_URL / OPEN_METEO_GEOCODING_URL are empty): "
            "the topic goes on with the web alone."
        ),
    ),
    Domain.LOCATION: (
        _location,
        nominatim.is_configured,
        gettext_noop(
            "Place data is not configured (NOMINATIM_URL is empty): the topic goes on with the web alone."
        ),
    ),
    Domain.FINANCE: (
        _finance,
        alphavantage.is_configured,
        gettext_noop(
            "Finance data is not configured (ALPHA_VANTAGE_API_KEY is empty): "
            "the topic goes on with the web alone."
        ),
    ),
    Domain.SPORTS: (
        _sports,
        thesportsdb.is_configured,
        gettext_noop(
            "Sports data is not configured (THESPORTSDB_URL is empty): the topic goes on with the web alone."
        ),
    ),
    Domain.TRANSPORTATION: (
        _transport,
        lambda: osrm.is_configured() and nominatim.is_configured(),
        gettext_noop(
            "Route data is not configured (OSRM_URL, and NOMINATIM_URL for the places, must be set): "
            "the topic goes on with the web alone."
        ),
    ),
}
