"""Reading and summarising, overlapped: the run loop's composition of the read and summarise stages.

Summarising waits for the LLM and reading for the reader and the sites, so one need not wait
for the other: each document the read stage saves is handed to the summariser at once
(`read.read_pages`' `saved`), and the private passages a topic took as documents are summarised
while its web pages are read. The two stages do not know each other — read only reads and
saves `Document` rows, summarise only summarises — and the run loop calls this step in their
place, then the summarise stage, which catches up on any document left without a summary (a
run that stopped in between). `overlap.py` composes them the same way for the round's front.
"""

from __future__ import annotations

import asyncio

from asgiref.sync import async_to_sync

from research.models import Document
from research.pipeline.context import RunContext, db
from research.pipeline.stage import Outcome, StageName
from research.pipeline.stages import read, summarise

STAGE = StageName.READ
COMPOSES = (read, summarise)


def run(ctx: RunContext) -> Outcome:
    reading = read.plan(ctx)
    if reading.have < reading.wanted or reading.passages:
        async_to_sync(_read_and_summarise)(ctx, reading)
    return Outcome.CONTINUE


async def _read_and_summarise(ctx: RunContext, reading: read.Reading) -> None:
    private = Document.objects.filter(topic=ctx.topic, fetched_via=Document.FetchedVia.PRIVATE)
    total = reading.wanted + await db(private.count)()

    async def summarised(document: Document) -> None:
        await summarise.summarise_document(ctx, document, total)

    await asyncio.gather(
        read.read_pages(ctx, reading, summarised), *(summarised(document) for document in reading.passages)
    )
