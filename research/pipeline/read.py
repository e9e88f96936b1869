"""Stage 5: the best hits of each sub-query are read as Markdown.

The reader goes first; when it fails, the page is fetched directly (SSRF-safe) and converted.
A page that cannot be read at all gives its place to the next-best hit. Each document read goes
straight on to be summarised, so reading and summarising overlap.
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

from asgiref.sync import async_to_sync
from django.db.models import QuerySet
from django.utils.translation import gettext_noop

from mindsearch.clients import fetch, reader
from research.models import CacheEntry, Document, Hit, SubQuery
from research.pipeline import cache, private, summarise
from research.pipeline.context import RunContext, db

STAGE = "read"
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


def run(ctx: RunContext) -> None:
    passages = private.read_documents(ctx, STAGE)
    subqueries = list(ctx.topic.subqueries.all())
    plan = {sq.pk: _candidates(sq) for sq in subqueries}
    wanted = sum(min(TOP_K, len(candidates)) for candidates in plan.values())
    have = _web_documents(ctx).count()
    if have >= wanted and not passages:
        return
    if have < wanted:
        ctx.emit(
            STAGE,
            gettext_noop("Reading the best %(count)s pages"),
            args={"count": wanted},
            done=have,
            total=wanted,
        )
    async_to_sync(_read_all)(ctx, plan, wanted, passages)


def _web_documents(ctx: RunContext) -> QuerySet[Document]:
    return Document.objects.filter(topic=ctx.topic, hit__source=Hit.Source.WEB)


def _candidates(subquery: SubQuery) -> list[Hit]:
    """Web hits of a sub-query, best first: the top K and a few spares."""
    hits = Hit.objects.filter(subquery=subquery, source=Hit.Source.WEB, score__isnull=False)
    ordered = hits.select_related("document").order_by("-score__total", "position", "normalized_url")
    return list(ordered[: TOP_K + SPARE_CANDIDATES])


async def _read_all(
    ctx: RunContext, plan: dict[int, list[Hit]], wanted: int, passages: list[Document]
) -> None:
    """Read the web pages while the documents made of private passages are being summarised."""
    counter = {"done": await db(_web_documents(ctx).count)()}
    private_documents = Document.objects.filter(topic=ctx.topic, fetched_via=Document.FetchedVia.PRIVATE)
    summaries = wanted + await db(private_documents.count)()
    await asyncio.gather(
        *(_read_subquery(ctx, candidates, counter, wanted, summaries) for candidates in plan.values()),
        *(summarise.summarise_document(ctx, document, summaries) for document in passages),
    )


async def _read_subquery(
    ctx: RunContext, candidates: list[Hit], counter: dict[str, int], wanted: int, summaries: int
) -> None:
    """Read candidates in order, a wave at a time, until K documents exist for the sub-query."""
    have = sum(1 for hit in candidates if _has_document(hit))
    queue = [hit for hit in candidates if not _has_document(hit)]
    while have < TOP_K and queue:
        wave, queue = queue[: TOP_K - have], queue[TOP_K - have :]
        results = await asyncio.gather(*(_read_hit(ctx, hit, summaries) for hit in wave))
        for ok in results:
            have += ok
            counter["done"] += ok
        await db(ctx.emit)(
            STAGE,
            gettext_noop("Read %(count)s pages for one sub-query"),
            args={"count": have},
            done=counter["done"],
            total=wanted,
        )


def _has_document(hit: Hit) -> bool:
    try:
        return hit.document is not None
    except Document.DoesNotExist:
        return False


async def _read_hit(ctx: RunContext, hit: Hit, summaries: int) -> int:
    try:
        page = await read_page(hit.url, user=ctx.owner_id)
    except (reader.ReadError, fetch.FetchError) as exc:
        await db(ctx.warn)(
            STAGE, gettext_noop("Could not read %(url)s: %(error)s"), args={"url": hit.url, "error": str(exc)}
        )
        return 0
    document = await db(_save)(ctx, hit, page)
    await summarise.summarise_document(ctx, document, summaries)
    return 1


async def read_page(url: str, *, user: int | None = None) -> dict[str, str]:
    """The page as Markdown (cached for everyone: public web data), via the reader or directly."""
    key = cache.make_key("page", url)
    cached = await db(cache.get)(CacheEntry.Kind.DOCS, key)
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


def _save(ctx: RunContext, hit: Hit, page: dict[str, str]) -> Document:
    document, _ = Document.objects.get_or_create(
        hit=hit,
        defaults={
            "topic": ctx.topic,
            "title": page["title"] or hit.title,
            "url": hit.url,
            "text": page["markdown"],
            "fetched_via": page["via"],
            "round": hit.subquery.round,
        },
    )
    return document
