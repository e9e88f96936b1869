"""Stage 1: the question becomes up to three sub-queries, which the user may then edit."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.utils.translation import gettext_noop

from mindsearch.clients.llm import LLMError
from research.models import CacheEntry, SubQuery
from research.pipeline import extractive
from research.pipeline.context import RunContext
from research.pipeline.prompting import ask, image_context_block, load_prompt
from research.pipeline.replies import language_of, parse_prefixed_lines
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.PLAN
MAX_SUBQUERIES = 3


def run(ctx: RunContext) -> Outcome:
    if ctx.topic.subqueries.exists():
        return Outcome.CONTINUE
    ctx.begin(STAGE, gettext_noop("Planning sub-queries"))
    texts, origin = _plan(ctx)
    SubQuery.objects.bulk_create(
        SubQuery(topic=ctx.topic, position=i, text=text, origin=origin) for i, text in enumerate(texts)
    )
    ctx.finish(
        STAGE, gettext_noop("Planned %(count)s sub-queries"), count=len(texts), data={"subqueries": texts}
    )
    return Outcome.CONTINUE


def _plan(ctx: RunContext) -> tuple[list[str], str]:
    if ctx.llm_enabled:
        try:
            answer = async_to_sync(ask)(
                ctx,
                STAGE,
                load_prompt("plan"),
                f'Запрос: "{ctx.asked}"\nЯзык подзапросов: {language_of(ctx.asked)}'
                + image_context_block(ctx),
                kind=CacheEntry.Kind.SEARCH_QUERIES,
            )
        except LLMError as exc:
            ctx.fell_back(
                STAGE,
                gettext_noop("The LLM could not plan (%(error)s); using keyword sub-queries instead."),
                exc,
            )
        else:
            texts = parse_prefixed_lines(answer, "ПОДЗАПРОС:", limit=MAX_SUBQUERIES)
            if texts:
                return texts, SubQuery.Origin.LLM
            ctx.warn(
                STAGE,
                gettext_noop("The LLM's plan had no ПОДЗАПРОС: lines; using keyword sub-queries instead."),
                args={},
            )
    return extractive.keyword_subqueries(ctx.question, limit=MAX_SUBQUERIES), SubQuery.Origin.FALLBACK
