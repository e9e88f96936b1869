"""A loopback MCP tool server built with the official SDK and served over Streamable HTTP by
uvicorn in a thread: a search tool over the loopback world's pages (same matching as the
SearXNG stand-in), which checks the header an admin configured and records every call."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from tests.support.processes import free_port

API_KEY = "loopback-secret-key"


@dataclass
class LoopbackMcp:
    url: str
    calls: list[str] = field(default_factory=list)
    headers_seen: list[str] = field(default_factory=list)
    # Replaces the search tool's answer when set (a function of the query).
    answer: Callable[[str], Any] | None = None


@contextmanager
def loopback_mcp(pages: Callable[[str], list[dict[str, Any]]]) -> Iterator[LoopbackMcp]:
    """`pages(query)`: the results for a query, as SearXNG's stand-in would find them."""
    port = free_port()
    state = LoopbackMcp(url=f"http://127.0.0.1:{port}/mcp")
    server = MCPServer("loopback search")

    @server.tool()
    async def describe_page(url: str, depth: int) -> str:
        """Not a search tool: it needs more than a query."""
        return url

    @server.tool()
    async def web_search(query: str, ctx: Context) -> Any:
        """Search the loopback web."""
        headers = ctx.headers or {}
        state.headers_seen.append(headers.get("x-api-key", ""))
        if headers.get("x-api-key") != API_KEY:
            raise ToolError("missing or wrong X-Api-Key")
        state.calls.append(query)
        if state.answer is not None:
            return state.answer(query)
        return {"results": pages(query)}

    config = uvicorn.Config(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")
    runner = uvicorn.Server(config)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not runner.started:
        assert time.monotonic() < deadline, "the loopback MCP server did not start"
        time.sleep(0.05)
    try:
        yield state
    finally:
        runner.should_exit = True
        thread.join(10)
