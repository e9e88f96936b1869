"""A picture and domain data in Chromium: a question asked with a photo shows the picture and
the vision model's labels on the topic page, and its search queries carry them; a weather
question's report cites Open-Meteo's forecast first, with the time it was fetched. Real daphne and
qcluster, with the loopback world, a vision model and Open-Meteo's stand-in behind them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import wait_for_worker
from tests.browser.test_citation_preview import signed_in
from tests.browser.test_journey import PASSWORD, shot
from tests.support import processes
from tests.support.domain_world import domain_world, picture
from tests.support.fakes import openai_models, searxng_config

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"]),
]

RUN_TIMEOUT = 120_000


@pytest.fixture
def site() -> Iterator[str]:
    """The browser tests' daphne + qcluster pair, with the visual and domain-data world behind them."""
    cache.clear()
    with domain_world(llm_latency=0.3) as w:
        w.llm.routes[("GET", "/v1/models")] = openai_models("test-model", "test-vision")
        w.searxng.routes[("GET", "/config")] = searxng_config("duckduckgo", "wikipedia")
        env = processes.process_env(**w.env())
        with processes.daphne(env) as host, processes.qcluster(env):
            wait_for_worker()
            yield f"http://{host}"


@pytest.fixture
def erin(site: str, settings: Any) -> User:
    # Made before Playwright starts (its running loop forbids ORM calls), with the server's hasher.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    return User.objects.create_user("erin", "erin@example.com", PASSWORD)


def ask(page: Page, question: str, photo: Path | None = None) -> None:
    page.goto("/")
    page.get_by_label("Your question").fill(question)
    if photo is not None:
        page.get_by_label("Picture (optional)").set_input_files(str(photo))
    page.locator("input[name=sources][value=web]").check()
    page.get_by_label("Start without reviewing the plan").check()
    page.get_by_role("button", name="Research it").click()
    expect(page).to_have_url(re.compile(r"/topics/\d+/$"))


def test_a_photo_gives_labels_on_the_page_and_in_the_queries(
    erin: User, browser: Browser, site: str, artifacts: Path, tmp_path: Path
) -> None:
    photo = tmp_path / "IMG_0042.jpg"
    photo.write_bytes(picture((220, 30, 30), size=(320, 240), exif_gps=True))
    page = signed_in(browser, site)
    ask(page, "What is this building and when was it built?", photo)
    figure = page.locator("#question-image")
    expect(figure.locator("img")).to_be_visible()
    # Described by the vision model in the worker; the labels arrive without a reload.
    page.evaluate("window.__noReload = 1")
    labels = figure.locator(".image-labels")
    expect(labels).to_contain_text("Eiffel Tower", timeout=60_000)
    expect(figure).to_contain_text("TOUR EIFFEL 1889")
    assert page.evaluate("window.__noReload") == 1
    # The stored picture is served, re-encoded (no EXIF), to its owner.
    served = page.request.get(figure.locator("img").get_attribute("src") or "")
    assert served.ok and served.headers["content-type"] == "image/jpeg" and b"Exif" not in served.body()
    expect(page.locator("#topic-status .status")).to_have_text("Completed", timeout=RUN_TIMEOUT)
    queries = page.locator("#plan ul.queries li")
    expect(queries.filter(has_text="Eiffel Tower").first).to_be_attached()
    shot(page, artifacts, "question-with-a-photo", focus=figure)
    # The event log says what the picture shows.
    expect(page.locator("#event-log")).to_contain_text("The picture shows: Eiffel Tower")


def test_a_weather_report_cites_open_meteo_with_the_time_it_was_fetched(
    erin: User, browser: Browser, site: str, artifacts: Path
) -> None:
    page = signed_in(browser, site)
    ask(page, "What will the weather be in Kazan this weekend?")
    expect(page.locator("#topic-status .status")).to_have_text("Completed", timeout=RUN_TIMEOUT)
    report = page.locator("#report")
    expect(report).to_contain_text(
        re.compile(r"Open-Meteo's forecast, fetched \d{4}-\d\d-\d\d \d\d:\d\d UTC")
    )
    first_source = report.locator("ol li, .sources li").first
    expect(first_source).to_contain_text("Open-Meteo: weather forecast for Kazan")
    expect(first_source).to_contain_text(re.compile(r"fetched \d{4}-\d\d-\d\d \d\d:\d\d UTC"))
    expect(page.locator("#event-log")).to_contain_text(
        "Weather for Kazan, Tatarstan Republic, Russia from Open-Meteo"
    )
    shot(page, artifacts, "weather-report", focus=report)
