"""The status page's lines for the vision model and the weather provider, against loopback services."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.mindsearch.test_status import row
from tests.support.domain_world import DomainWorld, loopback_domain_world
from tests.support.fakes import Fault, openai_models

VISION = "Vision model (questions with a picture)"
WEATHER = "Weather data (Open-Meteo)"
PLACES = "Place data (OpenStreetMap Nominatim)"


@pytest.fixture
def world(alice: User, settings: Any) -> Iterator[DomainWorld]:
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    settings.STATUS_CACHE_SECONDS = 0
    with loopback_domain_world(settings) as w:
        w.llm.routes[("GET", "/v1/models")] = openai_models("test-model", "test-vision")
        yield w


def test_unconfigured_vision_and_weather_say_so(
    alice_client: Client, world: DomainWorld, settings: Any
) -> None:
    settings.VISION_MODEL = ""
    settings.OPEN_METEO_URL = ""
    html = alice_client.get("/status/").content.decode()
    assert "Not configured" in row(html, VISION) and "VISION_MODEL" in row(html, VISION)
    assert "Not configured" in row(html, WEATHER) and "OPEN_METEO_URL" in row(html, WEATHER)
    assert not world.weather.requests
    settings.NOMINATIM_URL = ""
    assert "NOMINATIM_URL" in row(alice_client.get("/status/").content.decode(), PLACES)


def test_working_vision_model_and_open_meteo(alice_client: Client, world: DomainWorld) -> None:
    html = alice_client.get("/status/").content.decode()
    assert "test-vision" in row(html, VISION) and 'class="badge ok"' in row(html, VISION)
    weather = row(html, WEATHER)
    assert world.weather.url in weather and "requests a minute" in weather
    assert world.geocoder.requests_to("/v1/search") and world.weather.requests_to("/v1/forecast")
    assert 'class="badge ok"' in row(html, PLACES) and world.osm.url in row(html, PLACES)


def test_an_unlisted_vision_model_and_a_failing_open_meteo_are_shown(
    alice_client: Client, world: DomainWorld, settings: Any
) -> None:
    settings.VISION_MODEL = "gpt-nothing"
    world.weather.inject(Fault(status=400, body={"error": True, "reason": "Latitude must be in range"}))
    html = alice_client.get("/status/").content.decode()
    assert "gpt-nothing is not listed" in row(html, VISION)
    assert "Not working" in row(html, WEATHER) and "Latitude must be in range" in row(html, WEATHER)
    world.osm.inject(Fault(status=403, body="<html>Access blocked</html>"))
    settings.VISION_MODEL = ""
    assert "HTTP 403" in row(alice_client.get("/status/").content.decode(), PLACES)


FINANCE = "Finance data (Alpha Vantage)"
SPORTS = "Sports data (TheSportsDB)"
ROUTES = "Route data (OSRM)"


def test_finance_sports_and_routes_working(alice_client: Client, world: DomainWorld) -> None:
    html = alice_client.get("/status/").content.decode()
    assert 'class="badge ok"' in row(html, FINANCE) and "not spent here" in row(html, FINANCE)
    # The free key's 25 requests a day are not spent on the status page: asked without the key.
    assert [r.param("apikey") for r in world.finance.requests] == [""]
    assert 'class="badge ok"' in row(html, SPORTS) and world.sports.url in row(html, SPORTS)
    assert world.sports.requests[0].path == "/api/v1/json/123/searchteams.php"
    assert 'class="badge ok"' in row(html, ROUTES) and "(driving)" in row(html, ROUTES)
    assert world.router.requests[0].path.startswith("/route/v1/driving/13.388860,52.517037;")


def test_finance_sports_and_routes_unconfigured_or_down(
    alice_client: Client, world: DomainWorld, settings: Any
) -> None:
    settings.ALPHA_VANTAGE_API_KEY = ""
    settings.THESPORTSDB_URL = ""
    settings.OSRM_URL = ""
    html = alice_client.get("/status/").content.decode()
    assert "ALPHA_VANTAGE_API_KEY" in row(html, FINANCE) and "Not configured" in row(html, FINANCE)
    assert "THESPORTSDB_URL" in row(html, SPORTS) and "OSRM_URL" in row(html, ROUTES)
    assert not world.finance.requests and not world.sports.requests and not world.router.requests
    settings.ALPHA_VANTAGE_API_KEY = "KEY"
    settings.THESPORTSDB_URL = world.sports.url
    settings.OSRM_URL = world.router.url
    world.finance.inject(Fault(status=502, body="<html>Bad Gateway</html>"))
    world.sports.inject(*[Fault(status=503, body="<html>Service Unavailable</html>")] * 2)
    world.router.inject(Fault(status=400, body={"code": "InvalidUrl", "message": "URL string malformed"}))
    html = alice_client.get("/status/").content.decode()
    assert "Not working" in row(html, FINANCE) and "HTTP 502" in row(html, FINANCE)
    assert "HTTP 503" in row(html, SPORTS) and "InvalidUrl" in row(html, ROUTES)
    settings.NOMINATIM_URL = ""
    assert "NOMINATIM_URL is empty" in row(alice_client.get("/status/").content.decode(), ROUTES)
