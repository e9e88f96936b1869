"""Stage 6: every document read is summarised with prompts/summarise.txt.

The run loop's composition of reading and summarising (`read_and_summarise.py`, and the round's
front, `overlap.py`) hands each document here as soon as it is saved, so summaries are written
while other pages are still being read; `run` catches up on any document left without a summary
(a run that stopped in between).
"""

from __future__ import annotations

import asyncio

from asgiref.sync import async_to_sync
from django.utils.translation import gettext_noop

from mindsearch.clients.llm import Completion, LLMError
from research.models import CacheEntry, Document, Scores, Summary
from research.pipeline import extractive, passages, window
from research.pipeline.context import RunContext, db
from research.pipeline.prompting import Asking, ask_completion, data_block, load_prompt
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.SUMMARISE
# What the summariser sees of a long page: its passages most about the sub-query.
MAX_INPUT_CHARS = passages.SUMMARY_BUDGET


def run(ctx: RunContext) -> Outcome:
    documents = Document.objects.filter(topic=ctx.topic)
    # Domain data is not summarised: the report gets it whole, as pre-context (domain.py).
    pending = list(documents.filter(summary__isnull=True).exclude(fetched_via=Document.FetchedVia.DOMAIN))
    if not pending:
        return Outcome.CONTINUE
    total = documents.count()
    ctx.begin(STAGE, gettext_noop("Summarising %(count)s documents"), len(pending), total, count=len(pending))
    async_to_sync(_summarise_all)(ctx, pending, total)
    return Outcome.CONTINUE


async def _summarise_all(ctx: RunContext, pending: list[Document], total: int) -> None:
    await asyncio.gather(*(summarise_document(ctx, document, total) for document in pending))


async def summarise_document(ctx: RunContext, document: Document, total: int) -> None:
    text, origin = await _summary_of(ctx, document)
    done = await db(_save)(document, text, origin)
    await db(ctx.emit)(
        STAGE,
        gettext_noop("Summarised: %(document)s"),
        args={"document": document.title or document.url},
        done=done,
        total=total,
    )


def _save(document: Document, text: str, origin: str) -> int:
    Summary.objects.get_or_create(document=document, defaults={"text": text, "origin": origin})
    return Summary.objects.filter(document__topic_id=document.topic_id).count()


# The summary's token budget: a few sentences or points (a small model otherwise writes to any
# limit); less when the model's window is small (`window.answer_room`).
SUMMARY_TOKENS = 400
SUMMARY = Asking(
    "summarise",
    CacheEntry.Kind.SUMMARIES,
    gettext_noop("LLM summary failed (%(error)s); using an extractive summary."),
    max_tokens=SUMMARY_TOKENS,
)


async def _summary_of(ctx: RunContext, document: Document) -> tuple[str, str]:
    excerpt = await db(passages.document_excerpt)(document, ctx.question, MAX_INPUT_CHARS)
    private = document.fetched_via == Document.FetchedVia.PRIVATE
    text = await _asked(ctx, excerpt, private) if ctx.llm_enabled else ""
    if text:
        return text, Scores.Origin.LLM
    return extractive.extractive_summary(excerpt, ctx.question), Scores.Origin.FALLBACK


async def _asked(ctx: RunContext, excerpt: str, private: bool) -> str:
    """The model's summary of `excerpt`, fitted to its window (`window.ask_within`); "" when it
    failed (the warning says so, and the extractive summary stands in)."""
    prompt = load_prompt(SUMMARY.prompt)

    async def send(request: str, max_tokens: int | None) -> Completion:
        return await ask_completion(
            ctx, STAGE, prompt, request, kind=SUMMARY.kind, private=private, max_tokens=max_tokens
        )

    try:
        completion, _sent = await window.ask_within(
            ctx,
            STAGE,
            {1: excerpt},
            ctx.question,
            lambda texts: f"Текст для summary:\n{data_block(texts[1])}",
            send,
            fixed=prompt.text,
            answer_tokens=SUMMARY_TOKENS,
        )
    except LLMError as exc:
        await db(ctx.fell_back)(STAGE, SUMMARY.failed, exc)
        return ""
    return completion.text.strip()
