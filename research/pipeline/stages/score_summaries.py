"""Stage 7: summaries are scored on the same five criteria; the answer stage picks its sources
by these scores (research/pipeline/stages/answer/diversity.py)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.utils.translation import gettext_noop

from research.models import Document, Summary, SummaryScore
from research.pipeline.context import RunContext, db
from research.pipeline.scoring import in_batches, score_all, score_batch
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
    ctx.begin(STAGE, gettext_noop("Scoring %(count)s summaries"), len(pending), total, count=len(pending))
    async_to_sync(score_all)(
        ctx,
        STAGE,
        # Batches of ten per direction, private documents apart from web pages (see score_hits).
        in_batches(pending, lambda summary: (_direction(summary), _is_private(summary))),
        lambda batch: _score(ctx, batch),
        message=gettext_noop("Scored %(count)s summaries"),
        total=total,
        done=total - len(pending),
    )
    return Outcome.CONTINUE


def _direction(summary: Summary) -> str:
    hit = summary.document.hit
    return hit.subquery.text if hit else summary.document.title


async def _score(ctx: RunContext, batch: list[Summary]) -> None:
    items = [(s.document.title or s.document.url, s.text) for s in batch]
    private = any(_is_private(s) for s in batch)
    scores, origins = await score_batch(ctx, STAGE, _direction(batch[0]), items, private=private)
    await db(_save)(batch, scores, origins)


def _is_private(summary: Summary) -> bool:
    return summary.document.fetched_via == Document.FetchedVia.PRIVATE


def _save(batch: list[Summary], scores: list[dict[str, float]], origins: list[str]) -> None:
    for summary, values, origin in zip(batch, scores, origins, strict=True):
        SummaryScore.objects.get_or_create(summary=summary, defaults={**values, "origin": origin})
