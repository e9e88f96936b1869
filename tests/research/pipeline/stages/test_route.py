"""Routing: the domain, SearXNG categories and query hints, time phrases in the search, and
messages answered without any search."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.base import ContentFile
from django.utils import timezone
from pytest_django import Settings

from research.models import Hit, LLMCall, Report, RunEvent, SearchQuery, SubQuery, Topic
from research.pipeline.classifier import Route, parse_route
from research.pipeline.question_domain import (
    categories_for,
    classify_by_keywords,
    enhance_queries,
    looks_like_small_talk,
)
from research.pipeline.run import plan_topic, run_topic
from research.pipeline.timeparse import parse_period
from research.presenters import STAGES, stage_progress
from retrieval.ingest import ingest
from retrieval.models import UploadedDocument
from retrieval.search import hybrid_search
from tests.support.fakes import Request, searxng_search
from tests.support.world import PAGES, TOPIC, ScriptedLLM, World, search_pages

Domain = Topic.Domain


@pytest.mark.parametrize(
    ("question", "domain"),
    [
        ("Какая погода будет в Казани в выходные?", Domain.WEATHER),
        ("weather forecast for Oslo", Domain.WEATHER),
        ("Расписание поездов Москва — Тверь", Domain.TRANSPORTATION),
        ("cheapest flights from Riga to Lisbon", Domain.TRANSPORTATION),
        ("Котировки акций Сбербанка и дивиденды", Domain.FINANCE),
        ("NVIDIA stock price and earnings", Domain.FINANCE),
        ("Кто выиграл чемпионат КХЛ по хоккею?", Domain.SPORTS),
        ("NBA standings and team roster of the Lakers", Domain.SPORTS),
        ("Как менялась численность населения Казани по годам", Domain.TEMPORAL_CHANGE),
        ("how has the price of solar panels changed over time", Domain.TEMPORAL_CHANGE),
        ("Где находится Эрмитаж и как добраться от вокзала", Domain.LOCATION),
        ("Расскажи об Mixture of Tokens", Domain.GENERAL),
    ],
)
def test_keyword_fallback_finds_the_seven_domains(question: str, domain: str) -> None:
    assert classify_by_keywords(question) == domain


def test_a_span_of_years_leans_to_change_over_time() -> None:
    question = "QS ranking of CUHK 2015–2023"
    assert classify_by_keywords(question) == Domain.GENERAL
    period = parse_period(question, timezone.localdate())
    assert classify_by_keywords(question, period) == Domain.TEMPORAL_CHANGE


@pytest.mark.parametrize(
    "message",
    ["Привет!", "привет, как дела?", "Здравствуйте", "Спасибо большое!", "Hi there", "hello!!",
     "thanks a lot", "Good morning, bot", "кто ты?", "What can you do?"],
)  # fmt: skip
def test_small_talk(message: str) -> None:
    assert looks_like_small_talk(message)


@pytest.mark.parametrize(
    "message",
    ["Привет! Расскажи о квантовых компьютерах", "hi-fi amplifiers", "history of Hilbert spaces",
     "Пока не ясно", "thanks to whom did the Soviet space program succeed", ""],
)  # fmt: skip
def test_not_small_talk(message: str) -> None:
    assert not looks_like_small_talk(message)


def test_parse_route_keeps_what_it_can() -> None:
    fallback = Route(Domain.SPORTS, True, False)
    assert parse_route({"domain": "Finance", "needs_search": False}, fallback) == Route(
        Domain.FINANCE, False, True
    )
    assert parse_route({"domain": "temporal change", "needs_search": "true"}, fallback) == Route(
        Domain.TEMPORAL_CHANGE, True, True
    )
    assert parse_route({"domain": "cooking", "needs_search": "нет"}, fallback) == Route(
        Domain.SPORTS, False, False
    )
    assert parse_route(["finance"], fallback) == fallback


def test_categories_follow_the_domain_and_the_time_range() -> None:
    assert categories_for(Domain.GENERAL, "Mixture of Tokens") == ""
    assert categories_for(Domain.FINANCE, "NVIDIA stock") == "news,general"
    assert categories_for(Domain.SPORTS, "NBA standings") == "news,general"
    assert categories_for(Domain.GENERAL, "How to profile Python code") == "it,general"
    assert categories_for(Domain.GENERAL, "клинические исследования метформина") == "science,general"
    assert categories_for(Domain.GENERAL, "выборы", "week") == "news,general"
    assert categories_for(Domain.LOCATION, "где находится Эрмитаж", "year") == ""


def test_query_hints_go_on_the_first_query_of_each_language_once() -> None:
    assert enhance_queries(["NBA Lakers", "Lakers 2024"], Domain.SPORTS, "en") == [
        "NBA Lakers latest stats rankings team roster",
        "Lakers 2024",
    ]
    assert enhance_queries(["Лейкерс"], Domain.SPORTS, "ru") == ["Лейкерс статистика результаты составы"]
    # Only the words the query lacks are added; a query that has most of them stays as it is.
    assert enhance_queries(["Lakers latest stats"], Domain.SPORTS, "en") == [
        "Lakers latest stats rankings team roster"
    ]
    assert enhance_queries(["Lakers latest stats and rankings"], Domain.SPORTS, "en") == [
        "Lakers latest stats and rankings"
    ]
    assert enhance_queries(["Mixture of Tokens"], Domain.GENERAL, "en") == ["Mixture of Tokens"]
    assert enhance_queries([], Domain.FINANCE, "en") == []


# --- in a run ---------------------------------------------------------------------------------------

NO_SEARCH = '{"domain": "general", "needs_search": false}'


@dataclass
class Classifies(ScriptedLLM):
    """The scripted LLM, classifying every question with `classification` (and answering one
    that needs no search with `direct_reply`, when given)."""

    classification: str = ""
    direct_reply: str = ""

    def route(self, user: str) -> str:
        return self.classification

    def direct(self, user: str) -> str:
        return self.direct_reply or super().direct(user)


def classify_as(world: World, classification: str, *, direct_reply: str = "") -> None:
    """The world's LLM becomes a `Classifies` over the same pages."""
    script = world.script
    world.use_script(
        Classifies(
            pages=script.pages,
            queries_per_language=script.queries_per_language,
            classification=classification,
            direct_reply=direct_reply,
        )
    )


def research(owner: User, question: str, **fields: object) -> Topic:
    topic = Topic.objects.create(owner=owner, question=question, auto_approve=True, **fields)
    if plan_topic(topic.pk):
        run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


@pytest.mark.django_db
def test_a_greeting_is_answered_without_any_search(alice: User, loopback: World) -> None:
    topic = research(alice, "Привет! Как дела?")
    assert topic.status == Topic.Status.COMPLETED
    assert not loopback.searxng.requests and not loopback.reader.requests
    assert not topic.subqueries.exists() and not topic.hits.exists()
    report = Report.objects.get(topic=topic)
    assert report.sources == [] and "Задайте тему" in report.markdown
    # One short LLM call answers it; no classification is spent on small talk.
    assert list(LLMCall.objects.filter(topic=topic).values_list("stage", flat=True)) == ["answer"]
    assert topic.finished_at is not None and topic.llm_model == "test-model"
    assert [row["key"] for row in stage_progress(topic)] == ["answer"]  # no empty search stages


@pytest.mark.django_db
def test_the_progress_bars_follow_the_stored_route_not_the_event_log(alice: User) -> None:
    """Answered without a search (while it is written, too): the answer's bar alone; searched:
    every stage's, though the event log that would have said so is gone."""
    every = [key for key, _ in STAGES]
    topic = Topic.objects.create(owner=alice, question="q", status=Topic.Status.RUNNING)
    for route, status, shown in [
        (Topic.Route.DOCUMENTS, Topic.Status.RUNNING, ["answer"]),
        (Topic.Route.DIRECT, Topic.Status.COMPLETED, ["answer"]),
        (Topic.Route.SEARCH, Topic.Status.COMPLETED, every),
        ("", Topic.Status.COMPLETED, every),  # researched before topics were routed
    ]:
        Topic.objects.filter(pk=topic.pk).update(route=route, status=status)
        topic.refresh_from_db()
        assert [row["key"] for row in stage_progress(topic)] == shown, route


@pytest.mark.django_db
def test_a_greeting_without_an_llm_gets_a_fixed_reply(
    alice: User, loopback: World, settings: Settings
) -> None:
    settings.AITUNNEL_API_KEY = ""
    settings.AITUNNEL_BASE_URL = "https://api.aitunnel.ru/v1/"
    topic = research(alice, "Hello there!")
    assert topic.status == Topic.Status.COMPLETED
    assert "MindSearch" in topic.report.markdown and topic.report.model == ""
    assert not loopback.llm.requests and not loopback.searxng.requests


@pytest.mark.django_db
def test_a_question_the_llm_can_answer_needs_no_search(alice: User, loopback: World) -> None:
    classify_as(loopback, NO_SEARCH, direct_reply="2 + 2 = **4**.")
    topic = research(alice, "Сколько будет 2+2?")
    assert topic.status == Topic.Status.COMPLETED
    assert topic.report.markdown == "2 + 2 = **4**." and topic.report.model == "test-model"
    assert not loopback.searxng.requests
    assert sorted(LLMCall.objects.filter(topic=topic).values_list("stage", flat=True)) == ["answer", "route"]


@pytest.mark.django_db
def test_a_long_question_is_researched_whatever_the_classifier_says(alice: User, loopback: World) -> None:
    classify_as(loopback, NO_SEARCH)
    topic = research(alice, TOPIC + " " + "и подробно сравни это с другими методами " * 4)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert loopback.searxng.requests and topic.report.sources


@pytest.mark.django_db
def test_a_time_phrase_sends_its_time_range_and_sets_the_period(alice: User, loopback: World) -> None:
    topic = research(alice, TOPIC + " за последние 3 дня")
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert topic.time_range == "week"
    today = timezone.localdate(topic.created_at)
    assert (topic.period_start, topic.period_end) == (today - timedelta(days=3), today)
    searches = loopback.searxng.requests_to("/search")
    assert searches and {request.param("time_range") for request in searches} == {"week"}
    route_event = RunEvent.objects.get(topic=topic, stage="route")
    assert route_event.data["time_range"] == "week" and "period" in route_event.message


@pytest.mark.django_db
def test_the_users_own_time_range_wins_over_the_phrase(alice: User, loopback: World) -> None:
    topic = research(alice, TOPIC + " за последние 3 дня", time_range="month")
    assert topic.time_range == "month"
    assert {r.param("time_range") for r in loopback.searxng.requests_to("/search")} == {"month"}
    assert topic.period_start == timezone.localdate(topic.created_at) - timedelta(days=3)


@pytest.mark.django_db
def test_the_domain_picks_categories_and_query_hints(alice: User, loopback: World) -> None:
    classify_as(loopback, '```json\n{"domain": "finance", "needs_search": true}\n```')
    topic = research(alice, TOPIC)
    assert topic.domain == Domain.FINANCE
    searches = loopback.searxng.requests_to("/search")
    assert {request.param("categories") for request in searches} == {"news,general"}
    first_english = SearchQuery.objects.filter(subquery__topic=topic, language="en", position=0)
    assert first_english and all(query.text.endswith("stock price earnings") for query in first_english)
    assert not SearchQuery.objects.filter(
        subquery__topic=topic, position=1, text__contains="earnings"
    ).exists()


@pytest.mark.django_db
def test_an_unreadable_classification_falls_back_to_keywords(alice: User, loopback: World) -> None:
    classify_as(loopback, "It is about money, I think.")
    topic = research(alice, "Котировки акций и дивиденды Mixture of Tokens")
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert topic.domain == Domain.FINANCE
    warning = RunEvent.objects.get(topic=topic, stage="route", level="warning")
    assert "keywords" in warning.message


@pytest.mark.django_db
def test_without_an_llm_the_domain_comes_from_keywords(
    alice: User, loopback: World, settings: Settings
) -> None:
    settings.AITUNNEL_API_KEY = ""
    settings.AITUNNEL_BASE_URL = "https://api.aitunnel.ru/v1/"
    topic = research(alice, "Mixture of Tokens stock price, NASDAQ earnings")
    assert topic.domain == Domain.FINANCE and not loopback.llm.requests
    assert {r.param("categories") for r in loopback.searxng.requests_to("/search")} == {"news,general"}


# --- the period filters the owner's documents ---------------------------------------------------


def upload_text(owner: User, name: str, text: str, published: date | None) -> UploadedDocument:
    data = text.encode()
    document = UploadedDocument(owner=owner, original_name=name, sha256=hashlib.sha256(data).hexdigest())
    document.file.save(name, ContentFile(data), save=False)
    document.save()
    ingest(document.pk)
    UploadedDocument.objects.filter(pk=document.pk).update(published_at=published)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.READY, document.error
    return document


NOTE = "Mixture of Tokens mixes tokens from different examples before each expert. {}"


@pytest.fixture
def three_documents(alice: User, settings: Settings, tmp_path: Path) -> dict[str, UploadedDocument]:
    settings.MEDIA_ROOT = tmp_path
    return {
        "old": upload_text(alice, "old.md", NOTE.format("Written in 2019."), date(2019, 5, 1)),
        "new": upload_text(alice, "new.md", NOTE.format("Written this year."), timezone.localdate()),
        "undated": upload_text(alice, "undated.md", NOTE.format("Nobody knows when."), None),
    }


def document_name(hit: Hit) -> str:
    """The name of the document a private hit's passage is from (a private hit has one)."""
    assert hit.chunk is not None, hit
    return hit.chunk.document.original_name


def names(passages: list) -> set[str]:
    return {passage.document_name for passage in passages}


@pytest.mark.django_db
def test_hybrid_search_keeps_documents_of_the_period_and_those_without_a_date(
    alice: User, three_documents: dict[str, UploadedDocument]
) -> None:
    query = "Mixture of Tokens experts"
    assert names(hybrid_search(alice, query)) == {"old.md", "new.md", "undated.md"}
    in_2019 = (date(2019, 1, 1), date(2019, 12, 31))
    assert names(hybrid_search(alice, query, published=in_2019)) == {"old.md", "undated.md"}
    since_2020 = (date(2020, 1, 1), None)
    assert names(hybrid_search(alice, query, published=since_2020)) == {"new.md", "undated.md"}


@pytest.mark.django_db
def test_a_question_about_a_year_searches_only_that_years_documents(
    alice: User, loopback: World, three_documents: dict[str, UploadedDocument]
) -> None:
    topic = research(alice, TOPIC + " в 2019 году", sources=Topic.Sources.DOCS)
    assert (topic.period_start, topic.period_end) == (date(2019, 1, 1), date(2019, 12, 31))
    private_hits = Hit.objects.filter(topic=topic, source=Hit.Source.PRIVATE).select_related(
        "chunk__document"
    )
    assert private_hits and {document_name(hit) for hit in private_hits} <= {
        "old.md",
        "undated.md",
    }
    assert not loopback.searxng.requests  # documents only: the period never reaches a search engine


# --- a span of years the first search misses ------------------------------------------------------


@pytest.mark.django_db
def test_years_the_first_search_missed_get_searches_of_their_own(alice: User, loopback: World) -> None:
    base = search_pages(loopback.web.url, PAGES)

    def dated(request: Request) -> list[dict]:
        results = base(request)
        if "2023" not in request.param("q"):
            for result in results[:1]:
                result["publishedDate"] = "2022-03-01T00:00:00"  # the broad search covers 2022 only
        return results

    loopback.searxng.routes[("GET", "/search")] = searxng_search(dated)
    topic = research(alice, TOPIC + " в 2021–2023 годах")
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert topic.time_range == "" and (topic.period_start, topic.period_end) == (
        date(2021, 1, 1),
        date(2023, 12, 31),
    )
    per_year = list(topic.subqueries.filter(origin=SubQuery.Origin.PERIOD).order_by("position"))
    assert [sq.text[-4:] for sq in per_year] == ["2021", "2023"]
    assert all("2021–2023" not in sq.text for sq in per_year)
    queries = SearchQuery.objects.filter(subquery__in=per_year)
    assert {q.language for q in queries} == {"ru", "en"} and all(q.searched_at for q in queries)
    sent = [r.param("q") for r in loopback.searxng.requests_to("/search")]
    assert any(q.endswith(" 2021") for q in sent) and any(q.endswith(" 2023") for q in sent)
    event = RunEvent.objects.get(topic=topic, stage="years")
    assert (event.data["years"], event.data["missing"]) == ([2021, 2022, 2023], [2021, 2023])
    # No LLM call was spent on them: their queries are the first sub-query's, plus the year.
    assert LLMCall.objects.filter(topic=topic, stage="queries").count() == 3


@pytest.mark.django_db
def test_no_year_searches_when_the_first_search_covered_every_year(alice: User, loopback: World) -> None:
    topic = research(alice, TOPIC + " в 1980 году")
    assert topic.period_start == date(1980, 1, 1)
    assert not topic.subqueries.filter(origin=SubQuery.Origin.PERIOD).exists()  # "the 1980s" page
    assert "covered every year" in RunEvent.objects.get(topic=topic, stage="years").message


@pytest.mark.django_db
def test_a_topic_with_an_approved_plan_is_searched_whatever_the_classifier_says(
    alice: User, loopback: World
) -> None:
    classify_as(loopback, NO_SEARCH)
    topic = Topic.objects.create(owner=alice, question="Mixture of Tokens?", status=Topic.Status.QUEUED)
    SubQuery.objects.create(topic=topic, text="Что такое Mixture of Tokens в машинном обучении?")
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    assert loopback.searxng.requests and Report.objects.get(topic=topic).sources
