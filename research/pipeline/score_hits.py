"""Stage 4: the LLM scores hits in batches of ten on five 0–10 criteria (`Scores`).

One call per batch; answers are matched back by title. A hit the LLM skipped gets the default
score; a batch whose call fails is scored by the extractive engine instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from django.db.models import F
from django.utils.translation import gettext_noop

from mindsearch.clients.llm import parse_json
from research.models import CacheEntry, Hit, HitScore, Scores
from research.pipeline import extractive, rerank
from research.pipeline.context import RunContext, db
from research.pipeline.prompting import Asking, data_block, image_labels_block
from research.pipeline.replies import default_scores, match_scores
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.SCORE_HITS
BATCH_SIZE = 10
T = TypeVar("T")


def run(ctx: RunContext) -> Outcome:
    rerank.order_web_hits(ctx, STAGE)
    hits = Hit.objects.filter(topic=ctx.topic).select_related("subquery")
    # The reranker's order first (when one is configured and answered), so a batch of ten holds
    # hits of like quality; then the search engine's.
    by_reranker = F("rerank_rank").asc(nulls_last=True)
    order = ("subquery__round", "subquery__position", by_reranker, "position", "normalized_url")
    pending = list(hits.filter(score__isnull=True).order_by(*order))
    if not pending:
        return Outcome.CONTINUE
    hit_batches = _batches(pending)
    total = hits.count()
    ctx.begin(
        STAGE,
        gettext_noop("Scoring %(count)s hits in %(calls)s LLM calls"),
        len(pending),
        total,
        count=len(pending),
        calls=len(hit_batches),
    )
    async_to_sync(score_all)(
        ctx,
        STAGE,
        hit_batches,
        lambda batch: _score(ctx, batch),
        message=gettext_noop("Scored %(count)s hits"),
        total=total,
        done=total - len(pending),
    )
    return Outcome.CONTINUE


def _batches(hits: list[Hit]) -> list[list[Hit]]:
    """Batches of ten within one sub-query, since the prompt names one search direction.

    Web hits and passages of private documents go in separate batches: a web batch stays the
    same question for every user and is answered from the shared cache.
    """
    return in_batches(hits, lambda hit: (hit.subquery_id, hit.source))


def in_batches(rows: list[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """`rows` in batches of at most BATCH_SIZE, each of rows with the same `key`, in order."""
    groups: dict[Hashable, list[T]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return [group[i : i + BATCH_SIZE] for group in groups.values() for i in range(0, len(group), BATCH_SIZE)]


async def score_all(
    ctx: RunContext,
    stage: str,
    batches: list[list[T]],
    score: Callable[[list[T]], Awaitable[dict[str, Any] | None]],
    *,
    message: str,
    total: int,
    done: int,
) -> None:
    """Every batch scored at once (`score` saves a batch's scores and returns the event's data);
    each batch answered is announced with the running count (`message`: a msgid with %(count)s)."""

    async def one(batch: list[T]) -> None:
        nonlocal done
        data = await score(batch)
        done += len(batch)
        await db(ctx.emit)(stage, message, args={"count": len(batch)}, done=done, total=total, data=data)

    await asyncio.gather(*(one(batch) for batch in batches))


async def _score(ctx: RunContext, batch: list[Hit]) -> dict[str, Any]:
    private = batch[0].source == Hit.Source.PRIVATE
    items = [_item(hit) for hit in batch]
    scores, origins = await score_batch(ctx, STAGE, batch[0].subquery.text, items, private=private)
    await db(_save)(batch, scores, origins)
    return _scored(batch, scores)


async def score_batch(
    ctx: RunContext, stage: str, direction: str, items: list[tuple[str, str]], *, private: bool = False
) -> tuple[list[dict[str, float]], list[str]]:
    """Five criteria per (title, text) item, and where each came from (llm or fallback).

    Shared by hit and summary scoring: the seed uses the same prompt and criteria for both.
    """
    request = _scoring_request(ctx.asked, direction, items) + image_labels_block(ctx)
    titles = [title for title, _ in items]
    matched = await _scoring(stage).answer(
        ctx, stage, request, lambda text: match_scores(titles, parse_json(text)), private=private
    )
    if matched is not None:
        return [m or default_scores() for m in matched], [_origin(m) for m in matched]
    fallback = extractive.score_texts(ctx.question, direction, items)
    return fallback, [Scores.Origin.FALLBACK] * len(items)


def _scoring(stage: str) -> Asking:
    """Scoring hits (this stage) or summaries: the same prompt, answers cached apart."""
    kind = CacheEntry.Kind.RANKED_RESULTS if stage == STAGE else CacheEntry.Kind.RANKED_SUMMARIES
    return Asking("score", kind, gettext_noop("LLM scoring failed (%(error)s); scored by keywords instead."))


def _origin(matched: dict[str, float] | None) -> str:
    return Scores.Origin.LLM if matched is not None else Scores.Origin.FALLBACK


def _scoring_request(question: str, direction: str, items: list[tuple[str, str]]) -> str:
    listing = "\n\n".join(f"{i}. Заголовок: {title}\n{text}" for i, (title, text) in enumerate(items, 1))
    return (
        f"Исходный запрос: {question}\nТекущее направление поиска: {direction}\n\n"
        f"Результаты для оценки ({len(items)}):\n{data_block(listing)}"
    )


def _item(hit: Hit) -> tuple[str, str]:
    if hit.source == Hit.Source.PRIVATE:
        return hit.title, f"Фрагмент документа пользователя:\n{hit.snippet}"
    return hit.title or hit.url, f"URL: {hit.url}\nОписание: {hit.snippet}"


def _save(batch: list[Hit], scores: list[dict[str, float]], origins: list[str]) -> None:
    for hit, values, origin in zip(batch, scores, origins, strict=True):
        HitScore.objects.get_or_create(hit=hit, defaults={**values, "origin": origin})


def _scored(batch: list[Hit], scores: list[dict[str, float]]) -> dict:
    return {"hits": [{"hit": hit.pk, "scores": values} for hit, values in zip(batch, scores, strict=True)]}
