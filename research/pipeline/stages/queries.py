"""Stage 2: per sub-query, up to three search queries in Russian and three in English."""

from __future__ import annotations

import asyncio

from asgiref.sync import async_to_sync
from django.utils.translation import gettext_noop

from research.models import CacheEntry, SearchQuery, SubQuery, Topic
from research.pipeline import extractive, question_domain
from research.pipeline.context import RunContext, db
from research.pipeline.prompting import LINE_TOKENS, Asking
from research.pipeline.replies import parse_prefixed_lines, split_by_language
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.QUERIES
PER_LANGUAGE = 3


def run(ctx: RunContext) -> Outcome:
    pending = list(ctx.topic.subqueries.filter(search_queries__isnull=True).order_by("round", "position"))
    total = ctx.topic.subqueries.count()
    if not pending:
        return Outcome.CONTINUE
    ctx.begin(STAGE, gettext_noop("Writing search queries"), len(pending), total)
    async_to_sync(_write_all)(ctx, pending, total)
    return Outcome.CONTINUE


async def _write_all(ctx: RunContext, pending: list[SubQuery], total: int) -> None:
    done = total - len(pending)

    async def one(subquery: SubQuery) -> None:
        nonlocal done
        russian, english = await _queries_for(ctx, subquery)
        await db(_save)(subquery, russian, english)
        done += 1
        await db(ctx.emit)(
            STAGE,
            gettext_noop("%(russian)s + %(english)s queries for: %(subquery)s"),
            args={"russian": len(russian), "english": len(english), "subquery": subquery.text},
            done=done,
            total=total,
        )

    await asyncio.gather(*(one(subquery) for subquery in pending))


WRITE = Asking(
    "queries",
    CacheEntry.Kind.SEARCH_QUERIES,
    gettext_noop("The LLM could not write queries (%(error)s); using keywords instead."),
    max_tokens=LINE_TOKENS * (2 * PER_LANGUAGE + 1),
)


async def _queries_for(ctx: RunContext, subquery: SubQuery) -> tuple[list[str], list[str]]:
    russian, english = await WRITE.answer(
        ctx,
        STAGE,
        f'Тема: "{subquery.text}"',
        lambda text: split_by_language(parse_prefixed_lines(text, "ЗАПРОС:")),
        private=_from_private_text(ctx, subquery),
    ) or ([], [])
    fallback_ru, fallback_en = extractive.keyword_queries(subquery.text, limit=PER_LANGUAGE)
    # A language the LLM left out is filled from keywords, so both languages are always searched.
    russian, english = (russian or fallback_ru)[:PER_LANGUAGE], (english or fallback_en)[:PER_LANGUAGE]
    domain = ctx.topic.domain
    return question_domain.enhance_queries(russian, domain, "ru"), question_domain.enhance_queries(
        english, domain, "en"
    )


def _from_private_text(ctx: RunContext, subquery: SubQuery) -> bool:
    """A later round of a documents-only topic is planned from the owner's private passages
    (a topic that searches the web plans them from web pages alone), so its queries are cached
    for the owner."""
    return ctx.topic.sources == Topic.Sources.DOCS and subquery.round > 1


def _save(subquery: SubQuery, russian: list[str], english: list[str]) -> None:
    rows = [
        SearchQuery(subquery=subquery, language=language, position=i, text=text)
        for language, texts in ((SearchQuery.Language.RU, russian), (SearchQuery.Language.EN, english))
        for i, text in enumerate(texts)
    ]
    SearchQuery.objects.bulk_create(rows)
