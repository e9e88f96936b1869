"""Finance, sports and transport data before the web: Alpha Vantage, TheSportsDB and OSRM (with
Nominatim for the places), through the real stages and loopback servers speaking each service's
JSON and failing its ways. The facts are the report's first source, cited with their fetch time."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from mindsearch.clients import retry
from research import workflow
from research.models import CacheEntry, Document, Report, RunEvent, Topic
from research.pipeline.question_domain import (
    classify_by_keywords,
    name_candidates,
    nominative_guesses,
    route_ends,
)
from research.pipeline.run import plan_topic, run_topic
from tests.support.domain_world import AV_KEY, DomainWorld, loopback_domain_world
from tests.support.fakes import Fault

pytestmark = pytest.mark.django_db

FINANCE = "NVIDIA stock price and earnings this quarter"
SPORTS = "When do Arsenal play next?"
ROUTE = "маршрут от Москвы до Твери"


@pytest.fixture
def world(settings: Any) -> Iterator[DomainWorld]:
    with loopback_domain_world(settings) as w:
        yield w


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "PAUSE_SECONDS", 0.01)


def research(owner: User, question: str) -> Topic:
    topic = workflow.start_topic(Topic(question=question, auto_approve=True), owner)
    assert plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def facts_of(topic: Topic) -> Document:
    return Document.objects.get(topic=topic, fetched_via=Document.FetchedVia.DOMAIN)


def warning_of(topic: Topic) -> str:
    return RunEvent.objects.get(topic=topic, stage="domain", level=RunEvent.Level.WARNING).message


def assert_cited_first(topic: Topic, facts: Document, provider: str) -> None:
    """The facts are the report's source [1], with the time they were fetched, and the event log
    names the provider; the web was searched as well."""
    assert topic.status == Topic.Status.COMPLETED, topic.error
    fetched = re.search(r"(?:fetched|получены) (\d{4}-\d\d-\d\d \d\d:\d\d UTC)", facts.title)
    assert fetched, facts.title
    report = Report.objects.get(topic=topic)
    assert report.sources[0]["document_id"] == facts.pk and report.sources[0]["fetched_via"] == "domain"
    assert f"fetched {fetched.group(1)}" in report.markdown and "[1]" in report.markdown
    assert len(report.sources) > 1
    event = RunEvent.objects.get(topic=topic, stage="domain", done=1)
    assert event.data["provider"] == provider and fetched.group(1) in event.message


def test_the_route_stage_sends_the_three_kinds_of_question_to_their_providers() -> None:
    """Without an LLM, keywords choose the domain, in both languages."""
    assert classify_by_keywords("курс акций Сбербанка") == Topic.Domain.FINANCE
    assert classify_by_keywords("when do Arsenal play next") == Topic.Domain.SPORTS
    assert classify_by_keywords("Когда играет Спартак?") == Topic.Domain.SPORTS
    assert classify_by_keywords(ROUTE) == Topic.Domain.TRANSPORTATION
    assert (
        classify_by_keywords("How long is the drive from Berlin to Hamburg?") == Topic.Domain.TRANSPORTATION
    )
    assert name_candidates("Какой курс акций Сбербанка?") == ["Sberbank"]
    assert name_candidates("When do Arsenal play next?") == ["Arsenal"]
    assert route_ends(ROUTE) == ("Москвы", "Твери")
    assert nominative_guesses("Твери")[:2] == ["Твери", "Тверь"]


def test_without_an_llm_keywords_reach_the_provider(alice: User, world: DomainWorld, settings: Any) -> None:
    settings.AITUNNEL_MODEL = ""  # no LLM: the route's keywords choose, the report is extractive
    topic = research(alice, "Какой курс акций NVIDIA сегодня?")
    assert topic.domain == Topic.Domain.FINANCE
    facts = facts_of(topic)
    assert facts.title.startswith("Alpha Vantage: котировка NVIDIA Corporation (NVDA) (данные получены ")
    assert "- Цена: 181.3600 USD" in facts.text


# --- finance: Alpha Vantage -------------------------------------------------------------------------


def test_a_finance_question_cites_alpha_vantage_first(alice: User, world: DomainWorld) -> None:
    topic = research(alice, FINANCE)
    assert topic.domain == Topic.Domain.FINANCE
    facts = facts_of(topic)
    assert facts.title.startswith("Alpha Vantage: NVIDIA Corporation (NVDA) stock quote (fetched ")
    assert "- Price: 181.3600 USD" in facts.text
    assert "- Change: 2.4800 (1.3864%) since the previous close 178.8800" in facts.text
    assert "- Market capitalisation: 4.42 T" in facts.text and "latest trading day 2026-11-23" in facts.text
    assert "None" not in facts.text and "PEG" not in facts.text  # "None" and "-" are no figures
    asked = [r.param("function") for r in world.finance.requests_to("/query")]
    assert asked == ["SYMBOL_SEARCH", "GLOBAL_QUOTE", "OVERVIEW"]
    assert world.finance.requests[0].param("keywords") == "NVIDIA"
    assert all(r.param("apikey") == AV_KEY for r in world.finance.requests)
    assert AV_KEY not in facts.url and "symbol=NVDA" in facts.url  # the key is never shown
    assert_cited_first(topic, facts, "alpha-vantage")


def test_a_russian_company_is_looked_up_by_its_latin_name_and_an_empty_quote_is_said(
    alice: User, world: DomainWorld
) -> None:
    topic = research(alice, "Какой курс акций Сбербанка?")
    assert topic.status == Topic.Status.COMPLETED and topic.domain == Topic.Domain.FINANCE
    assert world.finance.requests[0].param("keywords") == "Sberbank"
    warning = warning_of(topic)
    assert "no quote for SBRCY" in warning and "web alone" in warning  # {"Global Quote": {}}
    assert not Document.objects.filter(topic=topic, fetched_via=Document.FetchedVia.DOMAIN).exists()


def test_alpha_vantages_limit_answer_is_a_warning_without_the_key_and_nothing_is_cached(
    alice: User, world: DomainWorld, settings: Any
) -> None:
    world.alpha_vantage.daily_limit = 0  # HTTP 200 {"Information": "… your API key as KEY …"}
    topic = research(alice, FINANCE)
    warning = warning_of(topic)
    assert "Alpha Vantage failed" in warning and "25 requests per day" in warning
    assert AV_KEY not in warning and "***" in warning
    assert topic.status == Topic.Status.COMPLETED
    assert len(world.finance.requests) == 1  # a limit is not retried
    assert not CacheEntry.objects.filter(kind=CacheEntry.Kind.DOMAIN_DATA).exists()
    topic = research(alice, "Какой курс доллара сегодня?")  # the exchange rate fails the same way
    assert "Alpha Vantage failed" in warning_of(topic) and "25 requests per day" in warning_of(topic)
    assert topic.status == Topic.Status.COMPLETED and len(world.finance.requests) == 2
    settings.ALPHA_VANTAGE_API_KEY = ""
    topic = research(alice, FINANCE + " please")
    assert "ALPHA_VANTAGE_API_KEY" in warning_of(topic) and len(world.finance.requests) == 2


def test_a_wrong_alpha_vantage_key_is_said(alice: User, world: DomainWorld, settings: Any) -> None:
    settings.ALPHA_VANTAGE_API_KEY = "WRONG"
    topic = research(alice, FINANCE)
    assert "apikey is invalid or missing" in warning_of(topic)


# --- sports: TheSportsDB ----------------------------------------------------------------------------


def test_a_sports_question_cites_thesportsdb_first(alice: User, world: DomainWorld) -> None:
    topic = research(alice, SPORTS)
    assert topic.domain == Topic.Domain.SPORTS
    facts = facts_of(topic)
    assert facts.title.startswith("TheSportsDB: Arsenal, next and last events (fetched ")
    assert facts.url == "https://www.thesportsdb.com/team/133604"  # a page, not the API with its key
    assert (
        "- 2026-11-29 16:30 UTC: Arsenal – Chelsea (English Premier League, round 13); venue Emirates Stadium"
        in facts.text
    )
    assert "- 2026-11-23 16:30 UTC: Arsenal 4:1 Tottenham Hotspur" in facts.text
    assert "- Stadium: Emirates Stadium" in facts.text
    paths = [r.path for r in world.sports.requests]
    assert paths[0] == "/api/v1/json/123/searchteams.php" and world.sports.requests[0].param("t") == "Arsenal"
    assert "/api/v1/json/123/eventsnext.php" in paths and "/api/v1/json/123/eventslast.php" in paths
    assert_cited_first(topic, facts, "thesportsdb")


def test_a_russian_team_with_nulls_everywhere(alice: User, world: DomainWorld) -> None:
    topic = research(alice, "Когда играет Спартак?")
    facts = facts_of(topic)
    assert "Spartak Moscow" in facts.title and "данные получены" in facts.title
    assert world.sports.requests[0].param("t") == "Spartak"
    assert "TheSportsDB не знает ближайших матчей" in facts.text  # {"events": null}
    # No time (00:00:00 without a timestamp), no venue, no score, round 0: left out, not "None".
    assert "- 2026-11-22: Spartak Moscow счёт неизвестен Zenit" in facts.text
    assert "None" not in facts.text and "стадион" not in facts.text and "Стадион" not in facts.text


def test_thesportsdb_429_is_retried_and_a_wrong_key_said(
    alice: User, world: DomainWorld, settings: Any, quick_retries: None
) -> None:
    world.sports.inject(Fault(status=429, body="<html>Too Many Requests</html>"))
    topic = research(alice, SPORTS)
    assert facts_of(topic)  # one 429, then the answer
    CacheEntry.objects.all().delete()
    settings.THESPORTSDB_API_KEY = "not-a-key"  # the real site answers an empty page, not JSON
    topic = research(alice, SPORTS + " Thanks.")
    assert "not with JSON" in warning_of(topic) and "THESPORTSDB_API_KEY" in warning_of(topic)
    assert topic.status == Topic.Status.COMPLETED
    CacheEntry.objects.all().delete()
    settings.THESPORTSDB_API_KEY = "123"
    world.sports.inject(*[Fault(status=429, body="<html>Too Many Requests</html>")] * 2)
    topic = research(alice, SPORTS + " Please.")
    assert "HTTP 429" in warning_of(topic) and "web alone" in warning_of(topic)


def test_a_team_thesportsdb_does_not_know_and_no_provider(
    alice: User, world: DomainWorld, settings: Any
) -> None:
    topic = research(alice, "When do Atlantis United play next?")
    assert "knows no team" in warning_of(topic)
    settings.THESPORTSDB_URL = ""
    before = len(world.sports.requests)
    topic = research(alice, SPORTS)
    assert "THESPORTSDB_URL" in warning_of(topic) and len(world.sports.requests) == before


# --- transport: OSRM ----------------------------------------------------------------------------------


def test_a_russian_route_question_cites_osrm_with_places_from_nominatim(
    alice: User, world: DomainWorld
) -> None:
    topic = research(alice, ROUTE)
    assert topic.domain == Topic.Domain.TRANSPORTATION
    facts = facts_of(topic)
    assert facts.title.startswith("OSRM: маршрут Москва → Тверь (данные получены ")
    # Nominatim knows places in the nominative: the oblique case, then its guess.
    assert [r.param("q") for r in world.osm.requests_to("/search")] == ["Москвы", "Москва", "Твери", "Тверь"]
    asked = world.router.requests[0]
    assert asked.path == "/route/v1/driving/37.606392,55.625578;35.911648,56.858603"
    assert asked.param("overview") == "false"
    distance = re.search(r"- Расстояние по дорогам: ([\d.]+) км", facts.text)
    assert distance and 180 < float(distance.group(1)) < 220, facts.text
    assert re.search(r"- Время в пути: 2 ч \d+ мин", facts.text), facts.text
    assert "Тверская улица" in facts.text  # the waypoint's road name
    assert facts.url.startswith(
        "https://www.openstreetmap.org/directions?engine=fossgis_osrm_car&route=55.62"
    )
    assert_cited_first(topic, facts, "osrm")


def test_no_route_to_an_island_and_an_invalid_query_are_warnings(
    alice: User, world: DomainWorld, quick_retries: None
) -> None:
    topic = research(alice, "How long is the drive from Berlin to Helgoland?")
    warning = warning_of(topic)
    assert "OSRM found no route from Berlin to Helgoland" in warning and "NoRoute" in warning
    assert topic.status == Topic.Status.COMPLETED
    world.router.inject(Fault(status=400, body={"code": "InvalidQuery", "message": "Query string malformed"}))
    topic = research(alice, "How long is the drive from Berlin to Moscow?")
    assert "InvalidQuery: Query string malformed" in warning_of(topic)
    world.router.inject(Fault(status=429, body="Too Many Requests"))
    topic = research(alice, "How long is the drive from Moscow to Berlin?")
    assert "Москва → Berlin" in facts_of(topic).title  # one 429, retried


def test_a_route_without_two_places_or_without_osrm(alice: User, world: DomainWorld, settings: Any) -> None:
    topic = research(alice, "маршрут от Атлантиды до Твери")
    assert "OpenStreetMap knows no place named Атлантиды" in warning_of(topic)
    assert not world.router.requests
    settings.OSRM_URL = ""
    topic = research(alice, ROUTE)
    assert "OSRM_URL" in warning_of(topic) and not world.router.requests


def test_an_exchange_rate_question_gets_the_rate_in_either_language(alice: User, world: DomainWorld) -> None:
    topic = research(alice, "Какой курс доллара сегодня?")
    assert topic.domain == Topic.Domain.FINANCE
    facts = facts_of(topic)
    assert facts.title.startswith("Alpha Vantage: курс USD → RUB (данные получены ")
    assert "- 1 United States Dollar (USD) = 78.50000000 Russian Ruble (RUB)" in facts.text
    assert "курс обновлён 2026-11-24 06:59:01 UTC" in facts.text
    asked = world.finance.requests_to("/query")
    assert [(r.param("function"), r.param("from_currency"), r.param("to_currency")) for r in asked] == [
        ("CURRENCY_EXCHANGE_RATE", "USD", "RUB")
    ]
    assert_cited_first(topic, facts, "alpha-vantage")
    topic = research(alice, "What is the bitcoin price in euros today?")
    assert "- 1 Bitcoin (BTC) = " in facts_of(topic).text and "Euro (EUR)" in facts_of(topic).text


def test_a_configured_sports_key_is_sent_but_never_stored_or_shown(
    alice: User, world: DomainWorld, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support import domain_world

    monkeypatch.setattr(domain_world, "TSDB_KEYS", ("123", "patreon-secret-42"))
    settings.THESPORTSDB_API_KEY = "patreon-secret-42"
    topic = research(alice, SPORTS)
    assert world.sports.requests[0].path == "/api/v1/json/patreon-secret-42/searchteams.php"
    stored = [
        *CacheEntry.objects.values_list("description", flat=True),
        *RunEvent.objects.filter(topic=topic).values_list("message", flat=True),
        facts_of(topic).url,
        facts_of(topic).text,
        Report.objects.get(topic=topic).markdown,
    ]
    assert stored and not any("patreon-secret-42" in str(text) for text in stored)


def test_a_team_without_an_id_is_said_and_its_keyed_address_never_stored(
    alice: User, world: DomainWorld, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TheSportsDB sends teams whose idTeam is null: no events can be asked for (an empty id
    would share one cache entry between such teams) and no keyed API address may become the
    source's URL."""
    from tests.support import domain_world

    teams = [{**team, "idTeam": None} for team in domain_world.TEAMS]
    monkeypatch.setattr(domain_world, "TEAMS", teams)
    monkeypatch.setattr(domain_world, "TSDB_KEYS", ("123", "patreon-secret-42"))
    settings.THESPORTSDB_API_KEY = "patreon-secret-42"
    topic = research(alice, SPORTS)
    assert [r.path.rsplit("/", 1)[-1] for r in world.sports.requests] == ["searchteams.php"]
    assert not Document.objects.filter(topic=topic, fetched_via=Document.FetchedVia.DOMAIN).exists()
    stored = [
        *Document.objects.filter(topic=topic).values_list("url", flat=True),
        *RunEvent.objects.filter(topic=topic).values_list("message", flat=True),
        Report.objects.get(topic=topic).markdown,
    ]
    assert not any("patreon-secret-42" in str(text) for text in stored)
    assert RunEvent.objects.filter(topic=topic, message__contains="gave no id").exists()
