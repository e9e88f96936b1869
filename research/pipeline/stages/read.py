"""Stage 5: the best hits of the topic are read as Markdown, `TOP_K` pages per sub-query (more for
a report whose user asked for a long one: `pages_per_subquery`).

The reader goes first; when it fails, the page is fetched directly (SSRF-safe) and converted.
A page that cannot be read gives its place to the next-best hit. The private passages a topic
with documents took are saved as documents here too. This stage only reads and saves
`Document` rows: each one saved is handed to the caller's `saved` (`read_pages`), which is how
the run loop's composition (`read_and_summarise.py`) and the round's front (`overlap.py`) have
pages summarised while others are still being read; alone (`run`), it reads and nothing more.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from asgiref.sync import async_to_sync
from django.db.models import F, QuerySet
from django.utils.translation import gettext_noop

from mindsearch.clients import fetch, reader
from research.models import CacheEntry, Document, Hit, Topic
from research.pipeline import cache, outline, papers, private, sites
from research.pipeline.context import RunContext, db
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.READ
TOP_K = 5
# Candidates tried beyond the top K, for pages that cannot be read.
SPARE_CANDIDATES = 5
MAX_DOCUMENT_CHARS = 200_000
# A page that could not be read is not retried for a while: a repeated topic makes no calls,
# yet a site that was briefly down gets another chance tomorrow.
FAILURE_TTL = timedelta(days=1)
# A subscription notice in place of the article: the reader and a direct fetch both get the
# teaser a paywall shows. Such a page gives its place to the next-best hit. Only short pages
# are judged, so an article that mentions subscriptions is kept.
PAYWALL_MAX_CHARS = 2500
PAYWALL = re.compile(
    r"subscribe to (?:continue|read|keep reading)|subscribers only|for subscribers|already a subscriber"
    r"|purchase (?:access|this article)|sign in to (?:read|continue)|log in to (?:read|continue)"
    r"|оформите подписку|только (?:для )?подписчик|доступно подписчикам"
    r"|чтобы (?:продолжить|читать) (?:чтение|дальше)"
    r"|купите (?:доступ|подписку)",
    re.IGNORECASE,
)


# What is done with each document as soon as it is saved (the composition's summariser).
Saved = Callable[[Document], Awaitable[None]]


@dataclass(frozen=True)
class Reading:
    """What the stage reads: the web pages in order, until the topic has `wanted` of them."""

    passages: list[Document]  # the private passages taken as documents, not yet summarised
    queue: list[Hit]
    wanted: int
    have: int
    number: int  # the round being read


def run(ctx: RunContext) -> Outcome:
    """Read and save, nothing more (the summarise stage then summarises what was read)."""
    reading = plan(ctx)
    if reading.have < reading.wanted:
        async_to_sync(read_pages)(ctx, reading, None)
    return Outcome.CONTINUE


def plan(ctx: RunContext) -> Reading:
    """Take the private passages as documents, and choose the web pages to read."""
    passages = private.read_documents(ctx, STAGE)
    number = _current_round(ctx)
    pool = _candidates(ctx)
    searched = {hit.subquery_id for hit in pool}
    wanted = min(pages_per_subquery(ctx.topic) * len(searched), len(pool))
    have = _web_documents(ctx).count()
    queue = _reading_order(pool, number, attempts=wanted - have + SPARE_CANDIDATES * len(searched))
    return Reading(passages, queue, wanted, have, number)


async def read_pages(ctx: RunContext, reading: Reading, saved: Saved | None) -> None:
    """Read the chosen pages; each document saved goes to `saved` while the next are read."""
    if reading.have >= reading.wanted:
        return
    await db(ctx.emit)(
        STAGE,
        gettext_noop("Reading the best %(count)s pages"),
        args={"count": reading.wanted},
        done=reading.have,
        total=reading.wanted,
    )
    await _read_best(ctx, reading, saved)


def pages_per_subquery(topic: Topic) -> int:
    """The pages read per sub-query: `TOP_K`, more for a report whose user asked for a long one
    (its sections are given more sources: `outline.Scale.pool`), so that the more it says comes
    from more pages rather than from the same pages' lesser sentences."""
    if not topic.outline:
        return TOP_K
    return round(
        TOP_K * outline.scale_of(outline.effective_length(topic.report_kind, topic.report_length)).pool
    )


def _current_round(ctx: RunContext) -> int:
    return max((sq.round for sq in ctx.topic.subqueries.all()), default=1)


def _web_documents(ctx: RunContext) -> QuerySet[Document]:
    return Document.objects.filter(topic=ctx.topic, hit__source=Hit.Source.WEB)


def _candidates(ctx: RunContext) -> list[Hit]:
    """Every scored web hit of the topic, of every round, best first."""
    hits = Hit.objects.filter(topic=ctx.topic, source=Hit.Source.WEB, score__isnull=False)
    # Equal scores (sums of five small integers, so common) go by the reranker's order, if any.
    by_reranker = F("rerank_rank").asc(nulls_last=True)
    ordered = list(
        hits.select_related("document", "subquery", "score").order_by(
            "-score__total", by_reranker, "position", "normalized_url"
        )
    )
    rules = sites.Rules.of(ctx.topic)
    if rules.prefer:  # a preferred site's page goes ahead of equals (a stable sort keeps the rest)
        ordered.sort(key=lambda hit: -(hit.score.total + sites.PREFERRED_BONUS * rules.preferred(hit.url)))
    return ordered


def _reading_order(pool: list[Hit], number: int, *, attempts: int) -> list[Hit]:
    """The unread hits to try, in order, at most `attempts` of them.

    Reading is chosen across the whole topic, not per sub-query: the budget (`TOP_K` pages per
    sub-query that found anything) goes to the best pages wherever they were found, so a
    sub-query with eight good pages is not cut at five while another's fifth page is noise, and a
    later round of deep mode reads the relevant pages earlier rounds found but had no place for.
    Only each sub-query of the round being read that has no page yet goes first with its best
    hit, so every direction has something to be followed from.
    """
    unread = [hit for hit in pool if not _has_document(hit)]
    covered = {hit.subquery_id for hit in pool if _has_document(hit)}
    first: list[Hit] = []
    for hit in unread:
        if hit.subquery.round == number and hit.subquery_id not in covered:
            covered.add(hit.subquery_id)
            first.append(hit)
    leading = {hit.pk for hit in first}
    rest = [hit for hit in unread if hit.pk not in leading]
    return (first + rest)[: max(attempts, 0)]


async def _read_best(ctx: RunContext, reading: Reading, saved: Saved | None) -> None:
    """Read the queue in order, a wave at a time, until the topic has `wanted` web documents; a
    page that cannot be read gives its place to the next in the queue."""
    have, wanted, queue = reading.have, reading.wanted, reading.queue
    while have < wanted and queue:
        wave, queue = queue[: wanted - have], queue[wanted - have :]
        results = await asyncio.gather(*(_read_hit(ctx, hit, reading.number, saved) for hit in wave))
        have += sum(results)
        await db(ctx.emit)(
            STAGE,
            gettext_noop("Reading the best %(count)s pages"),
            args={"count": wanted},
            done=have,
            total=wanted,
        )


def _has_document(hit: Hit) -> bool:
    try:
        return hit.document is not None
    except Document.DoesNotExist:
        return False


async def _read_hit(ctx: RunContext, hit: Hit, number: int, saved: Saved | None) -> int:
    fresh_since = ctx.topic.web_fresh_since
    try:
        if papers.is_paper_hit(hit):  # its PDF through the document reader, or its abstract
            page = await papers.read(
                hit,
                user=ctx.owner_id,
                read_page=lambda url, user: read_page(url, user=user, fresh_since=fresh_since),
            )
        else:
            page = await read_page(hit.url, user=ctx.owner_id, fresh_since=fresh_since)
    except (reader.ReadError, fetch.FetchError) as exc:
        await db(ctx.warn)(
            STAGE, gettext_noop("Could not read %(url)s: %(error)s"), args={"url": hit.url, "error": str(exc)}
        )
        return 0
    document = await db(_save)(ctx, hit, page, number)
    if saved is not None:
        await saved(document)
    return 1


async def read_page(
    url: str, *, user: int | None = None, fresh_since: datetime | None = None
) -> dict[str, str]:
    """The page as Markdown (cached for everyone: public web data), via the reader or directly;
    a copy older than `fresh_since` is read again."""
    key = cache.make_key("page", url)
    cached = await db(cache.get)(CacheEntry.Kind.DOCS, key, newer_than=fresh_since)
    if cached is not None and "error" in cached:
        raise fetch.FetchError(cached["error"])
    if cached is not None:
        return cached
    try:
        page = await _reader_then_direct(url, user)
        if paywalled(page.markdown):
            raise fetch.FetchError("only a subscription notice could be read (paywall)")
    except fetch.FetchError as exc:
        await db(cache.put)(CacheEntry.Kind.DOCS, key, {"error": str(exc)}, description=url, ttl=FAILURE_TTL)
        raise
    payload = {
        "url": page.url,
        "title": page.title,
        "markdown": page.markdown[:MAX_DOCUMENT_CHARS],
        "via": page.via,
    }
    await db(cache.put)(CacheEntry.Kind.DOCS, key, payload, description=url)
    return payload


def paywalled(markdown: str) -> bool:
    text = (markdown or "").strip()
    return len(text) <= PAYWALL_MAX_CHARS and PAYWALL.search(text) is not None


async def _reader_then_direct(url: str, user: int | None) -> fetch.Page:
    try:
        return await reader.read(url, user=user)
    except fetch.UnsafeURL:
        raise
    except reader.ReadError as exc:
        try:
            return await fetch.fetch_page(url)
        except fetch.FetchError as direct:
            raise fetch.FetchError(f"reader: {exc}; direct: {direct}") from direct


def _save(ctx: RunContext, hit: Hit, page: dict[str, str], number: int) -> Document:
    """The page as a document of the round that read it (a page an earlier round found but had no
    place for is new in this one)."""
    document, _ = Document.objects.get_or_create(
        hit=hit,
        defaults={
            "topic": ctx.topic,
            "title": page["title"] or hit.title,
            "url": hit.url,
            "text": page["markdown"],
            "fetched_via": page["via"],
            "round": number,
        },
    )
    return document
