"""An optional reranker: POST {model, query, documents, top_n} to RERANK_URL (Jina, Cohere and
the many servers that copy them: vLLM, Xinference, TEI's Cohere route, OpenVINO, LocalAI).

Both answer `{"results": [{"index": i, "relevance_score": s}, …]}`, best first; Jina adds
`"document": {"text": …}` and `"usage"`, Cohere `"id"` and `"meta"`; DashScope's own API nests
the same list under `"output"`. Whatever the shape, an answer is used only when every index is
an integer naming one of the documents sent, none twice, each with a finite score; anything
else is a `RerankError` and the caller keeps its own order. Results left out (a `top_n` under
the number of documents) follow the ranked ones in their original order.

No retries: a reranker only improves an order the caller already has, so a failure costs a
better order, never the answer. Every call waits its turn under the global limit
(`LIMIT_RERANK_RPS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings

from mindsearch.clients import ratelimit, tls

# A document longer than this is cut before it is sent (rerankers read ~512–8k tokens anyway).
MAX_DOCUMENT_CHARS = 4000


class RerankError(Exception):
    """The reranker gave no usable order; the message says why (for the log and the event)."""


@dataclass(frozen=True)
class Ranked:
    index: int
    score: float


def is_configured() -> bool:
    return bool(settings.RERANK_URL and settings.RERANK_MODEL)


async def rerank(query: str, documents: list[str], *, user: int | str | None = None) -> list[Ranked]:
    """The documents' order by the reranker, best first, every index once (see the module)."""
    if not is_configured():
        raise RerankError("no reranker is configured (RERANK_URL and RERANK_MODEL)")
    if not documents:
        return []
    body = {
        "model": settings.RERANK_MODEL,
        "query": query,
        "documents": [text[:MAX_DOCUMENT_CHARS] for text in documents],
        "top_n": len(documents),
    }
    await ratelimit.acquire_rerank(user=user)
    response = await _post(body)
    if response.status_code >= 400:
        raise RerankError(_status_message(response))
    try:
        payload = response.json()
    except ValueError:
        raise RerankError(f"the reranker answered HTTP {response.status_code} without JSON") from None
    return complete(parse_results(payload, len(documents)), len(documents))


async def _post(body: dict[str, Any]) -> httpx.Response:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if settings.RERANK_API_KEY:
        headers["Authorization"] = f"Bearer {settings.RERANK_API_KEY}"
    timeout = settings.RERANK_TIMEOUT_SECONDS
    try:
        async with httpx.AsyncClient(timeout=timeout, verify=tls.context()) as client:
            return await client.post(settings.RERANK_URL, json=body, headers=headers)
    except httpx.TimeoutException:
        raise RerankError(f"the reranker did not answer within {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise RerankError(f"the reranker is not reachable: {exc or type(exc).__name__}") from None


def _status_message(response: httpx.Response) -> str:
    status = response.status_code
    if status in (401, 403):
        return f"the reranker rejected the API key (HTTP {status}): check RERANK_API_KEY"
    if status == 429:
        return "the reranker is rate-limiting us (HTTP 429)"
    detail = _error_detail(response)
    return f"the reranker failed (HTTP {status}{': ' + detail if detail else ''})"


def _error_detail(response: httpx.Response) -> str:
    """A short reason from a JSON error body ({"detail"}, {"message"}, {"error": {"message"}})."""
    try:
        payload = response.json()
    except ValueError:
        return ""
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error")
    nested = error.get("message") if isinstance(error, dict) else error
    for value in (payload.get("detail"), payload.get("message"), nested):
        if isinstance(value, str) and value.strip():
            return value.strip()[:200]
    return ""


def parse_results(payload: Any, count: int) -> list[Ranked]:
    """The ranked results of a Jina, Cohere or DashScope answer for `count` documents, best first."""
    results = payload.get("results") if isinstance(payload, dict) else None
    if results is None and isinstance(payload, dict) and isinstance(payload.get("output"), dict):
        results = payload["output"].get("results")
    if not isinstance(results, list):
        raise RerankError("the reranker's answer has no results list")
    ranked: list[Ranked] = []
    seen: set[int] = set()
    for item in results:
        if not isinstance(item, dict):
            raise RerankError("the reranker's answer has a result that is not an object")
        index, score = item.get("index"), item.get("relevance_score")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise RerankError(f"the reranker named document {index!r} of {count}")
        if index in seen:
            raise RerankError(f"the reranker named document {index} twice")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise RerankError(f"the reranker gave document {index} no usable score ({score!r})")
        seen.add(index)
        ranked.append(Ranked(index, float(score)))
    if count and not ranked:
        raise RerankError("the reranker ranked none of the documents")
    # Best first whatever order the list came in (both APIs sort it; a copy may not); a stable
    # sort keeps the server's order among equal scores.
    return sorted(ranked, key=lambda item: -item.score)


def complete(ranked: list[Ranked], count: int) -> list[Ranked]:
    """Every index once: the ranked ones, then the rest in their original order (score -inf)."""
    named = {item.index for item in ranked}
    return ranked + [Ranked(index, -math.inf) for index in range(count) if index not in named]
