"""The whole pipeline against the loopback world: plan → review → run → report, cached and resumable."""

from __future__ import annotations

import contextlib
import re

import pytest
from django.contrib.auth.models import User

from research.models import (
    CacheEntry,
    Document,
    Hit,
    HitScore,
    LLMCall,
    Report,
    RunEvent,
    SearchQuery,
    SubQuery,
    Summary,
    Topic,
)
from research.pipeline.context import RunContext
from research.pipeline.run import plan_topic, run_topic
from research.pipeline.stages import queries, score_hits, search
from tests.support.fakes import FakeService, Response
from tests.support.world import PAGES, TOPIC, World

pytestmark = pytest.mark.django_db


def new_topic(owner: User, **fields: object) -> Topic:
    return Topic.objects.create(owner=owner, question=fields.pop("question", TOPIC), **fields)


def research(topic: Topic) -> Topic:
    if not plan_topic(topic.pk):
        topic.refresh_from_db()
        assert topic.status == Topic.Status.AWAITING_APPROVAL
        topic.set_status(Topic.Status.QUEUED)
    run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def test_plan_waits_for_review_and_runs_exactly_the_approved_plan(alice: User, loopback: World) -> None:
    topic = new_topic(alice)
    assert plan_topic(topic.pk) is False
    topic.refresh_from_db()
    assert topic.status == Topic.Status.AWAITING_APPROVAL
    planned = list(topic.subqueries.values_list("text", flat=True))
    assert len(planned) == 3 and planned[0] == "Что такое Mixture of Tokens в машинном обучении?"
    # The user deletes one sub-query and rewrites another before approving.
    topic.subqueries.get(position=1).delete()
    edited = topic.subqueries.get(position=2)
    edited.text, edited.origin = "Какие есть улучшения Mixture of Tokens?", SubQuery.Origin.USER
    edited.save()
    topic.set_status(Topic.Status.QUEUED)
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    searched = {q.subquery.text for q in SearchQuery.objects.filter(subquery__topic=topic)}
    assert searched == {
        "Что такое Mixture of Tokens в машинном обучении?",
        "Какие есть улучшения Mixture of Tokens?",
    }


def test_full_run_writes_a_cited_report_from_the_best_pages(alice: User, loopback: World) -> None:
    topic = research(new_topic(alice, auto_approve=True))
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert topic.llm_model == "test-model"
    report = Report.objects.get(topic=topic)
    # Sections from the model, its own sources list replaced by ours, an unknown [99] dropped.
    assert "## Введение" in report.markdown and "## Заключение" in report.markdown
    assert "[99]" not in report.markdown and "made-up source" not in report.markdown
    assert "Transition tuning." in report.markdown  # the dropped citation took its space along
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", report.markdown.split("## Источники")[0])}
    assert cited and cited <= {source["n"] for source in report.sources}
    for source in report.sources:
        assert f"{source['n']}. [" in report.markdown and source["url"] in report.markdown
    best_titles = {page[1] for page in PAGES if page[3] >= 8}
    assert {source["title"] for source in report.sources} <= best_titles


def test_each_search_query_language_and_dedup(alice: User, loopback: World) -> None:
    topic = research(new_topic(alice, auto_approve=True))
    languages = set(SearchQuery.objects.filter(subquery__topic=topic).values_list("language", flat=True))
    assert languages == {"ru", "en"}
    searches = loopback.searxng.requests_to("/search")
    assert {request.param("language") for request in searches} == {"ru", "en"}
    urls = list(Hit.objects.filter(topic=topic).values_list("normalized_url", flat=True))
    assert len(urls) == len(set(urls))
    assert not any("utm_source" in url for url in urls)


def test_hits_are_scored_ten_to_a_call(alice: User, loopback: World) -> None:
    topic = research(new_topic(alice, auto_approve=True))
    for subquery in topic.subqueries.all():
        hits = Hit.objects.filter(subquery=subquery).count()
        assert HitScore.objects.filter(hit__subquery=subquery).count() == hits
    hits_per_subquery = [Hit.objects.filter(subquery=s).count() for s in topic.subqueries.all()]
    expected_calls = sum(-(-n // 10) for n in hits_per_subquery)
    assert LLMCall.objects.filter(topic=topic, stage="score_hits", cache_hit=False).count() == expected_calls
    # Titles came back shuffled and upper-cased, yet every hit got the LLM's score for it.
    for score in HitScore.objects.filter(hit__topic=topic):
        expected = next(page[3] for page in PAGES if page[1] == score.hit.title)
        assert (score.origin, score.total) == (HitScore.Origin.LLM, expected)


def test_top_pages_are_read_through_the_reader_and_summarised(alice: User, loopback: World) -> None:
    topic = research(new_topic(alice, auto_approve=True))
    documents = Document.objects.filter(topic=topic)
    assert documents.exists()
    assert set(documents.values_list("fetched_via", flat=True)) == {Document.FetchedVia.READER}
    assert Summary.objects.filter(document__topic=topic).count() == documents.count()
    assert not loopback.web.requests  # the reader did the reading
    for subquery in topic.subqueries.all():
        assert documents.filter(hit__subquery=subquery).count() <= 5


def test_direct_fetch_when_the_reader_fails(alice: User, loopback: World) -> None:
    loopback.reader.fallback = lambda request: Response(502, "Bad gateway")
    topic = research(new_topic(alice, auto_approve=True))
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert set(Document.objects.filter(topic=topic).values_list("fetched_via", flat=True)) == {"direct"}
    assert "Mixture of Tokens" in Document.objects.filter(topic=topic).first().text


def test_the_same_topic_again_makes_no_external_call(alice: User, loopback: World) -> None:
    first = research(new_topic(alice, auto_approve=True))
    before = loopback.external_requests()
    second = research(new_topic(alice, auto_approve=True))
    assert second.status == Topic.Status.COMPLETED
    assert loopback.external_requests() == before
    assert second.report.markdown == first.report.markdown
    assert not LLMCall.objects.filter(topic=second, cache_hit=False).exists()
    assert (
        LLMCall.objects.filter(topic=second, cache_hit=True).count()
        == LLMCall.objects.filter(topic=first).count()
    )


def test_every_cache_kind_is_used(alice: User, loopback: World) -> None:
    research(new_topic(alice, auto_approve=True))
    kinds = set(CacheEntry.objects.values_list("kind", flat=True))
    # A picture's description, domain data and reranked orders (no reranker is configured here)
    # have their own tests (test_vision, test_domain_data, test_rerank).
    own_tests = {CacheEntry.Kind.VISION, CacheEntry.Kind.DOMAIN_DATA, CacheEntry.Kind.RERANK}
    # The scholarly indexes' answers: tests/research/pipeline/test_papers.py (no index is configured here).
    own_tests |= {
        CacheEntry.Kind.OPENALEX,
        CacheEntry.Kind.ARXIV,
        CacheEntry.Kind.PUBMED,
        CacheEntry.Kind.CROSSREF,
    }
    assert kinds == set(CacheEntry.Kind.values) - own_tests


def test_progress_events_for_every_stage(alice: User, loopback: World) -> None:
    topic = research(new_topic(alice, auto_approve=True))
    stages = set(RunEvent.objects.filter(topic=topic).values_list("stage", flat=True))
    assert {
        "plan",
        "queries",
        "search",
        "score_hits",
        "read",
        "summarise",
        "score_summaries",
        "answer",
    } <= stages
    last = RunEvent.objects.filter(topic=topic, stage="score_hits").order_by("-seq").first()
    assert last.done == last.total


def test_a_run_that_stopped_midway_resumes_without_repeating_work(alice: User, loopback: World) -> None:
    topic = new_topic(alice, auto_approve=True)
    plan_topic(topic.pk)
    # The worker got as far as scoring hits and died: the rows so far are all that is left.
    ctx = RunContext.for_topic(Topic.objects.get(pk=topic.pk))
    for stage in (queries, search, score_hits):
        stage.run(ctx)
    early = ("plan", "queries", "score_hits")
    calls_before = LLMCall.objects.filter(topic=topic, stage__in=early).count()
    hits_before = Hit.objects.filter(topic=topic).count()
    searches_before = len(loopback.searxng.requests)
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    assert Hit.objects.filter(topic=topic).count() == hits_before
    assert len(loopback.searxng.requests) == searches_before
    assert LLMCall.objects.filter(topic=topic, stage__in=early).count() == calls_before


def test_without_an_llm_the_extractive_engine_does_every_stage(
    alice: User, loopback: World, settings: object
) -> None:
    settings.AITUNNEL_API_KEY = ""
    settings.AITUNNEL_BASE_URL = "https://api.aitunnel.ru/v1/"
    topic = research(new_topic(alice, auto_approve=True))
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert topic.llm_model == "" and topic.report.model == ""
    assert not loopback.llm.requests
    assert set(SubQuery.objects.filter(topic=topic).values_list("origin", flat=True)) == {"fallback"}
    assert set(HitScore.objects.filter(hit__topic=topic).values_list("origin", flat=True)) == {"fallback"}
    markdown = topic.report.markdown
    assert "## Источники" in markdown
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", markdown.split("## Источники")[0])}
    assert cited and cited <= {source["n"] for source in topic.report.sources}


def test_a_wrong_llm_key_falls_back_once_and_says_why(alice: User, loopback: World, settings: object) -> None:
    settings.AITUNNEL_API_KEY = "wrong-key"
    topic = research(new_topic(alice, auto_approve=True))
    assert topic.status == Topic.Status.COMPLETED, topic.error
    # Routing, the topic's first call, is rejected once and planning goes on without the LLM;
    # the run tries again (the key may have been fixed meanwhile), its concurrent first calls
    # are rejected, and after that the LLM is never asked again.
    assert len(loopback.llm.requests) == 1 + topic.subqueries.count()
    assert set(LLMCall.objects.filter(topic=topic).values_list("stage", flat=True)) == {"route", "queries"}
    warning = RunEvent.objects.filter(topic=topic, level="warning", stage="llm").last()
    assert "API key" in warning.message
    assert topic.report.model == ""


def test_unreadable_llm_scores_fall_back_to_keywords(alice: User, loopback: World) -> None:
    loopback.script.score = lambda user: "I would rather not score these."
    topic = research(new_topic(alice, auto_approve=True))
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert set(HitScore.objects.filter(hit__topic=topic).values_list("origin", flat=True)) == {"fallback"}


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (Response(401, "Unauthorized"), "basic-auth"),
        (Response(500, "boom"), "SearXNG"),
    ],
)
def test_search_failure_fails_the_topic_clearly_and_keeps_the_plan(
    alice: User, loopback: World, fault: Response, message: str
) -> None:
    loopback.searxng.routes[("GET", "/search")] = lambda request: fault
    topic = research(new_topic(alice, auto_approve=True))
    assert topic.status == Topic.Status.FAILED
    assert message in topic.error
    assert topic.subqueries.count() == 3
    assert SearchQuery.objects.filter(subquery__topic=topic).count() > 0


def test_searxng_unreachable(alice: User, loopback: World, settings: object) -> None:
    with FakeService() as gone:
        dead = gone.url
    settings.SEARXNG_URL = dead
    topic = research(new_topic(alice, auto_approve=True))
    assert topic.status == Topic.Status.FAILED
    assert "not reachable" in topic.error


def test_web_topic_without_searxng_configured(alice: User, loopback: World, settings: object) -> None:
    settings.SEARXNG_URL = ""
    topic = research(new_topic(alice, auto_approve=True))
    assert topic.status == Topic.Status.FAILED
    assert "SEARXNG_URL" in topic.error


def test_no_readable_page_fails_with_a_clear_message(alice: User, loopback: World) -> None:
    loopback.reader.fallback = lambda request: Response(402, "Payment required")
    loopback.web.routes.clear()
    topic = research(new_topic(alice, auto_approve=True))
    assert topic.status == Topic.Status.FAILED
    assert "could be read" in topic.error
    assert HitScore.objects.filter(hit__topic=topic).exists()


def test_a_cancelled_topic_does_not_run(alice: User, loopback: World) -> None:
    topic = new_topic(alice, auto_approve=True)
    plan_topic(topic.pk)
    Topic.objects.filter(pk=topic.pk).update(status=Topic.Status.CANCELLED)
    assert run_topic(topic.pk) == Topic.Status.CANCELLED
    assert not Hit.objects.filter(topic=topic).exists()


def test_an_answer_is_cached_only_with_its_llm_call_row(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache entry and the `LLMCall` row are one transaction: a worker that dies between them
    (here: the row cannot be written) leaves no answer that was paid for but never counted."""

    def refuse(**fields: object) -> None:
        raise RuntimeError("the worker died here")

    monkeypatch.setattr(LLMCall.objects, "create", refuse)
    topic = new_topic(alice)
    with contextlib.suppress(RuntimeError):
        plan_topic(topic.pk)
    assert loopback.llm.requests, "the plan was never asked for"
    assert not CacheEntry.objects.exists()
