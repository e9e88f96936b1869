"""MCP tool servers as sources: the search stage asks each enabled `McpSource`'s search tool
every search query of the topic; the results are saved as web hits (research/pipeline/stages/search.py
passes its own `_save_hit`), then scored, read and cited like SearXNG's.

The contract a tool must meet (docs/API.md, "MCP"):

- input: an object with a `query` string property, and no other required property; MindSearch
  sends `{"query": "<search query>"}`;
- output: a list of results, or an object whose `results` is that list, as the call's
  structured content or as JSON in its first text content; each result an object with `url`
  (http or https) and `title`, optionally `snippet` (or `content`, `description`) and
  `published_at` (ISO 8601). Results without a usable URL are skipped; a tool error or output
  in another shape is a failure of that source, said in the event log, and the topic goes on.

The server is asked through mindsearch/clients/mcp.py: every request waits for the source's
own global rate limit (mindsearch/clients/ratelimit.py, per user as everywhere). Each answer is
cached (kind "search results", keyed by the server, the tool, its headers' hash and the query),
so a topic run again asks nobody.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_noop

from mcphub.models import ENGINE_PREFIX, McpSource
from mindsearch import lifecycle
from mindsearch.clients import mcp
from research.models import CacheEntry, Hit, SearchQuery
from research.pipeline import cache
from research.pipeline.context import RunContext, db

log = logging.getLogger(__name__)

SNIPPET_KEYS = ("snippet", "content", "description")
MAX_TITLE = 1000
MAX_SNIPPET = 2000

SaveHit = Callable[[Any, SearchQuery, int, dict[str, Any]], int]


class SourceError(Exception):
    """The source could not be asked, or its tool does not meet the contract; the message is
    for the event log (never the headers)."""


# --- The contract -----------------------------------------------------------------------------------


def is_search_tool(input_schema: dict[str, Any]) -> bool:
    """A tool MindSearch can call with nothing but a query string."""
    properties = input_schema.get("properties") or {}
    query = properties.get("query")
    if not isinstance(query, dict) or query.get("type") != "string":
        return False
    return set(input_schema.get("required") or []) <= {"query"}


def pick_tool(tools: list[Any], wanted: str) -> str:
    """The name of the tool to call: `wanted` if it meets the contract, else (when no name was
    set) the first tool that does."""
    for tool in tools:
        if wanted and tool.name != wanted:
            continue
        if is_search_tool(tool.input_schema or {}):
            return tool.name
        if wanted:
            raise SourceError(f"tool {wanted!r} does not take a 'query' string (or requires more)")
    if wanted:
        raise SourceError(f"the server has no tool named {wanted!r}")
    raise SourceError("the server has no tool that takes a 'query' string")


def results_of(call: Any, limit: int) -> list[dict[str, Any]]:
    """The results of one tool call, as the search stage saves them (url, title, snippet,
    published_at); SourceError when the call failed or its output is in another shape."""
    texts = [block.text for block in call.content if getattr(block, "type", "") == "text"]
    if call.is_error:
        raise SourceError(f"the tool answered with an error: {(texts[0] if texts else '')[:300]}")
    data: Any = call.structured_content
    if data is None:
        if not texts:
            raise SourceError("the tool's answer has neither structured content nor text")
        try:
            data = json.loads(texts[0])
        except ValueError:
            raise SourceError("the tool's answer is not JSON") from None
    if isinstance(data, dict):
        data = data.get("results")
    if not isinstance(data, list):
        raise SourceError("the tool's answer is not a list of results (nor an object with 'results')")
    found = []
    for item in data:
        result = _result(item)
        if result is not None:
            found.append(result)
        if len(found) >= limit:
            break
    return found


def _result(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return None
    url, title = item.get("url"), item.get("title")
    if not isinstance(url, str) or not isinstance(title, str) or "\x00" in url + title:
        return None
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or len(url) > 2000:
        return None
    snippet = next((item[key] for key in SNIPPET_KEYS if isinstance(item.get(key), str)), "")
    published = item.get("published_at")
    published_at = parse_datetime(published) if isinstance(published, str) else None
    return {
        "url": url.strip(),
        "title": title.strip()[:MAX_TITLE],
        "snippet": snippet.replace("\x00", "").strip()[:MAX_SNIPPET],
        "published_at": published_at.isoformat() if published_at else None,
    }


# --- Asking the sources -----------------------------------------------------------------------------


def any_enabled() -> bool:
    return McpSource.objects.filter(enabled=True).exists()


def search(ctx: RunContext, stage: str, save_hit: SaveHit) -> bool:
    """Ask every enabled source for every search query of the topic (saving new hits with
    `save_hit`); whether the topic has hits from MCP sources, of this run or an earlier one."""
    sources = list(McpSource.objects.filter(enabled=True))
    if sources:
        _search(ctx, stage, save_hit, sources)
    return Hit.objects.filter(topic=ctx.topic, engine__startswith=ENGINE_PREFIX).exists()


def _search(ctx: RunContext, stage: str, save_hit: SaveHit, sources: list[McpSource]) -> int:
    queries = list(
        SearchQuery.objects.filter(subquery__topic=ctx.topic)
        .select_related("subquery")
        .order_by("subquery__round", "subquery__position", "language", "position")
    )
    if not queries:
        return 0
    answers = async_to_sync(_ask_all)(ctx, stage, sources, queries)
    added = 0
    # Saved in a fixed order (source by name, then plan order), as the web search saves its own.
    for source, per_query in zip(sources, answers, strict=True):
        for query, results in zip(queries, per_query, strict=True):
            for position, result in enumerate(results or []):
                added += save_hit(ctx.topic, query, position, {**result, "engine": source.engine})
    return added


async def _ask_all(
    ctx: RunContext, stage: str, sources: list[McpSource], queries: list[SearchQuery]
) -> list[list[list[dict[str, Any]] | None]]:
    return list(await asyncio.gather(*(_ask_source(ctx, stage, source, queries) for source in sources)))


class _Connection:
    """One MCP session with a source (mindsearch/clients/mcp.py), opened at the first query the
    cache cannot answer, with the tool that meets the contract picked then."""

    def __init__(self, source: McpSource, owner: int | None) -> None:
        self.source = source
        self.session = mcp.Session(_server(source), user=owner)
        self.tool = ""

    async def call(self, query: str) -> Any:
        if not self.tool:
            await self.connect()
        return await self.session.call(self.tool, {"query": query})

    async def connect(self) -> None:
        """Open the session and pick the search tool (the handshake counts as one request)."""
        self.tool = pick_tool(await self.session.open(), self.source.tool)

    async def close(self) -> None:
        try:
            await self.session.close()
        except Exception:
            log.info("closing the MCP session with %s failed", self.source.name)


def _server(source: McpSource) -> mcp.Server:
    """The source as the client asks it: plain values, under the source's own global limit."""
    return mcp.Server(
        url=source.url,
        rate_limit_name=source.rate_limit_name,
        requests_per_minute=source.requests_per_minute,
        timeout_seconds=source.timeout_seconds,
        headers=dict(source.headers or {}),
    )


def _cache_key(source: McpSource, query: str) -> str:
    # The headers only as part of a hash: results seen with one key are not another key's.
    return cache.make_key(
        "mcp-search", source.url, source.tool, source.headers or {}, source.max_results, query
    )


async def _ask_source(
    ctx: RunContext, stage: str, source: McpSource, queries: list[SearchQuery]
) -> list[list[dict[str, Any]] | None]:
    """This source's results for each query (None where it was not asked: it failed first)."""
    answers: list[list[dict[str, Any]] | None] = [None] * len(queries)
    connection = _Connection(source, ctx.owner_id)
    try:
        for index, query in enumerate(queries):
            key = _cache_key(source, query.text)
            cached = await db(cache.get)(CacheEntry.Kind.SEARCH_RESULTS, key)
            if cached is not None:
                answers[index] = cached["results"]
                continue
            call = await connection.call(query.text)
            results = results_of(call, source.max_results)
            description = f"{source.name}: {query.text}"
            await db(cache.put)(
                CacheEntry.Kind.SEARCH_RESULTS, key, {"results": results}, description=description
            )
            answers[index] = results
            await db(ctx.emit)(
                stage,
                gettext_noop("%(count)s results from the MCP source %(source)s for “%(query)s”"),
                args={"count": len(results), "source": source.name, "query": query.text},
            )
    except lifecycle.WorkerStopping:
        raise
    except Exception as error:
        reason = _reason(error)
        log.warning("MCP source %s failed: %s", source.name, reason)
        await db(ctx.warn)(
            stage,
            gettext_noop("The MCP source %(source)s failed: %(error)s"),
            args={"source": source.name, "error": reason},
        )
    finally:
        await connection.close()
    return answers


@dataclass(frozen=True)
class Probe:
    source: str
    tool: str = ""
    error: str = ""


async def probe(source: McpSource, timeout: float) -> Probe:
    """Connect to `source` and pick its search tool, as the search stage would (for nobody)."""
    connection = _Connection(source, None)
    try:
        async with asyncio.timeout(timeout):
            await connection.connect()
        return Probe(source.name, tool=connection.tool)
    except lifecycle.WorkerStopping:
        raise
    except Exception as error:
        return Probe(source.name, error=_reason(error))
    finally:
        await connection.close()


def _reason(error: BaseException) -> str:
    if isinstance(error, SourceError):
        return str(error)
    if isinstance(error, TimeoutError | asyncio.TimeoutError):
        return "no answer in time"
    if isinstance(error, BaseExceptionGroup):
        return _reason(error.exceptions[0])
    return f"{type(error).__name__}: {str(error)[:300]}"
