"""The loopback world plus what comes before the web: a vision-capable model on the LLM
endpoint and Open-Meteo's geocoding and forecast APIs.

The vision model really looks at the picture it is sent: it decodes the data URL of the
`image_url` content part and names what it sees by the picture's colour (a red picture is the
Eiffel Tower, a blue one Lake Baikal), so labels come from the pixels, not from the test.
Like OpenAI's, the text-only model refuses an `image_url` part with HTTP 400, and the vision
model answers its JSON inside a fenced block with a sentence around it.

Open-Meteo's stand-in speaks the real JSON (`/v1/search`, `/v1/forecast`) and fails the real
ways: a name it cannot find is an answer without `results`; an unknown variable or a missing
coordinate is HTTP 400 `{"error": true, "reason": …}`.

Alpha Vantage's answers everything with HTTP 200: a missing key is `{"Error Message": …}`, the
day's 25 requests spent is `{"Information": …}` naming the key, a ticker without a quote is
`{"Global Quote": {}}`. TheSportsDB's puts the key in the path, answers null for nothing found,
the last events under `results` and the next under `events`, with nulls in any field. OSRM's
answers `{"code": "Ok", …}` or HTTP 400 with `NoRoute` (an island), `InvalidQuery`, `InvalidValue`.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from PIL import Image

from tests.support.fakes import FakeService, Request, Response, html_page, openai_chat, reader, searxng_search
from tests.support.world import PAGES, ScriptedLLM, World, search_pages

VISION_MODEL = "test-vision"
TEXT_MODEL = "test-model"

# What the vision model recognises, by the picture's dominant colour.
SCENES = {
    "red": {
        "labels": ["Eiffel Tower", "Paris", "wrought-iron lattice tower"],
        "entities": ["Eiffel Tower"],
        "text": "TOUR EIFFEL 1889",
        "description": "A wrought-iron lattice tower in Paris against the sky.",
    },
    "blue": {
        "labels": ["Lake Baikal", "ice", "lake"],
        "entities": ["Baikal"],
        "text": "",
        "description": "Clear blue ice on a frozen lake.",
    },
}

# Open-Meteo's geocoding database: name → the fields its API returns.
PLACES: dict[str, dict[str, Any]] = {
    "Kazan": {
        "id": 551487,
        "name": "Kazan",
        "latitude": 55.78874,
        "longitude": 49.12214,
        "elevation": 116.0,
        "feature_code": "PPLA",
        "country_code": "RU",
        "timezone": "Europe/Moscow",
        "population": 1243500,
        "country": "Russia",
        "admin1": "Tatarstan Republic",
        "names": ["kazan", "казань"],
    },
    "Berlin": {
        "id": 2950159,
        "name": "Berlin",
        "latitude": 52.52437,
        "longitude": 13.41053,
        "elevation": 74.0,
        "feature_code": "PPLC",
        "country_code": "DE",
        "timezone": "Europe/Berlin",
        "population": 3426354,
        "country": "Germany",
        "admin1": "Land Berlin",
        "names": ["berlin", "берлин"],
    },
    "Paris": {
        "id": 2988507,
        "name": "Paris",
        "latitude": 48.85341,
        "longitude": 2.3488,
        "elevation": 42.0,
        "feature_code": "PPLC",
        "country_code": "FR",
        "timezone": "Europe/Paris",
        "population": 2138551,
        "country": "France",
        "admin1": "Île-de-France",
        "names": ["paris", "париж"],
    },
}
CURRENT_UNITS = {
    "time": "iso8601",
    "interval": "seconds",
    "temperature_2m": "°C",
    "relative_humidity_2m": "%",
    "apparent_temperature": "°C",
    "precipitation": "mm",
    "weather_code": "wmo code",
    "wind_speed_10m": "km/h",
}
DAILY_UNITS = {
    "time": "iso8601",
    "weather_code": "wmo code",
    "temperature_2m_max": "°C",
    "temperature_2m_min": "°C",
    "precipitation_sum": "mm",
    "precipitation_probability_max": "%",
    "wind_speed_10m_max": "km/h",
}


def colour_of(data_url: str) -> str:
    """The dominant colour of a data-URL image ("red", "blue", or "other")."""
    match = re.fullmatch(r"data:image/(?:jpeg|png|gif|webp);base64,([A-Za-z0-9+/=]+)", data_url)
    if not match:
        raise ValueError("not a base64 data URL of an image")
    with Image.open(io.BytesIO(base64.b64decode(match.group(1)))) as image:
        pixel = image.convert("RGB").resize((1, 1)).getpixel((0, 0))
    assert isinstance(pixel, tuple)
    r, g, b = pixel[:3]
    if r > max(g, b) + 60:
        return "red"
    if b > max(r, g) + 60:
        return "blue"
    return "other"


def found(pattern: str, text: str) -> str:
    """The first group of `pattern` in a request, which the script relies on being there."""
    match = re.search(pattern, text)
    assert match, f"{pattern!r} is not in the request"
    return match.group(1)


def image_parts(messages: list[dict[str, Any]]) -> list[str]:
    return [
        part["image_url"]["url"]
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


@dataclass
class DomainScript(ScriptedLLM):
    """The world's scripted model, which also sees pictures (as VISION_MODEL), routes weather
    questions, plans from the question it is given, and writes weather facts into its report."""

    seen_images: list[str] = field(default_factory=list)
    requests: list[list[dict[str, Any]]] = field(default_factory=list)

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        self.requests.append(messages)
        if image_parts(messages):
            return self.vision(messages)
        return super().__call__(messages)

    def vision(self, messages: list[dict[str, Any]]) -> str:
        self.calls["vision"] += 1
        url = image_parts(messages)[0]
        self.seen_images.append(url)
        scene = SCENES.get(colour_of(url), {"labels": [], "entities": [], "text": "", "description": "?"})
        return "Here is what I see:\n```json\n" + json.dumps(scene, ensure_ascii=False) + "\n```"

    def route(self, user: str) -> str:
        kinds = (
            ("weather", r"weather|погод"),
            ("transportation", r"маршрут|route|drive from|ехать"),
            ("finance", r"stock|share price|акци|курс|bitcoin|exchange rate"),
            ("sports", r"play next|match|матч|играет"),
            ("location", r"where is|где находится|how do i get"),
        )
        domain = next((name for name, words in kinds if re.search(words, user, re.I)), "general")
        return json.dumps({"domain": domain, "needs_search": True})

    def plan(self, user: str) -> str:
        """Sub-queries made of the question as it was put (a real model would do as much)."""
        question = found(r'Запрос: "(.*)"', user)
        labels = re.search(r"^Метки: (.*)$", user, re.M)  # the picture's, from the image context
        question = f"{question} ({labels.group(1)})" if labels else question
        return (
            f"ПОДЗАПРОС: {question} — что это\nПОДЗАПРОС: {question} — история\n"
            "ПОДЗАПРОС: Mixture of Tokens улучшения"
        )

    def queries(self, user: str) -> str:
        topic = found(r'Тема: "(.*)"', user)
        if "Mixture" in topic:
            return super().queries(user)
        return f"ЗАПРОС: {topic}\nЗАПРОС: {topic} mixture tokens\nЗАПРОС: {topic} en\nЗАПРОС: {topic} wiki"

    def answer(self, user: str) -> str:
        if "pre-context" not in user:
            return super().answer(user)
        numbers = re.findall(r"^\[(\d+)\] ", user, re.M)
        fetched = found(r"(?:fetched|получены) (\d{4}-\d\d-\d\d \d\d:\d\d UTC)", user)
        days = re.findall(
            r"^- (\d{4}-\d\d-\d\d): ([^;]+); (?:temperature|температура) (?:от )?([^;]+?)(?:;| to)",
            user,
            re.M,
        )
        if not days:  # another provider's facts: the first of them, cited
            fact = found(r"(?m)^- ([^\n]+)$", user)
            return (
                "# Facts\n\n## Introduction\n\n"
                f"The provider's data, fetched {fetched}, says: {fact} [1]. "
                f"Mixture of Tokens is unrelated [{numbers[-1]}].\n\n"
                f"## Conclusion\n\nAs fetched {fetched} [1]."
            )
        first = days[0]
        return (
            "# Weather\n\n## Introduction\n\n"
            f"Open-Meteo's forecast, fetched {fetched}, says {first[0]} will be {first[1]} [1]. "
            f"Mixture of Tokens is unrelated [{numbers[-1]}].\n\n## Conclusion\n\n"
            f"Open-Meteo gives {first[2]} on {first[0]} [1]."
        )


def _refuse_images_for_text_models(script: DomainScript) -> Any:
    chat = openai_chat(script, model_ids=(TEXT_MODEL, VISION_MODEL))

    def route(request: Request) -> Response:
        payload = request.json() or {}
        if payload.get("model") == TEXT_MODEL and image_parts(payload.get("messages", [])):
            return Response(
                400,
                {
                    "error": {
                        "message": "Invalid content type. image_url is only supported by certain models.",
                        "type": "invalid_request_error",
                        "param": "messages.[1].content.[1].type",
                        "code": None,
                    }
                },
            )
        return chat(request)

    return route


# OpenStreetMap objects the Nominatim stand-in knows (jsonv2, with address details and extra tags).
OSM: list[dict[str, Any]] = [
    {
        "place_id": 167540853,
        "licence": "Data © OpenStreetMap contributors, ODbL 1.0. http://osm.org/copyright",
        "osm_type": "way",
        "osm_id": 24561755,
        "lat": "59.9398167",
        "lon": "30.3146079",
        "category": "tourism",
        "type": "museum",
        "place_rank": 30,
        "importance": 0.6574,
        "addresstype": "tourism",
        "name": "State Hermitage Museum",
        "display_name": (
            "State Hermitage Museum, 34, Dvortsovaya Embankment, Saint Petersburg, 190000, Russia"
        ),
        "address": {"tourism": "State Hermitage Museum", "city": "Saint Petersburg", "country": "Russia"},
        "extratags": {
            "opening_hours": "Tu,Th,Sa,Su 10:30-18:00; We,Fr 10:30-21:00",
            "website": "https://www.hermitagemuseum.org/",
            "wheelchair": "yes",
        },
        "boundingbox": ["59.9387", "59.9411", "30.3119", "30.3170"],
        "names": ["hermitage", "эрмитаж"],
    },
    {
        "place_id": 159066416,
        "licence": "Data © OpenStreetMap contributors, ODbL 1.0. http://osm.org/copyright",
        "osm_type": "relation",
        "osm_id": 62422,
        "lat": "52.5173885",
        "lon": "13.3951309",
        "category": "boundary",
        "type": "administrative",
        "place_rank": 8,
        "importance": 0.8875,
        "addresstype": "city",
        "name": "Berlin",
        "display_name": "Berlin, Germany",
        "address": {"city": "Berlin", "country": "Germany"},
        "extratags": {"wikipedia": "de:Berlin"},
        "boundingbox": ["52.3382", "52.6755", "13.0883", "13.7611"],
        "names": ["berlin"],
    },
    {
        "place_id": 337443270,
        "licence": "Data © OpenStreetMap contributors, ODbL 1.0. http://osm.org/copyright",
        "osm_type": "relation",
        "osm_id": 2555133,
        "lat": "55.6255780",
        "lon": "37.6063916",
        "category": "boundary",
        "type": "administrative",
        "place_rank": 8,
        "importance": 0.8320,
        "addresstype": "city",
        "name": "Москва",
        "display_name": "Москва, Центральный федеральный округ, Россия",
        "address": {"city": "Москва", "country": "Россия"},
        "extratags": {"wikipedia": "ru:Москва", "population": "13149803"},
        "boundingbox": ["55.1421", "56.0212", "36.8031", "37.9674"],
        "names": ["москва", "moscow"],
    },
    {
        "place_id": 336990874,
        "licence": "Data © OpenStreetMap contributors, ODbL 1.0. http://osm.org/copyright",
        "osm_type": "relation",
        "osm_id": 2560736,
        "lat": "56.8586029",
        "lon": "35.9116476",
        "category": "boundary",
        "type": "administrative",
        "place_rank": 12,
        "importance": 0.6194,
        "addresstype": "city",
        "name": "Тверь",
        "display_name": (
            "Тверь, городской округ Тверь, Тверская область, Центральный федеральный округ, Россия"
        ),
        "address": {"city": "Тверь", "country": "Россия"},
        "extratags": {"wikipedia": "ru:Тверь"},
        "boundingbox": ["56.7735", "56.9544", "35.7362", "36.0815"],
        "names": ["тверь", "tver"],
    },
    {
        "place_id": 297418811,
        "licence": "Data © OpenStreetMap contributors, ODbL 1.0. http://osm.org/copyright",
        "osm_type": "relation",
        "osm_id": 3124509,
        "lat": "54.1822780",
        "lon": "7.8870540",
        "category": "place",
        "type": "island",
        "place_rank": 17,
        "importance": 0.5210,
        "addresstype": "island",
        "name": "Helgoland",
        "display_name": "Helgoland, Kreis Pinneberg, Schleswig-Holstein, Germany",
        "address": {"island": "Helgoland", "country": "Germany"},
        "extratags": {},
        "boundingbox": ["54.1700", "54.1900", "7.8700", "7.9000"],
        "names": ["helgoland", "heligoland"],
    },
]


def nominatim_search(request: Request) -> Response:
    agent = request.headers.get("user-agent", "")
    if not agent or agent.startswith(("python-", "Python-urllib", "curl/")):
        # The public instance blocks stock library User-Agents (its usage policy).
        return Response(
            403, "<html><body><h1>Access blocked</h1></body></html>", {"Content-Type": "text/html"}
        )
    if request.param("format") != "jsonv2":
        return Response(400, "<html>format must be one of xml, json, jsonv2, geojson, geocodejson</html>")
    query = request.param("q").lower()
    found = [place for place in OSM if any(name in query for name in place["names"])]
    limit = int(request.param("limit", "10"))
    return Response(200, [{k: v for k, v in place.items() if k != "names"} for place in found[:limit]])


def _open_meteo_error(reason: str) -> Response:
    return Response(400, {"error": True, "reason": reason})


def geocoding(request: Request) -> Response:
    name = request.param("name").strip().lower()
    answer: dict[str, Any] = {"generationtime_ms": 0.52}
    if len(name) < 2:
        return Response(200, answer)
    found = [
        place
        for place in PLACES.values()
        if any(n == name or (len(name) >= 3 and n.startswith(name)) for n in place["names"])
    ]
    if found:  # no match: the real API leaves `results` out altogether
        answer["results"] = [{k: v for k, v in place.items() if k != "names"} for place in found]
    return Response(200, answer)


def forecast(request: Request) -> Response:
    try:
        latitude, longitude = float(request.param("latitude")), float(request.param("longitude"))
    except ValueError:
        return _open_meteo_error("Parameter 'latitude' and 'longitude' must be numbers")
    current = [v for v in request.param("current").split(",") if v]
    daily = [v for v in request.param("daily").split(",") if v]
    for variable in current + daily:
        if variable not in CURRENT_UNITS and variable not in DAILY_UNITS:
            return _open_meteo_error(
                f"Cannot initialize WeatherVariable from invalid String value {variable}."
            )
    if daily and request.param("timezone") == "":
        return _open_meteo_error("Timezone is required for daily data")
    days = int(request.param("forecast_days", "7"))
    start = date(2026, 11, 24)
    seed = int(abs(latitude * 10 + longitude))
    zone = next((p["timezone"] for p in PLACES.values() if abs(p["latitude"] - latitude) < 0.1), "GMT")
    values = {
        "weather_code": [(3, 61, 71, 0, 2, 45, 80)[(seed + i) % 7] for i in range(days)],
        "temperature_2m_max": [round(2.5 + (seed + i) % 6 * 1.3, 1) for i in range(days)],
        "temperature_2m_min": [round(-4.0 + (seed + i) % 5 * 0.9, 1) for i in range(days)],
        "precipitation_sum": [round((seed + i) % 4 * 1.7, 1) for i in range(days)],
        "precipitation_probability_max": [(seed * 7 + i * 13) % 100 for i in range(days)],
        "wind_speed_10m_max": [round(12 + (seed + i) % 9 * 2.1, 1) for i in range(days)],
    }
    return Response(
        200,
        {
            "latitude": round(latitude, 2) + 0.005,  # snapped to the model's grid, as the real one does
            "longitude": round(longitude, 2) - 0.004,
            "generationtime_ms": 0.21,
            "utc_offset_seconds": 10800,
            "timezone": zone,
            "timezone_abbreviation": "GMT+3",
            "elevation": 116.0,
            "current_units": {k: CURRENT_UNITS[k] for k in ["time", "interval", *current]},
            "current": {
                "time": "2026-11-24T06:00",
                "interval": 900,
                **{v: {"weather_code": 3, "relative_humidity_2m": 87}.get(v, 1.5) for v in current},
            },
            "daily_units": {k: DAILY_UNITS[k] for k in ["time", *daily]},
            "daily": {
                "time": [(start + timedelta(days=i)).isoformat() for i in range(days)],
                **{v: values[v] for v in daily},
            },
        },
    )


# --- Alpha Vantage ---------------------------------------------------------------------------------

AV_KEY = "TESTKEY123"
AV_SYMBOLS: list[dict[str, str]] = [
    {
        "1. symbol": "NVDA",
        "2. name": "NVIDIA Corp",
        "3. type": "Equity",
        "4. region": "United States",
        "5. marketOpen": "09:30",
        "6. marketClose": "16:00",
        "7. timezone": "UTC-04",
        "8. currency": "USD",
    },
    {
        "1. symbol": "NVD.DEX",
        "2. name": "NVIDIA Corp",
        "3. type": "Equity",
        "4. region": "XETRA",
        "5. marketOpen": "08:00",
        "6. marketClose": "20:00",
        "7. timezone": "UTC+02",
        "8. currency": "EUR",
    },
    {
        "1. symbol": "SBRCY",
        "2. name": "Sberbank of Russia PJSC ADR",
        "3. type": "Equity",
        "4. region": "United States",
        "5. marketOpen": "09:30",
        "6. marketClose": "16:00",
        "7. timezone": "UTC-04",
        "8. currency": "USD",
    },
]
AV_QUOTES = {
    "NVDA": {
        "01. symbol": "NVDA",
        "02. open": "178.2000",
        "03. high": "182.5400",
        "04. low": "177.9100",
        "05. price": "181.3600",
        "06. volume": "163254789",
        "07. latest trading day": "2026-11-23",
        "08. previous close": "178.8800",
        "09. change": "2.4800",
        "10. change percent": "1.3864%",
    },
    "SBRCY": {},  # listed once, no longer traded: an empty quote, as the real API gives
}
AV_OVERVIEWS = {
    "NVDA": {
        "Symbol": "NVDA",
        "AssetType": "Common Stock",
        "Name": "NVIDIA Corporation",
        "Exchange": "NASDAQ",
        "Currency": "USD",
        "Country": "USA",
        "Sector": "TECHNOLOGY",
        "Industry": "SEMICONDUCTORS & RELATED DEVICES",
        "MarketCapitalization": "4420000000000",
        "PERatio": "51.2",
        "PEGRatio": "-",
        "EPS": "3.54",
        "DividendYield": "0.0002",
        "DividendDate": "None",
        "52WeekHigh": "212.19",
        "52WeekLow": "86.62",
        "AnalystTargetPrice": "223.5",
        "LatestQuarter": "2026-10-31",
    },
}


# Currency → (its name as Alpha Vantage gives it, units per US dollar).
AV_RATES = {
    "USD": ("United States Dollar", 1.0),
    "EUR": ("Euro", 0.8650),
    "RUB": ("Russian Ruble", 78.50),
    "CNY": ("Chinese Yuan", 7.105),
    "BTC": ("Bitcoin", 1 / 86250.0),
}


@dataclass
class AlphaVantage:
    """Alpha Vantage's /query: its key, its free tier's 25 requests a day, and its 200 answers."""

    key: str = AV_KEY
    daily_limit: int = 25
    spent: int = 0

    def __call__(self, request: Request) -> Response:
        key = request.param("apikey")
        if key != self.key:
            return Response(
                200,
                {
                    "Error Message": "the parameter apikey is invalid or missing. Please claim your unique "
                    "API key on (https://www.alphavantage.co/support/#api-key). It should take less than "
                    "20 seconds."
                },
            )
        self.spent += 1
        if self.spent > self.daily_limit:
            return Response(
                200,
                {
                    "Information": f"We have detected your API key as {key} and our standard API rate "
                    "limit is 25 requests per day. Please subscribe to any of the premium plans at "
                    "https://www.alphavantage.co/premium/ to instantly remove all daily rate limits."
                },
            )
        function, symbol = request.param("function"), request.param("symbol").upper()
        if function == "SYMBOL_SEARCH" and request.param("keywords"):
            words = request.param("keywords").lower()
            found = [
                {**match, "9. matchScore": "1.0000" if match["1. symbol"].lower() == words else "0.6667"}
                for match in AV_SYMBOLS
                if words in match["2. name"].lower() or words == match["1. symbol"].lower()
            ]
            return Response(200, {"bestMatches": found})
        if function == "GLOBAL_QUOTE" and symbol:
            return Response(200, {"Global Quote": AV_QUOTES.get(symbol, {})})
        if function == "CURRENCY_EXCHANGE_RATE":
            source, target = request.param("from_currency"), request.param("to_currency")
            if source not in AV_RATES or target not in AV_RATES:
                return Response(
                    200,
                    {
                        "Error Message": "Invalid API call. Please retry or visit the documentation "
                        "(https://www.alphavantage.co/documentation/) for CURRENCY_EXCHANGE_RATE."
                    },
                )
            rate = AV_RATES[target][1] / AV_RATES[source][1]
            fields = (
                ("1. From_Currency Code", source),
                ("2. From_Currency Name", AV_RATES[source][0]),
                ("3. To_Currency Code", target),
                ("4. To_Currency Name", AV_RATES[target][0]),
                ("5. Exchange Rate", f"{rate:.8f}"),
                ("6. Last Refreshed", "2026-11-24 06:59:01"),
                ("7. Time Zone", "UTC"),
                ("8. Bid Price", f"{rate * 0.9998:.8f}"),
                ("9. Ask Price", f"{rate * 1.0002:.8f}"),
            )
            return Response(200, {"Realtime Currency Exchange Rate": dict(fields)})
        if function == "OVERVIEW" and symbol:
            return Response(200, AV_OVERVIEWS.get(symbol, {}))
        return Response(
            200,
            {
                "Error Message": "Invalid API call. Please retry or visit the documentation "
                f"(https://www.alphavantage.co/documentation/) for {function}."
            },
        )


# --- TheSportsDB -----------------------------------------------------------------------------------

TSDB_KEYS = ("123",)  # the public free key; a test may add a Patreon one
TEAMS: list[dict[str, Any]] = [
    {
        "idTeam": "133604",
        "strTeam": "Arsenal",
        "strTeamShort": "ARS",
        "strAlternate": "Gunners",
        "intFormedYear": "1886",
        "strSport": "Soccer",
        "strLeague": "English Premier League",
        "idLeague": "4328",
        "strStadium": "Emirates Stadium",
        "strCountry": "England",
        "strWebsite": "www.arsenal.com",
        "strDescriptionEN": "Arsenal Football Club is a professional football club based in Islington.",
        "strBadge": "https://r2.thesportsdb.com/images/media/team/badge/uyhbfe1612467038.png",
    },
    {
        "idTeam": "134209",
        "strTeam": "Arsenal Tula",
        "strTeamShort": None,
        "strAlternate": "",
        "intFormedYear": "1946",
        "strSport": "Soccer",
        "strLeague": "Russian Football National League",
        "idLeague": "4690",
        "strStadium": "Arsenal Stadium",
        "strCountry": "Russia",
        "strWebsite": None,
        "strDescriptionEN": None,
        "strBadge": None,
    },
    {
        "idTeam": "133954",
        "strTeam": "Spartak Moscow",
        "strTeamShort": "SPA",
        "strAlternate": "Спартак Москва",
        "intFormedYear": "1922",
        "strSport": "Soccer",
        "strLeague": "Russian Premier League",
        "idLeague": "4355",
        "strStadium": None,
        "strCountry": "Russia",
        "strWebsite": None,
        "strDescriptionEN": None,
        "strBadge": None,
    },
]


def _event(**fields: Any) -> dict[str, Any]:
    """A v1 event object: every field present, most of them null unless given."""
    keys = re.findall(
        r"\w+",
        "idEvent strEvent strSport idLeague strLeague strSeason intRound strHomeTeam strAwayTeam "
        "intHomeScore intAwayScore dateEvent strTime strTimestamp strVenue strCountry strStatus "
        "strPostponed strThumb",
    )
    return {key: fields.get(key) for key in keys}


EVENTS_NEXT = {
    "133604": [
        _event(
            idEvent="2274180",
            strEvent="Arsenal vs Chelsea",
            strSport="Soccer",
            strLeague="English Premier League",
            strSeason="2026-2027",
            intRound="13",
            strHomeTeam="Arsenal",
            strAwayTeam="Chelsea",
            dateEvent="2026-11-29",
            strTime="16:30:00",
            strTimestamp="2026-11-29T16:30:00",
            strVenue="Emirates Stadium",
            strStatus="Not Started",
            strPostponed="no",
        )
    ],
}
EVENTS_LAST = {
    "133604": [
        _event(
            idEvent="2274171",
            strEvent="Arsenal vs Tottenham Hotspur",
            strLeague="English Premier League",
            intRound="12",
            strHomeTeam="Arsenal",
            strAwayTeam="Tottenham Hotspur",
            intHomeScore="4",
            intAwayScore="1",
            dateEvent="2026-11-23",
            strTime="16:30:00",
            strTimestamp="2026-11-23T16:30:00",
            strVenue="Emirates Stadium",
            strStatus="Match Finished",
        )
    ],
    "133954": [  # nulls everywhere: no time, no venue, no score, no round
        _event(
            idEvent="2281140",
            strEvent="Spartak Moscow vs Zenit",
            strHomeTeam="Spartak Moscow",
            strAwayTeam="Zenit",
            dateEvent="2026-11-22",
            strTime="00:00:00",
            intRound="0",
        )
    ],
}


def thesportsdb(request: Request) -> Response:
    match = re.fullmatch(r"/api/v1/json/([^/]+)/(\w+\.php)", request.path)
    if not match:
        return Response(404, "<html><body>404 Not Found</body></html>", {"Content-Type": "text/html"})
    key, endpoint = match.groups()
    if key not in TSDB_KEYS:
        return Response(200, b"", {"Content-Type": "text/html"})  # an empty page, not JSON
    if endpoint == "searchteams.php":
        name = request.param("t").lower()
        found = [team for team in TEAMS if name and name in str(team["strTeam"]).lower()]
        return Response(200, {"teams": found or None})
    if endpoint == "eventsnext.php":
        return Response(200, {"events": EVENTS_NEXT.get(request.param("id")) or None})
    if endpoint == "eventslast.php":
        return Response(200, {"results": EVENTS_LAST.get(request.param("id")) or None})
    return Response(404, "<html><body>404 Not Found</body></html>", {"Content-Type": "text/html"})


# --- OSRM ------------------------------------------------------------------------------------------

ISLANDS = ((54.17, 54.19, 7.87, 7.90),)  # Helgoland: no road reaches it
ROAD_NAMES = {(55.6, 37.6): "Тверская улица", (56.9, 35.9): "Тверской проспект"}


def _osrm_error(code: str, message: str) -> Response:
    return Response(400, {"code": code, "message": message})


def osrm_route(request: Request) -> Response:
    match = re.fullmatch(r"/route/v1/([\w-]+)/(.+)", request.path)
    if not match:
        return _osrm_error("InvalidUrl", f'URL string malformed close to position {len(request.path)}: "/"')
    _profile, coordinates = match.groups()  # osrm-routed serves its one dataset for any profile
    points: list[tuple[float, float]] = []
    for i, pair in enumerate(coordinates.split(";")):
        try:
            lon, lat = (float(v) for v in pair.split(","))
        except ValueError:
            return _osrm_error("InvalidQuery", f"Query string malformed close to position {i * 20 + 1}")
        if not (-90 <= lat <= 90 and -180 <= lon <= 180):
            return _osrm_error("InvalidValue", "Invalid coordinate value.")
        points.append((lat, lon))
    if len(points) < 2:
        return _osrm_error("InvalidValue", "Number of coordinates needs to be at least two.")
    if any(a <= lat <= b and c <= lon <= d for lat, lon in points for a, b, c, d in ISLANDS):
        return _osrm_error("NoRoute", "Impossible route between points")
    (lat1, lon1), (lat2, lon2) = points[0], points[-1]
    straight = (
        6371000
        * 2
        * math.asin(
            math.sqrt(
                math.sin(math.radians(lat2 - lat1) / 2) ** 2
                + math.cos(math.radians(lat1))
                * math.cos(math.radians(lat2))
                * math.sin(math.radians(lon2 - lon1) / 2) ** 2
            )
        )
    )
    distance = round(straight * 1.27, 1)  # roads wind
    duration = round(distance / 21.5, 1)
    leg = {"steps": [], "summary": "", "weight": duration, "duration": duration, "distance": distance}
    return Response(
        200,
        {
            "code": "Ok",
            "routes": [
                {
                    "legs": [leg],
                    "weight_name": "routability",
                    "weight": duration,
                    "duration": duration,
                    "distance": distance,
                }
            ],
            "waypoints": [
                {
                    "hint": "KSoKADRYroqUBAEAEAAAABkAAAAGAAAAAAAAABhnCQCLtwAA_0vMAKlYIQM8TMwArVghAwEAAQH1",
                    "distance": 12.4,
                    "name": ROAD_NAMES.get((round(lat, 1), round(lon, 1)), ""),
                    "location": [round(lon, 6), round(lat, 6)],
                }
                for lat, lon in points
            ],
        },
    )


@dataclass
class DomainWorld(World):
    script: DomainScript
    geocoder: FakeService = None  # type: ignore[assignment]
    weather: FakeService = None  # type: ignore[assignment]
    osm: FakeService = None  # type: ignore[assignment]
    finance: FakeService = None  # type: ignore[assignment]
    alpha_vantage: AlphaVantage = None  # type: ignore[assignment]
    sports: FakeService = None  # type: ignore[assignment]
    router: FakeService = None  # type: ignore[assignment]

    def settings(self) -> dict[str, Any]:
        return {
            **super().settings(),
            "VISION_MODEL": VISION_MODEL,
            "OPEN_METEO_URL": self.weather.url,
            "OPEN_METEO_GEOCODING_URL": self.geocoder.url,
            "LIMIT_OPEN_METEO_RPM": 0,
            "NOMINATIM_URL": self.osm.url,
            "LIMIT_NOMINATIM_RPS": 0,
            "ALPHA_VANTAGE_URL": self.finance.url,
            "ALPHA_VANTAGE_API_KEY": AV_KEY,
            "LIMIT_ALPHA_VANTAGE_RPM": 0,
            "THESPORTSDB_URL": self.sports.url,
            "THESPORTSDB_API_KEY": "123",
            "LIMIT_THESPORTSDB_RPM": 0,
            "OSRM_URL": self.router.url,
            "OSRM_PROFILE": "driving",
            "LIMIT_OSRM_RPS": 0,
        }


@contextmanager
def domain_world(*, llm_latency: float = 0.0) -> Iterator[DomainWorld]:
    """The scripted world (tests/support/world.py) with DomainScript, a vision model and the domain
    providers: Open-Meteo, Nominatim, Alpha Vantage, TheSportsDB and OSRM."""
    script = DomainScript(pages=list(PAGES))
    with ExitStack() as stack:
        web = stack.enter_context(FakeService())
        for slug, title, _, _, text in PAGES:
            web.routes[("GET", f"/pages/{slug}")] = html_page(
                title, f"<article><h1>{title}</h1><p>{text}</p></article>"
            )
        readable = {f"{web.url}pages/{p[0]}?utm_source=searx": (p[1], f"# {p[1]}\n\n{p[4]}") for p in PAGES}
        chat = {("POST", "/v1/chat/completions"): _refuse_images_for_text_models(script)}
        llm = stack.enter_context(FakeService(chat, latency=llm_latency))
        searxng = stack.enter_context(
            FakeService({("GET", "/search"): searxng_search(search_pages(web.url, PAGES))})
        )
        read = stack.enter_context(FakeService(fallback=reader(readable)))
        geocoder = stack.enter_context(FakeService({("GET", "/v1/search"): geocoding}))
        weather = stack.enter_context(FakeService({("GET", "/v1/forecast"): forecast}))
        osm = stack.enter_context(FakeService({("GET", "/search"): nominatim_search}))
        alpha_vantage = AlphaVantage()
        finance = stack.enter_context(FakeService({("GET", "/query"): alpha_vantage}))
        sports = stack.enter_context(FakeService(fallback=thesportsdb))
        router = stack.enter_context(FakeService(fallback=osrm_route))
        yield DomainWorld(
            llm=llm,
            searxng=searxng,
            reader=read,
            web=web,
            script=script,
            geocoder=geocoder,
            weather=weather,
            osm=osm,
            finance=finance,
            alpha_vantage=alpha_vantage,
            sports=sports,
            router=router,
        )


@contextmanager
def loopback_domain_world(settings: Any, **options: Any) -> Iterator[DomainWorld]:
    with domain_world(**options) as w:
        for name, value in w.settings().items():
            setattr(settings, name, value)
        yield w


def picture(
    colour: tuple[int, int, int], *, size: tuple[int, int] = (64, 48), exif_gps: bool = False
) -> bytes:
    """A JPEG of one colour; with `exif_gps`, carrying a camera make and a GPS position in EXIF."""
    image = Image.new("RGB", size, colour)
    out = io.BytesIO()
    if exif_gps:
        exif = Image.Exif()
        exif[0x010F] = "SpyCam"  # Make
        exif[0x8825] = {1: "N", 2: (55.0, 47.0, 19.0), 3: "E", 4: (49.0, 7.0, 20.0)}  # GPS IFD
        image.save(out, format="JPEG", exif=exif)
    else:
        image.save(out, format="JPEG")
    return out.getvalue()
