"""Loopback rerankers speaking Jina's and Cohere's /rerank APIs, for tests and bench/rerank.py.

Both take POST {model, query, documents, top_n} with a bearer key and answer the results best
first, at most `top_n` of them, each with the `index` of a document sent and its
`relevance_score`. Jina adds `model`, `usage` and each result's `document: {text}`; Cohere (v2)
adds `id` and `meta` and leaves the documents out. Errors are as each sends them: Jina
`{"detail": …}`, Cohere `{"message": …}`; a wrong key is HTTP 401, a body without query or
documents 400 (Jina 422). Scores come from `score(query, documents)`: word overlap by default.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

from tests.support.fakes import FakeService, Request, Response

Scorer = Callable[[str, list[str]], list[float]]
PATH = "/v1/rerank"


def word_overlap(query: str, documents: list[str]) -> list[float]:
    """The share of the query's words in each document: an honest, if crude, relevance score."""
    words = set(re.findall(r"\w+", query.lower()))
    return [len(words & set(re.findall(r"\w+", doc.lower()))) / max(len(words), 1) for doc in documents]


def rerank_route(
    style: str, *, key: str | None = None, score: Scorer = word_overlap
) -> Callable[[Request], Response]:
    """The /rerank route of a Jina-style ("jina") or Cohere-style ("cohere") service."""

    def error(status: int, message: str) -> Response:
        return Response(status, {"detail": message} if style == "jina" else {"message": message})

    def route(request: Request) -> Response:
        if key is not None and request.headers.get("authorization") != f"Bearer {key}":
            return error(401, "invalid api token")
        try:
            body = request.json()
        except ValueError:
            return error(400, "invalid JSON body")
        if not isinstance(body, dict) or not body.get("model"):
            return error(422 if style == "jina" else 400, "model is required")
        query, documents = body.get("query"), body.get("documents")
        if not isinstance(query, str) or not query or not isinstance(documents, list) or not documents:
            return error(422 if style == "jina" else 400, "query and documents are required")
        texts = [doc if isinstance(doc, str) else str(doc.get("text", "")) for doc in documents]
        scores = score(query, texts)
        order = sorted(range(len(texts)), key=lambda i: -scores[i])[: int(body.get("top_n") or len(texts))]
        if style == "jina":
            results: list[dict[str, Any]] = [
                {"index": i, "document": {"text": texts[i]}, "relevance_score": scores[i]} for i in order
            ]
            tokens = sum(len(text.split()) for text in texts)
            return Response(
                200, {"model": body["model"], "usage": {"total_tokens": tokens}, "results": results}
            )
        return Response(
            200,
            {
                "id": str(uuid.uuid4()),
                "results": [{"index": i, "relevance_score": scores[i]} for i in order],
                "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
            },
        )

    return route


def reranker(style: str = "jina", *, key: str | None = None, score: Scorer = word_overlap) -> FakeService:
    return FakeService({("POST", PATH): rerank_route(style, key=key, score=score)})


def rerank_settings(service: FakeService, *, model: str = "test-reranker", key: str = "") -> dict[str, Any]:
    return {
        "RERANK_URL": service.url.rstrip("/") + PATH,
        "RERANK_MODEL": model,
        "RERANK_API_KEY": key,
        "LIMIT_RERANK_RPS": 1000,
        "RERANK_TIMEOUT_SECONDS": 2.0,
    }
