"""Stage 1: the question becomes up to three sub-queries, which the user may then edit."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.utils.translation import gettext_noop

from research.models import CacheEntry, SubQuery
from research.pipeline import extractive, outline
from research.pipeline.context import RunContext
from research.pipeline.prompting import LINE_TOKENS, Asking, image_context_block
from research.pipeline.replies import language_of, parse_prefixed_lines
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.PLAN
MAX_SUBQUERIES = 3
PREFIX = "ПОДЗАПРОС:"


def run(ctx: RunContext) -> Outcome:
    if ctx.topic.subqueries.exists():
        return Outcome.CONTINUE
    ctx.begin(STAGE, gettext_noop("Planning sub-queries"))
    texts, origin = _plan(ctx)
    SubQuery.objects.bulk_create(
        SubQuery(topic=ctx.topic, position=i, text=text, origin=origin) for i, text in enumerate(texts)
    )
    _propose_outline(ctx, texts)
    ctx.finish(
        STAGE, gettext_noop("Planned %(count)s sub-queries"), count=len(texts), data={"subqueries": texts}
    )
    return Outcome.CONTINUE


PLAN = Asking(
    "plan",
    CacheEntry.Kind.SEARCH_QUERIES,
    gettext_noop("The LLM could not plan (%(error)s); using keyword sub-queries instead."),
    max_tokens=LINE_TOKENS * (MAX_SUBQUERIES + 1),
)


def request_for(asked: str) -> str:
    """What the plan prompt is asked about a question (the status page's model check asks it too)."""
    return f'Запрос: "{asked}"\nЯзык подзапросов: {language_of(asked)}'


def read_plan(answer: str) -> list[str]:
    """The sub-queries of the LLM's answer ([] when it holds none)."""
    return parse_prefixed_lines(answer, PREFIX, limit=MAX_SUBQUERIES)


def _plan(ctx: RunContext) -> tuple[list[str], str]:
    request = request_for(ctx.asked) + image_context_block(ctx)
    texts = async_to_sync(PLAN.answer)(ctx, STAGE, request, read_plan)
    if texts:
        return texts, SubQuery.Origin.LLM
    if texts is not None:  # the LLM answered, without a sub-query
        ctx.warn(
            STAGE,
            gettext_noop("The LLM's plan had no ПОДЗАПРОС: lines; using keyword sub-queries instead."),
            args={},
        )
    return extractive.keyword_subqueries(ctx.question, limit=MAX_SUBQUERIES), SubQuery.Origin.FALLBACK


def _propose_outline(ctx: RunContext, texts: list[str]) -> None:
    """The report's sections proposed with the sub-queries, for a kind written section by section
    (research/pipeline/outline.py); an outline the user gave with the question is kept."""
    topic = ctx.topic
    if topic.outline or topic.report_kind not in outline.SECTIONED_KINDS:
        return
    topic.outline = outline.propose(topic.report_kind, ctx.question, texts)
    topic.save(update_fields=["outline", "updated_at"])
