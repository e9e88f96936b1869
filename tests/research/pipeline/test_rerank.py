"""The reranker in research, through the real stages against private_loopback services: web hits ordered
before LLM scoring, private passages before fusion; any failure keeps the original order, is
logged and written to the event log, and the stage asks no more; orders are cached."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from research.models import CacheEntry, Hit, RunEvent, SubQuery, Topic
from research.pipeline import private, rerank
from research.pipeline.context import RunContext
from research.pipeline.run import plan_topic, run_topic
from research.pipeline.stage import StageName
from tests.research.pipeline.test_private_sources import PHRASE, alices_documents
from tests.support.fakes import FakeService, Fault
from tests.support.rerank import PATH, rerank_settings, reranker
from tests.support.world import TOPIC, World, prompt_kind


def last_first(query: str, documents: list[str]) -> list[float]:
    """A reranker that puts the documents in the reverse of the order they were sent."""
    return [float(i) for i in range(len(documents))]


pytestmark = pytest.mark.usefixtures("media_root")


@pytest.fixture(params=["jina", "cohere"])
def service(request: pytest.FixtureRequest, settings: Any) -> Iterator[FakeService]:
    with reranker(request.param, key="k", score=last_first) as fake:
        for name, value in rerank_settings(fake, key="k").items():
            setattr(settings, name, value)
        yield fake


def research(owner: User, sources: str = Topic.Sources.WEB) -> Topic:
    topic = Topic.objects.create(owner=owner, question=TOPIC, sources=sources, auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def score_requests(w: World, direction: str) -> list[str]:
    """The user messages of the LLM's scoring calls for one sub-query's web hits, in order."""
    found = []
    for request in w.llm.requests:
        messages = json.loads(request.body)["messages"]
        user = messages[-1]["content"]
        scoring = prompt_kind(messages[0]["content"]) == "score"
        if scoring and f"направление поиска: {direction}\n" in user and "Фрагмент документа" not in user:
            found.append(user)
    return found


@pytest.mark.django_db
def test_web_hits_are_scored_in_the_rerankers_order(
    alice: User, private_loopback: World, service: FakeService
) -> None:
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    # Hits are the topic's once (by URL): a sub-query whose pages another found first may have
    # fewer than two, and one hit needs no order.
    subqueries = [
        subquery
        for subquery in SubQuery.objects.filter(topic=topic).order_by("position")
        if subquery.hits.filter(source=Hit.Source.WEB).count() >= 2
    ]
    asked = service.requests_to(PATH)
    assert subqueries
    assert len(asked) == len(subqueries)
    for subquery, request in zip(subqueries, asked, strict=True):
        hits = list(
            Hit.objects.filter(subquery=subquery, source=Hit.Source.WEB).order_by(
                "position", "normalized_url"
            )
        )
        body = request.json()
        assert body["query"] == subquery.text and body["model"] == "test-reranker"
        assert body["documents"] == [f"{hit.title}\n{hit.snippet}" for hit in hits]
        # The reranker put them last first; each hit keeps its place, and the LLM saw them so.
        assert [hit.rerank_rank for hit in hits] == list(range(len(hits)))[::-1]
        first_batch = score_requests(private_loopback, subquery.text)[0]
        titles = [
            line.split("Заголовок: ", 1)[1] for line in first_batch.splitlines() if "Заголовок: " in line
        ]
        assert titles == [hit.title for hit in reversed(hits)][: len(titles)]
    events = RunEvent.objects.filter(
        topic=topic, stage="score_hits", message__startswith="The reranker ordered"
    )
    assert events.count() == 1
    assert CacheEntry.objects.filter(kind=CacheEntry.Kind.RERANK, owner=None).count() == len(subqueries)

    # The same hits again (another topic on the same question): the orders come from the cache.
    again = research(alice)
    assert again.status == Topic.Status.COMPLETED
    assert len(service.requests_to(PATH)) == len(subqueries)
    assert not Hit.objects.filter(topic=again, source=Hit.Source.WEB, rerank_rank__isnull=True).exists()


@pytest.mark.django_db
def test_equal_scores_are_read_in_the_rerankers_order(
    alice: User, private_loopback: World, service: FakeService
) -> None:
    private_loopback.script.score = lambda user: "[]"  # type: ignore[method-assign]  # the default score: all tie
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    read = Hit.objects.filter(topic=topic, source=Hit.Source.WEB, document__isnull=False)
    unread = Hit.objects.filter(topic=topic, source=Hit.Source.WEB, document__isnull=True)
    assert read.exists() and unread.exists()
    assert not Hit.objects.filter(topic=topic, source=Hit.Source.WEB, rerank_rank__isnull=True).exists()
    # Per sub-query, the pages read are the reranker's best (here: the search engine's last).
    compared = 0
    for subquery in SubQuery.objects.filter(topic=topic):
        ranks_read = {
            rank
            for rank in read.filter(subquery=subquery).values_list("rerank_rank", flat=True)
            if rank is not None
        }
        ranks_left = {
            rank
            for rank in unread.filter(subquery=subquery).values_list("rerank_rank", flat=True)
            if rank is not None
        }
        if ranks_read and ranks_left:
            assert max(ranks_read) < min(ranks_left)
            compared += 1
    assert compared


FAILURES = {
    "5xx": (Fault(503, body={"detail": "upstream overloaded"}), "HTTP 503: upstream overloaded"),
    "not json": (Fault(200, body="<html>Bad gateway</html>"), "without JSON"),
    "wrong indices": (Fault(200, body={"results": [{"index": 99, "relevance_score": 1.0}]}), "document 99"),
    "timeout": (Fault.hang(3.0), "did not answer within 2 s"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("failure", FAILURES)
def test_a_failing_reranker_keeps_the_search_engines_order(
    alice: User, private_loopback: World, service: FakeService, failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    fault, reason = FAILURES[failure]
    service.inject(fault, *[Fault(500)] * 10)
    with caplog.at_level(logging.WARNING, logger="research.pipeline.rerank"):
        topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert topic.report.sources
    assert len(service.requests_to(PATH)) == 1  # the stage asked no more after the failure
    assert not Hit.objects.filter(topic=topic, rerank_rank__isnull=False).exists()
    (event,) = RunEvent.objects.filter(topic=topic, message__startswith="The reranker failed")
    assert event.stage == "score_hits" and event.level == RunEvent.Level.WARNING
    assert reason in event.message and event.message.endswith("the web hits keep the search engine's order.")
    assert any(reason in record.getMessage() for record in caplog.records)
    assert not CacheEntry.objects.filter(kind=CacheEntry.Kind.RERANK).exists()  # a failure is not cached


# --- Private passages, before fusion -------------------------------------------------------------


def private_context(owner: User) -> RunContext:
    topic = Topic.objects.create(owner=owner, question=TOPIC, sources=Topic.Sources.DOCS)
    return RunContext.for_topic(topic)


PHRASINGS = ["Mixture of Tokens training cost", f"{PHRASE} Mixture of Tokens improvements"]


@pytest.mark.django_db
def test_private_passages_are_reranked_before_fusion(
    alice: User, private_loopback: World, service: FakeService
) -> None:
    alices_documents(alice)
    ctx = private_context(alice)
    plain = private.find_passages(alice, PHRASINGS)
    reorder = rerank.passage_reorderer(ctx, StageName.SEARCH)
    assert reorder is not None
    reranked = private.find_passages(alice, PHRASINGS, reorder=reorder)
    assert len(service.requests_to(PATH)) == len(PHRASINGS) and reorder.ranked == len(PHRASINGS)
    # Each phrasing's pool went to the reranker; its reversed order, cut, is what was fused.
    from retrieval.search import hybrid_search

    pools = [hybrid_search(alice, text, k=rerank.PASSAGE_POOL) for text in PHRASINGS]
    for request, text, pool in zip(service.requests_to(PATH), PHRASINGS, pools, strict=True):
        assert request.json()["query"] == text and request.json()["documents"] == [p.text for p in pool]
    expected = private.fuse_rankings(
        [[p.chunk_id for p in reversed(pool)][: private.PASSAGES_PER_PHRASING] for pool in pools]
    )
    assert [p.chunk_id for p in reranked] == expected[: private.PASSAGES_PER_SUBQUERY]
    assert [p.chunk_id for p in reranked] != [p.chunk_id for p in plain]
    # The order of private text is cached for its owner alone.
    entries = CacheEntry.objects.filter(kind=CacheEntry.Kind.RERANK)
    assert entries.count() == len(PHRASINGS) and set(entries.values_list("owner_id", flat=True)) == {alice.pk}


@pytest.mark.django_db
def test_a_failing_reranker_keeps_the_retrieval_order_of_passages(
    alice: User, private_loopback: World, service: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    alices_documents(alice)
    ctx = private_context(alice)
    plain = private.find_passages(alice, PHRASINGS)
    service.inject(Fault(502, body="Bad Gateway"))
    reorder = rerank.passage_reorderer(ctx, StageName.SEARCH)
    with caplog.at_level(logging.WARNING, logger="research.pipeline.rerank"):
        found = private.find_passages(alice, PHRASINGS, reorder=reorder)
    assert [p.chunk_id for p in found] == [p.chunk_id for p in plain]
    assert len(service.requests_to(PATH)) == 1  # not asked again for the second phrasing
    (event,) = RunEvent.objects.filter(topic=ctx.topic, message__startswith="The reranker failed")
    assert "HTTP 502" in event.message and event.message.endswith("keep the retrieval order.")
    assert any("HTTP 502" in record.getMessage() for record in caplog.records)


@pytest.mark.django_db
def test_private_text_stays_home_when_rerank_private_is_off(
    alice: User, private_loopback: World, service: FakeService, settings: Any
) -> None:
    settings.RERANK_PRIVATE = False
    alices_documents(alice)
    topic = research(alice, Topic.Sources.BOTH)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    sent = [json.dumps(request.json()) for request in service.requests_to(PATH)]
    assert sent and not any(PHRASE in body for body in sent)  # web hits only
