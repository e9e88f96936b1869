"""The optional reranker (a rerank endpoint; the original order on any failure) as the pipeline uses it.

- Web hits, before score_hits: each sub-query's web hits are ranked against the sub-query
  (title and snippet, as the search engine gave them), and each hit keeps its place
  (`Hit.rerank_rank`). The LLM then scores them in that order, so its batches of ten hold
  hits of like quality (the reranker's best ten together), and wherever the LLM's scores tie —
  they are sums of five small integers, so they often do — the reranker's order decides which
  pages are read within the read stage's budget (`read._candidates`) before the search engine's.
- Private passages, before fusion: each phrasing's hybrid-search pool is ranked against that
  phrasing and cut to the usual number, then the phrasings are fused as before
  (`private.find_passages`); the local-RAG answer takes its passages the same way.

Any failure — not reachable, a timeout, an HTTP error, an answer that is not JSON or names
documents that were not sent — keeps the original order: it is logged, written to the topic's
event log once per stage, and the rest of that stage asks the reranker no more. Orders are
cached (kind `rerank`): a web order for everyone, a private one for its owner only; a failure
is never cached. Private passages go to the reranker only while RERANK_PRIVATE is on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext_noop

from mindsearch.clients import rerank as client
from research.models import CacheEntry, Hit
from research.pipeline import cache
from research.pipeline.context import RunContext
from research.pipeline.stage import StageName

log = logging.getLogger(__name__)
T = TypeVar("T")

# Of a private search, this many passages per phrasing are ranked, and the usual number kept.
PASSAGE_POOL = 20


@dataclass
class Outcome:
    order: list[int] | None  # indexes of the texts, best first; None: keep the original order
    error: str = ""


def is_on(*, private: bool = False) -> bool:
    return client.is_configured() and (settings.RERANK_PRIVATE or not private)


def rank(query: str, texts: list[str], *, user_id: int | None, private: bool) -> Outcome:
    """The reranker's order of `texts` for `query`, from the cache when it was asked before."""
    if not is_on(private=private) or len(texts) < 2:
        return Outcome(None)
    key = cache.make_key("rerank", settings.RERANK_URL, settings.RERANK_MODEL, query, texts)
    owner_id = user_id if private else None
    cached = cache.get(CacheEntry.Kind.RERANK, key, owner_id)
    if isinstance(cached, list) and sorted(cached) == list(range(len(texts))):
        return Outcome([int(index) for index in cached])
    try:
        ranked = async_to_sync(client.rerank)(query, texts, user=user_id)
    except client.RerankError as exc:
        log.warning("The reranker failed, the original order is kept: %s", exc)
        return Outcome(None, str(exc))
    order = [item.index for item in ranked]
    cache.put(CacheEntry.Kind.RERANK, key, order, owner_id=owner_id, description=f"rerank: {query[:200]}")
    return Outcome(order)


def apply(items: Sequence[T], order: list[int] | None) -> list[T]:
    return list(items) if order is None else [items[index] for index in order]


# --- Web hits, before scoring ---------------------------------------------------------------------


def order_web_hits(ctx: RunContext, stage: StageName) -> None:
    """Give every sub-query's web hits their place by the reranker, once (see the module)."""
    if not is_on():
        return
    unranked = Hit.objects.filter(topic=ctx.topic, source=Hit.Source.WEB, rerank_rank__isnull=True)
    subquery_ids = list(unranked.values_list("subquery_id", flat=True).distinct())
    ranked = 0
    for subquery_id in sorted(subquery_ids):
        hits = list(
            Hit.objects.filter(subquery_id=subquery_id, source=Hit.Source.WEB)
            .select_related("subquery")
            .order_by("position", "normalized_url")
        )
        if len(hits) < 2:
            continue
        outcome = rank(
            hits[0].subquery.text, [_hit_text(hit) for hit in hits], user_id=ctx.owner_id, private=False
        )
        if outcome.order is None:
            if outcome.error:
                _failed(ctx, stage, outcome.error, web=True)
                return
            continue
        for place, index in enumerate(outcome.order):
            hits[index].rerank_rank = place
        with transaction.atomic():
            Hit.objects.bulk_update(hits, ["rerank_rank"])
        ranked += len(hits)
    if ranked:
        ctx.emit(
            stage,
            gettext_noop("The reranker ordered %(count)s web hits before scoring"),
            args={"count": ranked},
        )


def _hit_text(hit: Hit) -> str:
    return "\n".join(part for part in (hit.title, hit.snippet) if part) or hit.url


# --- Private passages, before fusion --------------------------------------------------------------


@dataclass
class PassageReorderer:
    """Ranks one phrasing's passages at a time for `private.find_passages`; after one failure
    it keeps every later order as it is (one event, not one per phrasing)."""

    ctx: RunContext
    stage: StageName
    ranked: int = 0
    failed: bool = False
    texts_of: Callable[[Any], str] = field(default=lambda passage: passage.text)

    def __call__(self, query: str, passages: list[T]) -> list[T]:
        if self.failed:
            return passages
        texts = [self.texts_of(passage) for passage in passages]
        outcome = rank(query, texts, user_id=self.ctx.owner_id, private=True)
        if outcome.error:
            self.failed = True
            _failed(self.ctx, self.stage, outcome.error, web=False)
        if outcome.order is not None:
            self.ranked += 1
        return apply(passages, outcome.order)


def passage_reorderer(ctx: RunContext, stage: StageName) -> PassageReorderer | None:
    return PassageReorderer(ctx, stage) if is_on(private=True) else None


def _failed(ctx: RunContext, stage: StageName, error: str, *, web: bool) -> None:
    ctx.warn(
        stage,
        gettext_noop("The reranker failed (%(error)s); the web hits keep the search engine's order.")
        if web
        else gettext_noop(
            "The reranker failed (%(error)s); your documents' passages keep the retrieval order."
        ),
        args={"error": error},
    )
