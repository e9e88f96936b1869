"""Domain data before the web: a weather question gets Open-Meteo's forecast first, through the
real stages and loopback servers speaking Open-Meteo's JSON, and the report cites it with the
time it was fetched."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from mindsearch.clients import retry
from research import workflow
from research.models import CacheEntry, Document, Report, RunEvent, Topic
from research.pipeline.question_domain import place_candidates
from research.pipeline.run import plan_topic, run_topic
from tests.support.domain_world import DomainWorld, loopback_domain_world
from tests.support.fakes import Fault

pytestmark = pytest.mark.django_db

WEATHER = "What will the weather be in Kazan this weekend?"


@pytest.fixture
def world(settings: Any) -> Iterator[DomainWorld]:
    with loopback_domain_world(settings) as w:
        yield w


def research(owner: User, question: str = WEATHER) -> Topic:
    topic = workflow.start_topic(Topic(question=question, auto_approve=True), owner)
    assert plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def test_a_weather_report_cites_open_meteo_first_with_the_time_it_was_fetched(
    alice: User, world: DomainWorld
) -> None:
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert topic.domain == Topic.Domain.WEATHER
    facts = Document.objects.get(topic=topic, fetched_via=Document.FetchedVia.DOMAIN)
    fetched_match = re.search(r"fetched (\d{4}-\d\d-\d\d \d\d:\d\d UTC)", facts.title)
    assert fetched_match, facts.title
    fetched = fetched_match.group(1)
    assert "Kazan, Tatarstan Republic, Russia" in facts.title
    first_day = re.search(r"^- 2026-11-24: ([a-z ]+); temperature (-?[\d.]+ °C) to", facts.text, re.M)
    assert first_day, facts.text
    # The geocoder was asked for the place, then the forecast for its coordinates.
    assert world.geocoder.requests_to("/v1/search")[0].param("name") == "Kazan"
    asked = world.weather.requests_to("/v1/forecast")[0]
    assert (asked.param("latitude"), asked.param("timezone")) == ("55.7887", "auto")
    report = Report.objects.get(topic=topic)
    first = report.sources[0]
    assert first["document_id"] == facts.pk and first["fetched_via"] == "domain"
    assert fetched in first["title"] and first["url"].startswith(world.weather.url)
    assert f"fetched {fetched}" in report.markdown and "[1]" in report.markdown
    assert f"2026-11-24 will be {first_day.group(1)} [1]" in report.markdown
    # The LLM was told to prefer the pre-context, and it came first.
    answer = [m for m in world.script.requests if "pre-context" in str(m[-1]["content"])]
    assert answer and "[1] Open-Meteo: weather forecast for Kazan" in answer[0][-1]["content"]
    # The web was searched as well: the facts come first, not alone.
    assert world.searxng.requests_to("/search") and len(report.sources) > 1
    event = RunEvent.objects.get(topic=topic, stage="domain", done=1)
    assert fetched in event.message and event.data["provider"] == "open-meteo"


def test_fetched_data_is_cached_for_a_short_while(alice: User, world: DomainWorld, settings: Any) -> None:
    research(alice)
    research(alice, "Will it rain in Kazan tomorrow? weather please")
    assert len(world.weather.requests_to("/v1/forecast")) == 1
    entry = CacheEntry.objects.filter(kind=CacheEntry.Kind.DOMAIN_DATA).order_by("created_at").last()
    assert entry is not None
    assert (entry.expires_at - entry.created_at).total_seconds() == pytest.approx(
        settings.DOMAIN_DATA_TTL_MINUTES * 60, abs=5
    )


def test_a_russian_place_name_in_an_oblique_case_is_found(alice: User, world: DomainWorld) -> None:
    assert place_candidates("Какая погода будет в Казани в выходные?")[:2] == ["Казани", "Казан"]
    topic = research(alice, "Какая погода будет в Казани в выходные?")
    facts = Document.objects.get(topic=topic, fetched_via=Document.FetchedVia.DOMAIN)
    assert "Прогноз погоды: Kazan" in facts.text and "данные получены" in facts.title
    names = [r.param("name") for r in world.geocoder.requests_to("/v1/search")]
    assert names == ["Казани", "Казан"]  # the first finds nothing (no `results` key), the stem does


def test_without_open_meteo_configured_the_topic_goes_on_with_the_web_and_says_so(
    alice: User, world: DomainWorld, settings: Any
) -> None:
    settings.OPEN_METEO_URL = ""
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED
    assert not Document.objects.filter(topic=topic, fetched_via=Document.FetchedVia.DOMAIN).exists()
    line = RunEvent.objects.get(topic=topic, stage="domain")
    assert "OPEN_METEO_URL" in line.message and "web alone" in line.message
    assert not world.weather.requests and not world.geocoder.requests


def test_an_open_meteo_outage_is_retried_then_a_warning(
    alice: User, world: DomainWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retry, "PAUSE_SECONDS", 0.01)
    world.weather.inject(Fault(status=503, body={"error": True, "reason": "overloaded"}))
    topic = research(alice)  # one 503, then the answer
    assert Document.objects.filter(topic=topic, fetched_via=Document.FetchedVia.DOMAIN).exists()
    CacheEntry.objects.all().delete()
    world.weather.inject(
        *[Fault(status=429, body={"error": True, "reason": "Minutely API request limit exceeded."})] * 2
    )
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED
    warning = RunEvent.objects.get(topic=topic, stage="domain", level=RunEvent.Level.WARNING)
    assert "HTTP 429" in warning.message and "web alone" in warning.message
    assert "Minutely API request limit exceeded" in warning.message  # Open-Meteo's own reason
    assert not CacheEntry.objects.filter(
        kind=CacheEntry.Kind.DOMAIN_DATA, description__contains="forecast"
    ).exists()


def test_a_place_open_meteo_does_not_know_is_a_warning(alice: User, world: DomainWorld) -> None:
    topic = research(alice, "What is the weather like in Atlantis today?")
    assert topic.status == Topic.Status.COMPLETED
    line = RunEvent.objects.get(topic=topic, stage="domain", level=RunEvent.Level.WARNING)
    assert "no place" in line.message
    assert not world.weather.requests


def test_the_place_can_come_from_the_picture(alice: User, world: DomainWorld) -> None:
    from research import images, workflow
    from tests.support.domain_world import picture

    topic = Topic(question="What will the weather be here tomorrow?", auto_approve=True)
    workflow.start_topic(topic, alice, image=images.prepare(picture((220, 30, 30))))
    plan_topic(topic.pk)
    facts = Document.objects.get(topic=topic, fetched_via=Document.FetchedVia.DOMAIN)
    assert "Paris" in facts.title  # the vision model's "Eiffel Tower, Paris"
    # Where a private picture was taken is the owner's: so is the data fetched for it.
    entries = CacheEntry.objects.filter(kind=CacheEntry.Kind.DOMAIN_DATA)
    assert entries.exists() and all(entry.owner_id == alice.pk for entry in entries)


def test_with_the_cache_scoped_to_users_domain_data_is_not_shared(
    alice: User, bob: User, world: DomainWorld, settings: Any
) -> None:
    settings.LLM_CACHE_SCOPE = "user"
    research(alice)
    research(bob)
    assert len(world.weather.requests_to("/v1/forecast")) == 2


# --- places: OpenStreetMap Nominatim ----------------------------------------------------------------

PLACE = "Where is the Hermitage and how do I get there from the station?"


def test_a_place_question_cites_openstreetmap_first(alice: User, world: DomainWorld) -> None:
    topic = research(alice, PLACE)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert topic.domain == Topic.Domain.LOCATION
    facts = Document.objects.get(topic=topic, fetched_via=Document.FetchedVia.DOMAIN)
    assert facts.title.startswith("OpenStreetMap: State Hermitage Museum (fetched ")
    assert "Opening hours: Tu,Th,Sa,Su 10:30-18:00" in facts.text and "59.93982, 30.31461" in facts.text
    asked = world.osm.requests_to("/search")
    assert asked and asked[0].param("format") == "jsonv2"
    assert asked[0].headers["user-agent"].startswith("MindSearch/")  # the policy: name the application
    report = Report.objects.get(topic=topic)
    assert report.sources[0]["document_id"] == facts.pk
    assert facts.url == "https://www.openstreetmap.org/way/24561755"  # a page to open, not the API


def test_a_blocked_or_unconfigured_nominatim_leaves_the_web_alone(
    alice: User, world: DomainWorld, settings: Any
) -> None:
    world.osm.inject(Fault(status=403, body="<html><body><h1>Access blocked</h1></body></html>"))
    topic = research(alice, PLACE)
    warning = RunEvent.objects.get(topic=topic, stage="domain", level=RunEvent.Level.WARNING)
    assert "HTTP 403" in warning.message and "web alone" in warning.message
    assert topic.status == Topic.Status.COMPLETED
    settings.NOMINATIM_URL = ""
    topic = research(alice, PLACE + " Please.")
    line = RunEvent.objects.get(topic=topic, stage="domain")
    assert "NOMINATIM_URL" in line.message
