"""Stage 7: summaries are scored on the same five criteria; the answer stage picks its sources
by these scores (research/pipeline/diversity.py)."""

from __future__ import annotations

import asyncio

from asgiref.sync import async_to_sync
from django.utils.translation import gettext_noop

from research.models import Document, Summary, SummaryScore
from research.pipeline.context import RunContext, db
from research.pipeline.score_hits import BATCH_SIZE, score_batch
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.SCORE_SUMMARIES


def run(ctx: RunContext) -> Outcome:
    summaries = Summary.objects.filter(document__topic=ctx.topic)
    pending = list(
        summaries.filter(score__isnull=True)
        .select_related("document__hit__subquery")
        .order_by("document__url", "document__title")
    )
    if not pending:
        return Outcome.CONTINUE
    total = summaries.count()
    ctx.emit(
        STAGE,
        gettext_noop("Scoring %(count)s summaries"),
        args={"count": len(pending)},
        done=total - len(pending),
        total=total,
    )
    async_to_sync(_score_all)(ctx, _batches(pending), total, total - len(pending))
    return Outcome.CONTINUE


def _direction(summary: Summary) -> str:
    hit = summary.document.hit
    return hit.subquery.text if hit else summary.document.title


def _batches(pending: list[Summary]) -> list[list[Summary]]:
    """Batches of ten per direction, private documents apart from web pages (see score_hits)."""
    by_direction: dict[tuple[str, bool], list[Summary]] = {}
    for summary in pending:
        by_direction.setdefault((_direction(summary), _is_private(summary)), []).append(summary)
    return [
        group[i : i + BATCH_SIZE] for group in by_direction.values() for i in range(0, len(group), BATCH_SIZE)
    ]


async def _score_all(ctx: RunContext, batches: list[list[Summary]], total: int, done: int) -> None:
    async def one(batch: list[Summary]) -> None:
        nonlocal done
        items = [(s.document.title or s.document.url, s.text) for s in batch]
        private = any(_is_private(s) for s in batch)
        scores, origins = await score_batch(ctx, STAGE, _direction(batch[0]), items, private=private)
        await db(_save)(batch, scores, origins)
        done += len(batch)
        await db(ctx.emit)(
            STAGE,
            gettext_noop("Scored %(count)s summaries"),
            args={"count": len(batch)},
            done=done,
            total=total,
        )

    await asyncio.gather(*(one(batch) for batch in batches))


def _is_private(summary: Summary) -> bool:
    return summary.document.fetched_via == Document.FetchedVia.PRIVATE


def _save(batch: list[Summary], scores: list[dict[str, float]], origins: list[str]) -> None:
    for summary, values, origin in zip(batch, scores, origins, strict=True):
        SummaryScore.objects.get_or_create(summary=summary, defaults={**values, "origin": origin})
