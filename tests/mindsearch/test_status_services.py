"""The status page's lines for the vision model and the weather provider, against loopback services."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.mindsearch.test_status import row
from tests.support.domain_world import SeedWorld, loopback_seed_world
from tests.support.fakes import Fault, openai_models

VISION = "Vision model (questions with a picture)"
WEATHER = "Weather data (Open-Meteo)"
PLACES = "Place data (OpenStreetMap Nominatim)"


@pytest.fixture
def seed(alice: User, settings: Any) -> Iterator[SeedWorld]:
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    settings.STATUS_CACHE_SECONDS = 0
    with loopback_seed_world(settings) as w:
        w.llm.routes[("GET", "/v1/models")] = openai_models("test-model", "test-vision")
        yield w


def test_unconfigured_vision_and_weather_say_so(alice_client: Client, seed: SeedWorld, settings: Any) -> None:
    settings.VISION_MODEL = ""
    settings.OPEN_METEO_URL = ""
    html = alice_client.get("/status/").content.decode()
    assert "Not configured" in row(html, VISION) and "VISION_MODEL" in row(html, VISION)
    assert "Not configured" in row(html, WEATHER) and "OPEN_METEO_URL" in row(html, WEATHER)
    assert not seed.weather.requests
    settings.NOMINATIM_URL = ""
    assert "NOMINATIM_URL" in row(alice_client.get("/status/").content.decode(), PLACES)


def test_working_vision_model_and_open_meteo(alice_client: Client, seed: SeedWorld) -> None:
    html = alice_client.get("/status/").content.decode()
    assert "test-vision" in row(html, VISION) and 'class="badge ok"' in row(html, VISION)
    weather = row(html, WEATHER)
    assert seed.weather.url in weather and "requests a minute" in weather
    assert seed.geocoder.requests_to("/v1/search") and seed.weather.requests_to("/v1/forecast")
    assert 'class="badge ok"' in row(html, PLACES) and seed.osm.url in row(html, PLACES)


def test_an_unlisted_vision_model_and_a_failing_open_meteo_are_shown(
    alice_client: Client, seed: SeedWorld, settings: Any
) -> None:
    settings.VISION_MODEL = "gpt-nothing"
    seed.weather.inject(Fault(status=400, body={"error": True, "reason": "Latitude must be in range"}))
    html = alice_client.get("/status/").content.decode()
    assert "gpt-nothing is not listed" in row(html, VISION)
    assert "Not working" in row(html, WEATHER) and "Latitude must be in range" in row(html, WEATHER)
    seed.osm.inject(Fault(status=403, body="<html>Access blocked</html>"))
    settings.VISION_MODEL = ""
    assert "HTTP 403" in row(alice_client.get("/status/").content.decode(), PLACES)
