"""The front of a round, overlapped per sub-query: its queries, its searches, its hits scored.

Run as three stages, the round waits for its slowest part twice: no search starts before the
last sub-query's queries are written, and no hit is scored before the last search (page 2
included) is back and every hit is saved. Under the search limit (one request a second at
60 a minute) that idles the LLM for the whole search and then the search engine for the whole
scoring. Here each sub-query goes on as soon as its own part is done: its searches are asked
when its queries are written, and its hits are scored when they are saved, while the searches
of the next sub-queries still wait for the limiter. The stages' own steps do the work
(`queries`, `search`, `score_hits`), so prompts, cache keys and rows are the same.

Hits are still saved in plan order, a sub-query's after those of the one before it (its page 2
included), so the sub-query that owns a URL several found is the same in every run, and a
repeated topic builds the same scoring batches and is answered from the cache. A run stopped
midway continues from its rows: sub-queries with queries are not asked again, searched queries
are not searched again, scored hits are not scored again.

Used for web topics without per-year searches, MCP sources or a reranker (those need every
sub-query's hits at once); the run loop runs the stages one after another for them, and after
this step the stages it covers find their work done.
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import async_to_sync
from django.db.models import F
from django.utils.translation import gettext_noop

from mindsearch import lifecycle
from mindsearch.clients import fetch, reader, websearch
from research.models import Document, Hit, SearchQuery, SubQuery, Topic
from research.pipeline import papers, read_and_summarise, rerank, scoring
from research.pipeline.context import Cancelled, RunContext, StageError, db
from research.pipeline.stage import Outcome, StageName
from research.pipeline.stages import queries, read, score_hits, search, summarise, years

STAGE = StageName.SEARCH
COVERS = (queries, search, years, score_hits, read_and_summarise)
CANCEL_POLL_SECONDS = 1.0


def applies(ctx: RunContext) -> bool:
    """Web topics whose search needs no view of every sub-query's hits at once."""
    topic = ctx.topic
    if topic.sources != Topic.Sources.WEB or not websearch.is_configured():
        return False
    if rerank.is_on() or years.years_asked(topic) or papers.wanted(topic):
        return False  # papers are searched beside the web by the search stage (research/pipeline/papers.py)
    return not search.asks_tool_sources()


def run(ctx: RunContext) -> Outcome:
    subqueries = list(ctx.topic.subqueries.order_by("round", "position", "id"))
    pending = [subquery for subquery in subqueries if _has_work(subquery)]
    failures = async_to_sync(_front)(ctx, pending)  # with nothing pending, the reading only
    searched = SearchQuery.objects.filter(subquery__topic=ctx.topic, searched_at__isnull=False)
    if failures and not searched.filter(result_count__gt=0).exists():
        raise StageError(gettext_noop("Web search failed: %(error)s"), {"error": failures[0]})
    return Outcome.CONTINUE


def _found_anything(ctx: RunContext) -> bool:
    return Hit.objects.filter(topic=ctx.topic).exists()


def _has_work(subquery: SubQuery) -> bool:
    asked = subquery.search_queries.all()
    if not asked.exists() or asked.filter(searched_at__isnull=True).exists():
        return True
    return Hit.objects.filter(subquery=subquery, score__isnull=True).exists()


class _Progress:
    """The counts the front's progress lines show, across its sub-queries."""

    def __init__(self, ctx: RunContext) -> None:
        topic = ctx.topic
        self.subqueries = topic.subqueries.count()
        self.written = topic.subqueries.filter(search_queries__isnull=False).distinct().count()
        asked = SearchQuery.objects.filter(subquery__topic=topic)
        self.queries = asked.count()
        self.searched = asked.filter(searched_at__isnull=False).count()
        hits = Hit.objects.filter(topic=topic)
        self.hits = hits.count()
        self.scored = hits.filter(score__isnull=False).count()
        self.search_started = False

    async def tell(
        self,
        ctx: RunContext,
        stage: StageName,
        message: str,
        args: dict[str, Any],
        *,
        warn: bool = False,
        data: dict[str, Any] | None = None,
    ) -> None:
        """A progress line of `stage`, counted as the stage counts its own: sub-queries with
        queries written, queries searched, hits scored."""
        done, total = {
            queries.STAGE: (self.written, self.subqueries),
            search.STAGE: (self.searched, self.queries),
            score_hits.STAGE: (self.scored, self.hits),
        }[stage]
        say = ctx.warn if warn else ctx.emit
        await db(say)(stage, message, args=args, done=done, total=total, data=data)


async def _front(ctx: RunContext, pending: list[SubQuery]) -> list[str]:
    # A stop cancels the front as a whole (and with it every sub-query's part), not only the calls
    # under way: a sub-query between two calls would otherwise go on saving after the stop.
    lifecycle.track_call()
    # The front is one step of the run loop, which checks for a Cancel only between steps: the
    # user's Cancel is watched for here, and cancels the front the same way.
    front = asyncio.current_task()
    by_user = asyncio.Event()
    watcher = asyncio.ensure_future(_watch_cancel(ctx, front, by_user))
    try:
        return await _front_parts(ctx, pending)
    except asyncio.CancelledError:
        if by_user.is_set():
            raise Cancelled from None
        raise
    finally:
        watcher.cancel()


async def _watch_cancel(ctx: RunContext, front: asyncio.Task | None, by_user: asyncio.Event) -> None:
    while front is not None:
        await asyncio.sleep(CANCEL_POLL_SECONDS)
        if await db(ctx.is_cancelled)():
            by_user.set()
            front.cancel()
            return


async def _front_parts(ctx: RunContext, pending: list[SubQuery]) -> list[str]:
    progress = await db(_Progress)(ctx)
    number = await db(read._current_round)(ctx)
    failures: list[str] = []
    if progress.written < progress.subqueries:
        await progress.tell(ctx, queries.STAGE, gettext_noop("Writing search queries"), {})
    saved: list[asyncio.Event] = [asyncio.Event() for _ in pending]
    unfinished = len(pending)
    summaries: list[asyncio.Task[None]] = []

    async def one(index: int, subquery: SubQuery) -> None:
        nonlocal unfinished
        try:
            asked = await _queries_of(ctx, subquery, progress)
            responses = await asyncio.gather(*(_search(ctx, query, progress, failures) for query in asked))
            if index:
                await saved[index - 1].wait()  # plan order: the sub-query before owns what both found
            await _save(ctx, asked, responses, progress)
        finally:
            saved[index].set()
        await _score(ctx, subquery, progress)
        unfinished -= 1
        if unfinished and subquery.round == number:
            # Its best page is read whatever the others' scores (`read._reading_order`): read now
            # and summarised while the other sub-queries are still searched.
            document = await _read_first(ctx, subquery, number)
            if document is not None:
                total = read.pages_per_subquery(ctx.topic) * progress.subqueries
                summaries.append(asyncio.ensure_future(summarise.summarise_document(ctx, document, total)))

    try:
        await asyncio.gather(*(one(index, subquery) for index, subquery in enumerate(pending)))
        if failures and not await db(_found_anything)(ctx):
            return failures  # the search failed: nothing to read
        await _read_rest(ctx)
    finally:
        await asyncio.gather(*summaries)
    return failures


async def _queries_of(ctx: RunContext, subquery: SubQuery, progress: _Progress) -> list[SearchQuery]:
    """The sub-query's search queries not yet searched (written first if it has none)."""
    if not await db(subquery.search_queries.exists)():
        russian, english = await queries._queries_for(ctx, subquery)
        await db(queries._save)(subquery, russian, english)
        progress.written += 1
        progress.queries += len(russian) + len(english)
        await progress.tell(
            ctx,
            queries.STAGE,
            gettext_noop("%(russian)s + %(english)s queries for: %(subquery)s"),
            {"russian": len(russian), "english": len(english), "subquery": subquery.text},
        )
    unsearched = subquery.search_queries.filter(searched_at__isnull=True).select_related("subquery")
    return await db(lambda: list(unsearched.order_by("language", "position")))()


async def _search(
    ctx: RunContext, query: SearchQuery, progress: _Progress, failures: list[str]
) -> dict | None:
    if not progress.search_started:
        progress.search_started = True
        await progress.tell(ctx, search.STAGE, gettext_noop("Searching the web"), {})
    try:
        response = await search._search_widening(ctx, query)
    except websearch.SearchError as exc:
        failures.append(str(exc))
        await progress.tell(
            ctx,
            search.STAGE,
            gettext_noop("Search failed for “%(query)s”: %(error)s"),
            {"query": query.text, "error": str(exc)},
            warn=True,
        )
        return None
    progress.searched += 1
    await progress.tell(
        ctx,
        search.STAGE,
        gettext_noop("%(count)s results for “%(query)s”"),
        {"count": len(response["results"]), "query": query.text},
    )
    return response


async def _save(
    ctx: RunContext, asked: list[SearchQuery], responses: list[dict | None], progress: _Progress
) -> None:
    """The sub-query's pages 1 in query order, then page 2 where page 1 brought few new hits
    (as the search stage decides it)."""
    thin: list[tuple[SearchQuery, dict]] = []
    for query, response in zip(asked, responses, strict=True):
        if response is not None:
            added = await db(search._save_hits)(ctx.topic, query, response)
            progress.hits += added
            if added < search.MIN_NEW_HITS and len(response["results"]) >= search.RESULTS_PER_QUERY:
                thin.append((query, response))
    if thin:
        before = await db(Hit.objects.filter(topic=ctx.topic).count)()
        await search._second_pages(ctx, thin)
        progress.hits += await db(Hit.objects.filter(topic=ctx.topic).count)() - before


async def _score(ctx: RunContext, subquery: SubQuery, progress: _Progress) -> None:
    """The sub-query's unscored hits, in the batches and order the scoring stage makes."""
    by_reranker = F("rerank_rank").asc(nulls_last=True)
    unscored = Hit.objects.filter(subquery=subquery, score__isnull=True).select_related("subquery")
    order = (by_reranker, "position", "normalized_url")
    hits = await db(lambda: list(unscored.order_by(*order)))()
    if not hits:
        return

    async def one(batch: list[Hit]) -> None:
        private = batch[0].source == Hit.Source.PRIVATE
        items = [score_hits._item(hit) for hit in batch]
        scores, origins = await scoring.score_batch(
            ctx, score_hits.STAGE, subquery.text, items, private=private
        )
        await db(score_hits._save)(batch, scores, origins)
        progress.scored += len(batch)
        await progress.tell(
            ctx,
            score_hits.STAGE,
            gettext_noop("Scored %(count)s hits"),
            {"count": len(batch)},
            data=score_hits._scored(batch, scores),
        )

    await asyncio.gather(*(one(batch) for batch in score_hits._batches(hits)))


async def _read_first(ctx: RunContext, subquery: SubQuery, number: int) -> Document | None:
    """The sub-query's best hit read (as the reading stage puts it first), unless it has a page."""

    def best() -> Hit | None:
        if Document.objects.filter(hit__subquery=subquery).exists():
            return None
        scored = Hit.objects.filter(subquery=subquery, source=Hit.Source.WEB, score__isnull=False)
        by_reranker = F("rerank_rank").asc(nulls_last=True)
        order = ("-score__total", by_reranker, "position", "normalized_url")
        return scored.select_related("subquery").order_by(*order).first()

    hit = await db(best)()
    if hit is None:
        return None
    try:
        page = await read.read_page(hit.url, user=ctx.owner_id, fresh_since=ctx.topic.web_fresh_since)
    except (reader.ReadError, fetch.FetchError) as exc:
        await db(ctx.warn)(
            read.STAGE,
            gettext_noop("Could not read %(url)s: %(error)s"),
            args={"url": hit.url, "error": str(exc)},
        )
        return None
    return await db(read._save)(ctx, hit, page, number)


async def _read_rest(ctx: RunContext) -> None:
    """The reading stage's choice across the topic, once every hit is scored (`read.plan`), each
    page summarised as soon as it is saved."""
    reading = await db(read.plan)(ctx)

    async def summarised(document: Document) -> None:
        await summarise.summarise_document(ctx, document, reading.wanted)

    await read.read_pages(ctx, reading, summarised)
