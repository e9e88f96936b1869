"""Stage 3: the search. The owner's documents first, for every sub-query that has no passages from
them yet (`private.search_documents`; a web-only topic skips them, a documents-only topic has
nothing else to search); then every search query goes to SearXNG, and to the MCP sources an admin
registered; web hits are de-duplicated by normalised URL.

How real SearXNG instances behave, and what this stage does about it:

- With `time_range` set, SearXNG silently skips every engine that does not support time
  ranges; on many instances that is all of them, and the answer is empty, on others all but one
  or two, and the answer is thin. A time-filtered answer that is empty, or short of a full page
  (`RESULTS_PER_QUERY`) while `/config` lists engines the filter skips, is asked again without
  the filter: the period stays in the query words, dated results outside
  it are dropped (undated ones are kept), and they follow the filtered ones; the event log says
  so.
- An answer with no results and engines in `unresponsive_engines` (suspended after errors or a
  CAPTCHA, timed out) is an outage, not "nothing found": the client retries it with backoff and
  then it is a failure, never cached. An answer with results but some engines unresponsive is
  cached for `PARTIAL_TTL` only, so a later run gets the full set.
- A query whose first page brings fewer than `MIN_NEW_HITS` new usable hits asks for page 2.
- A page of SearXNG's answer is every engine's page merged: ten results from each, twenty to
  forty in all, ordered by how many engines found each and how high. All of it is kept (up to
  `MAX_RESULTS_PER_PAGE`): what only one engine found sits below the tenth place however high
  that engine ranked it, and is often exactly the page no other index holds; cutting the answer
  at ten and then asking for page 2 would throw it away and never see it again. Without an LLM
  the first ten are used: the keyword fallback ranks hits by shared words, and the look-alike
  pages below the tenth place share as many words as the rare ones, so they crowd the sources
  (the evidence benchmark's no-LLM mode: two noise facts, fewer relevant pages read).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from datetime import date, timedelta

from asgiref.sync import async_to_sync
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_noop

from mcphub import sources as tool_sources
from mindsearch.clients import websearch
from research.models import CacheEntry, Hit, SearchQuery, Topic
from research.pipeline import cache, papers, private, question_domain, sites
from research.pipeline.context import RunContext, StageError, db
from research.pipeline.links import normalize_url
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.SEARCH
RESULTS_PER_QUERY = 10  # a full page of one engine
# What one answer page may bring at most (a sanity bound: an instance with many engines).
MAX_RESULTS_PER_PAGE = 40
MIN_NEW_HITS = 5
# A time-filtered answer with fewer results than this (a full page) is widened when the filter
# skips engines (see `_search_widening`).
THIN_RESULTS = RESULTS_PER_QUERY
PARTIAL_TTL = timedelta(hours=1)


def asks_tool_sources() -> bool:
    """Whether this stage also asks MCP sources (one is enabled)."""
    return tool_sources.any_enabled()


def run(ctx: RunContext) -> Outcome:
    """The owner's documents' passages, then the web's hits (SearXNG's and the MCP sources'); the
    documents' hits decide whether a failed web search is fatal."""
    private.search_documents(ctx, STAGE)
    if ctx.topic.sources == Topic.Sources.DOCS:
        return Outcome.CONTINUE
    # Scholarly indexes (research/pipeline/papers.py): their works are saved as web hits too.
    from_papers = papers.search(ctx, STAGE, _save_hit)
    if ctx.topic.sources == Topic.Sources.PAPERS:
        return Outcome.CONTINUE
    # The search tools of MCP servers an admin registered (mcphub/sources.py): their results
    # are saved as web hits here, then scored, read and cited like SearXNG's.
    from_tools = tool_sources.search(ctx, STAGE, _save_hit)
    queries = SearchQuery.objects.filter(subquery__topic=ctx.topic)
    pending = list(
        queries.filter(searched_at__isnull=True)
        .select_related("subquery")
        .order_by("subquery__round", "subquery__position", "language", "position")
    )
    if not pending:
        return Outcome.CONTINUE
    if not websearch.is_configured():
        if from_papers and not from_tools:
            ctx.warn(
                STAGE,
                gettext_noop("Web search is not configured (SEARXNG_URL); using the papers found."),
                args={},
            )
            return Outcome.CONTINUE
        if from_tools:
            ctx.warn(
                STAGE,
                gettext_noop("Web search is not configured (SEARXNG_URL); using the MCP sources' results."),
                args={},
            )
            return Outcome.CONTINUE
        _without_search_engine(ctx)
        return Outcome.CONTINUE
    total = queries.count()
    ctx.begin(STAGE, gettext_noop("Searching the web"), len(pending), total)
    failures = async_to_sync(_search_all)(ctx, pending, total)
    searched = queries.filter(searched_at__isnull=False, result_count__gt=0).exists()
    if failures and not searched and not from_tools and not from_papers:
        if not _has_private_hits(ctx):
            raise StageError(gettext_noop("Web search failed: %(error)s"), {"error": failures[0]})
        ctx.warn(
            STAGE,
            gettext_noop("Web search failed (%(error)s); using your documents only."),
            args={"error": failures[0]},
        )
    return Outcome.CONTINUE


def _without_search_engine(ctx: RunContext) -> None:
    if not _has_private_hits(ctx):
        raise StageError(
            gettext_noop("Web search is not configured: set SEARXNG_URL (see the status page)."), {}
        )
    ctx.warn(
        STAGE, gettext_noop("Web search is not configured (SEARXNG_URL); using your documents only."), args={}
    )


def _has_private_hits(ctx: RunContext) -> bool:
    return Hit.objects.filter(topic=ctx.topic, source=Hit.Source.PRIVATE).exists()


async def _search_all(ctx: RunContext, pending: list[SearchQuery], total: int) -> list[str]:
    """Search concurrently; save hits afterwards in plan order; then page 2 where page 1 gave
    too few new hits.

    Saving in a fixed order decides deterministically which sub-query owns a URL that several
    found, so a repeated topic builds the same batches and is served from the cache. Each
    response is cached as it arrives, so a run killed midway repeats no search.
    """
    done = total - len(pending)
    failures: list[str] = []

    async def one(query: SearchQuery) -> dict | None:
        nonlocal done
        try:
            response = await _search_widening(ctx, query)
        except websearch.SearchError as exc:
            failures.append(str(exc))
            await db(ctx.warn)(
                STAGE,
                gettext_noop("Search failed for “%(query)s”: %(error)s"),
                args={"query": query.text, "error": str(exc)},
                done=done,
                total=total,
            )
            return None
        done += 1
        await db(ctx.emit)(
            STAGE,
            gettext_noop("%(count)s results for “%(query)s”"),
            args={"count": len(response["results"]), "query": query.text},
            done=done,
            total=total,
        )
        return response

    responses = await asyncio.gather(*(one(query) for query in pending))
    thin: list[tuple[SearchQuery, dict]] = []
    for query, response in zip(pending, responses, strict=True):
        if response is not None:
            added = await db(_save_hits)(ctx.topic, query, response)
            if added < MIN_NEW_HITS and len(response["results"]) >= RESULTS_PER_QUERY:
                thin.append((query, response))
    if thin:
        await _second_pages(ctx, thin)
    return failures


async def _second_pages(ctx: RunContext, thin: list[tuple[SearchQuery, dict]]) -> None:
    """Page 2 of each query whose first page was full but brought few new hits; a failure here
    costs only the extra hits."""

    async def one(query: SearchQuery, first: dict) -> dict | None:
        try:
            return await _search(ctx, query, time_range=first["time_range"], pageno=2)
        except websearch.SearchError:
            return None

    pages = await asyncio.gather(*(one(query, first) for query, first in thin))
    for (query, first), page in zip(thin, pages, strict=True):
        if page is not None:
            page = _within_period(ctx.topic, page) if first.get("widened") else page
            await db(_save_hits)(ctx.topic, query, page, offset=len(first["results"]))


async def _search_widening(ctx: RunContext, query: SearchQuery) -> dict:
    """The query with the topic's time range; asked again without it when that finds nothing, or
    less than a full page (`THIN_RESULTS`) while the instance's `/config` shows engines the
    filter skips.

    Real instances skip every engine without time-range support, so a filtered answer is often
    not empty but thin: the two or three results of the one engine that supports it. Nor is
    five or eight enough: a filtered answer short of a page means the engines that filter have
    run out of what they know of the period, and the recent pages only the skipped engines index
    (often most of them: Bing, Mojeek, Wikipedia, Semantic Scholar on many instances) are not
    among them at all. The unfiltered answer's results not dated outside the period are added
    after them. A thin answer from engines that all support the filter is the answer (the web has
    little on it then); a full page is enough (page 2 follows where it brought little new).
    """
    time_range = ctx.topic.time_range
    response = await _search(ctx, query, time_range=time_range)
    found = response["results"]
    if not time_range or len(found) >= THIN_RESULTS:
        return response
    if found and not await websearch.time_filter_hides_engines(
        question_domain.categories_for(ctx.topic.domain, ctx.question, time_range)
    ):
        return response  # every engine asked supports the filter (or that is unknown): it is the answer
    wide = _within_period(ctx.topic, await _search(ctx, query, time_range=""))
    if not found:
        await db(ctx.emit)(
            STAGE,
            gettext_noop(
                "Nothing for “%(query)s” with the time filter (the search engines may not support it); "
                "searched without it and kept %(count)s results not dated outside the period"
            ),
            args={"query": query.text, "count": len(wide["results"])},
        )
        return {**wide, "widened": True}
    have = {normalize_url(result["url"]) for result in found}
    added = [result for result in wide["results"] if normalize_url(result["url"]) not in have]
    await db(ctx.emit)(
        STAGE,
        gettext_noop(
            "Only %(found)s results for “%(query)s” with the time filter (the search engines may not "
            "support it); searched without it too and added %(count)s results not dated outside the period"
        ),
        args={"query": query.text, "found": len(found), "count": len(added)},
    )
    engines_down = response["unresponsive_engines"] + [
        engine for engine in wide["unresponsive_engines"] if engine not in response["unresponsive_engines"]
    ]
    return {**wide, "results": found + added, "unresponsive_engines": engines_down, "widened": True}


def _within_period(topic: Topic, response: dict) -> dict:
    """Results dated outside the topic's period dropped; undated ones kept."""
    start, end = topic.period_start, topic.period_end
    kept = [r for r in response["results"] if _in_period(r.get("published_at"), start, end)]
    return {**response, "results": kept}


def _in_period(published_at: str | None, start: date | None, end: date | None) -> bool:
    published = parse_datetime(published_at) if published_at else None
    if published is None:
        return True
    day = published.date()
    return (start is None or day >= start) and (end is None or day <= end)


async def _search(ctx: RunContext, query: SearchQuery, *, time_range: str, pageno: int = 1) -> dict:
    categories = question_domain.categories_for(ctx.topic.domain, ctx.question, ctx.topic.time_range)
    text = " ".join(filter(None, (query.text, sites.Rules.of(ctx.topic).operators())))
    parts = ("search", text, query.language, time_range, pageno)
    # The default category adds nothing to the key, so earlier entries stay valid.
    key = cache.make_key(*parts, categories) if categories else cache.make_key(*parts)
    kept = MAX_RESULTS_PER_PAGE if ctx.llm_enabled else RESULTS_PER_QUERY
    cached = await db(cache.get)(CacheEntry.Kind.SEARCH_RESULTS, key, newer_than=ctx.topic.web_fresh_since)
    if cached is not None:
        return {**cached, "results": cached["results"][:kept], "time_range": time_range}
    response = await websearch.search(
        text,
        language=query.language,
        time_range=time_range,
        pageno=pageno,
        categories=categories,
        user=ctx.owner_id,
    )
    results = [_as_payload(result) for result in response.results[:MAX_RESULTS_PER_PAGE]]
    payload = {"results": results, "unresponsive_engines": response.unresponsive_engines}
    # Some engines missing: a later run should get the full set, so keep this one briefly.
    ttl = PARTIAL_TTL if response.unresponsive_engines else None
    await db(cache.put)(CacheEntry.Kind.SEARCH_RESULTS, key, payload, description=query.text, ttl=ttl)
    return {**payload, "results": results[:kept], "time_range": time_range}


def _as_payload(result: websearch.SearchResult) -> dict:
    payload = asdict(result)
    payload["published_at"] = result.published_at.isoformat() if result.published_at else None
    return payload


def _save_hits(topic: Topic, query: SearchQuery, response: dict, *, offset: int = 0) -> int:
    """Save a page of results; the number of hits new to the topic.

    In three statements, not three or four per result: which of its URLs the topic has, the new
    ones in one insert (one another query saved at the same moment is skipped, as `_save_hit`
    skips it), and how many of them are this query's."""
    rules = sites.Rules.of(topic)
    dropped = [
        {"url": r["url"][:2000], "title": r["title"][:300], "reason": rules.verdict(r["url"])}
        for r in response["results"]
        if rules.verdict(r["url"])
    ]
    results = [
        (position, result, normalize_url(result["url"])[:2000])
        for position, result in enumerate(response["results"], start=offset)
        if not rules.verdict(result["url"])
    ]
    known = set(
        Hit.objects.filter(topic=topic, normalized_url__in=[url for _, _, url in results]).values_list(
            "normalized_url", flat=True
        )
    )
    rows = []
    for position, result, normalized in results:
        if normalized in known:
            continue
        known.add(normalized)
        rows.append(_hit(topic, query, position, result, normalized))
    added = 0
    if rows:
        Hit.objects.bulk_create(rows, ignore_conflicts=True)
        mine = [row.normalized_url for row in rows]
        added = Hit.objects.filter(topic=topic, search_query=query, normalized_url__in=mine).count()
    query.result_count = offset + len(response["results"])
    if not offset or response["unresponsive_engines"]:
        query.unresponsive_engines = response["unresponsive_engines"]
    query.searched_at = timezone.now()
    query.dropped = (query.dropped if offset else []) + dropped
    query.save(update_fields=["result_count", "unresponsive_engines", "searched_at", "dropped"])
    return added


def _save_hit(topic: Topic, query: SearchQuery, position: int, result: dict) -> int:
    if sites.Rules.of(topic).verdict(result["url"]):  # an MCP source's result on a site ruled out
        return 0
    normalized = normalize_url(result["url"])
    if Hit.objects.filter(topic=topic, normalized_url=normalized).exists():
        return 0
    try:
        with transaction.atomic():
            _hit(topic, query, position, result, normalized[:2000]).save(force_insert=True)
    except IntegrityError:  # found by another query of this topic at the same moment
        return 0
    return 1


def _hit(topic: Topic, query: SearchQuery, position: int, result: dict, normalized: str) -> Hit:
    return Hit(
        topic=topic,
        subquery=query.subquery,
        search_query=query,
        url=result["url"][:2000],
        normalized_url=normalized,
        title=result["title"],
        snippet=result["snippet"],
        engine=result["engine"],
        position=position,
        published_at=parse_datetime(result["published_at"]) if result.get("published_at") else None,
        paper=result.get("paper") or {},
    )
