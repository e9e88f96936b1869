"""The reranker client against loopback services answering as Jina's and Cohere's /rerank do, and
every way one can fail: each is a RerankError, which the pipeline turns into the original order."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any

import pytest

from mindsearch.clients import ratelimit, rerank
from mindsearch.clients.rerank import Ranked, RerankError, parse_results
from tests.support.fakes import FakeService, Fault
from tests.support.rerank import PATH, rerank_settings, reranker

QUERY = "mixture of tokens"
DOCUMENTS = ["cooking with herbs", "mixture of tokens for transformers", "tokens of a mixture"]


@pytest.fixture(params=["jina", "cohere"])
def service(request: pytest.FixtureRequest, settings: Any) -> Iterator[FakeService]:
    with reranker(request.param, key="secret") as fake:
        for name, value in rerank_settings(fake, key="secret").items():
            setattr(settings, name, value)
        yield fake


def ask(documents: list[str] = DOCUMENTS) -> list[Ranked]:
    return asyncio.run(rerank.rerank(QUERY, documents, user=7))


@pytest.mark.django_db
def test_both_answer_shapes_give_the_order_best_first(service: FakeService) -> None:
    ranked = ask()
    assert [item.index for item in ranked] == [1, 2, 0]
    assert ranked[0].score == 1.0 and ranked[-1].score == 0.0
    body = service.requests_to(PATH)[0].json()
    assert body == {"model": "test-reranker", "query": QUERY, "documents": DOCUMENTS, "top_n": 3}
    assert service.requests[0].headers["authorization"] == "Bearer secret"


@pytest.mark.django_db
def test_every_call_waits_its_turn_under_the_rerank_limit(service: FakeService, settings: Any) -> None:
    settings.LIMIT_RERANK_RPS = 50
    # The figures are written outside the test's transaction, so they are compared.
    before = dict(ratelimit.wait_figures()).get("rerank", (0, 0.0))[0]
    ask()
    ask()
    assert ratelimit.wait_figures()["rerank"][0] == before + 2


def test_dashscope_nests_the_same_list_under_output() -> None:
    payload = {
        "output": {"results": [{"index": 1, "relevance_score": 0.9, "document": {"text": "b"}}]},
        "usage": {"total_tokens": 8},
        "request_id": "x",
    }
    assert parse_results(payload, 2) == [Ranked(1, 0.9)]


def test_results_left_out_follow_in_their_original_order() -> None:
    ranked = rerank.complete(parse_results({"results": [{"index": 2, "relevance_score": 0.5}]}, 4), 4)
    assert [item.index for item in ranked] == [2, 0, 1, 3]
    assert math.isinf(ranked[-1].score)


def test_results_are_sorted_by_score_whatever_order_they_came_in() -> None:
    payload = {"results": [{"index": 0, "relevance_score": 0.1}, {"index": 1, "relevance_score": 0.8}]}
    assert [item.index for item in parse_results(payload, 2)] == [1, 0]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"results": [{"index": 3, "relevance_score": 0.5}]}, "document 3 of 3"),
        ({"results": [{"index": -1, "relevance_score": 0.5}]}, "document -1 of 3"),
        ({"results": [{"index": "1", "relevance_score": 0.5}]}, "document '1' of 3"),
        ({"results": [{"index": True, "relevance_score": 0.5}]}, "document True of 3"),
        ({"results": [{"index": 1, "relevance_score": 0.5}, {"index": 1, "relevance_score": 0.4}]}, "twice"),
        ({"results": [{"index": 1}]}, "no usable score"),
        ({"results": [{"index": 1, "relevance_score": "high"}]}, "no usable score"),
        ({"results": [{"index": 1, "relevance_score": float("nan")}]}, "no usable score"),
        ({"results": []}, "none of the documents"),
        ({"results": ["1"]}, "not an object"),
        ({"data": [{"index": 0, "relevance_score": 1.0}]}, "no results list"),
        ([{"index": 0, "relevance_score": 1.0}], "no results list"),
    ],
)
def test_an_answer_that_names_the_wrong_documents_is_refused(payload: Any, reason: str) -> None:
    with pytest.raises(RerankError, match=reason):
        parse_results(payload, 3)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (Fault(503, body={"detail": "model is loading"}), r"failed \(HTTP 503: model is loading\)"),
        (Fault(500, body="Internal Server Error"), r"failed \(HTTP 500\)"),
        (Fault(429, body={"message": "slow down"}), "rate-limiting us"),
        (Fault(200, body="<html>gateway</html>"), "without JSON"),
        (Fault(200, body={"results": [{"index": 9, "relevance_score": 1}]}), "document 9 of 3"),
        (Fault.hang(3.0), "did not answer within 2 s"),
    ],
)
def test_each_failure_is_a_rerank_error(service: FakeService, fault: Fault, reason: str) -> None:
    service.inject(fault)
    with pytest.raises(RerankError, match=reason):
        ask()


@pytest.mark.django_db
def test_a_wrong_key_is_named(service: FakeService, settings: Any) -> None:
    settings.RERANK_API_KEY = "wrong"
    with pytest.raises(RerankError, match=r"rejected the API key .*RERANK_API_KEY"):
        ask()


@pytest.mark.django_db
def test_an_unreachable_reranker_is_a_rerank_error(settings: Any) -> None:
    with FakeService() as gone:
        url = gone.url
    settings.RERANK_URL, settings.RERANK_MODEL, settings.LIMIT_RERANK_RPS = url + "v1/rerank", "m", 0
    with pytest.raises(RerankError, match="not reachable"):
        ask()


def test_not_configured_without_a_model(settings: Any) -> None:
    settings.RERANK_URL, settings.RERANK_MODEL = "http://127.0.0.1:9/v1/rerank", ""
    assert not rerank.is_configured()
    with pytest.raises(RerankError, match="no reranker is configured"):
        ask()


@pytest.mark.django_db
def test_long_documents_are_cut_before_they_are_sent(service: FakeService) -> None:
    ask(["x" * (rerank.MAX_DOCUMENT_CHARS + 500), "y"])
    sent = service.requests_to(PATH)[0].json()["documents"]
    assert len(sent[0]) == rerank.MAX_DOCUMENT_CHARS and sent[1] == "y"
