"""Stage 4: the LLM scores hits in batches of ten on five 0–10 criteria (`Scores`).

One call per batch; answers are matched back by title. A hit the LLM skipped gets the default
score; a batch whose call fails is scored by the extractive engine instead.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.db.models import F
from django.utils.translation import gettext_noop

from research.models import Hit, HitScore
from research.pipeline import rerank
from research.pipeline.context import RunContext, db
from research.pipeline.scoring import in_batches, score_all, score_batch
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.SCORE_HITS


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


async def _score(ctx: RunContext, batch: list[Hit]) -> dict[str, Any]:
    private = batch[0].source == Hit.Source.PRIVATE
    items = [_item(hit) for hit in batch]
    scores, origins = await score_batch(ctx, STAGE, batch[0].subquery.text, items, private=private)
    await db(_save)(batch, scores, origins)
    return _scored(batch, scores)


def _item(hit: Hit) -> tuple[str, str]:
    if hit.source == Hit.Source.PRIVATE:
        return hit.title, f"Фрагмент документа пользователя:\n{hit.snippet}"
    return hit.title or hit.url, f"URL: {hit.url}\nОписание: {hit.snippet}"


def _save(batch: list[Hit], scores: list[dict[str, float]], origins: list[str]) -> None:
    for hit, values, origin in zip(batch, scores, origins, strict=True):
        HitScore.objects.get_or_create(hit=hit, defaults={**values, "origin": origin})


def _scored(batch: list[Hit], scores: list[dict[str, float]]) -> dict:
    return {"hits": [{"hit": hit.pk, "scores": values} for hit, values in zip(batch, scores, strict=True)]}
