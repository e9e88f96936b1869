"""MCP tool servers over Streamable HTTP, through the official SDK (the MCP sources of
mcphub/sources.py, which picks the tool and reads its answers).

A `Session` is one MCP session with one server: `open` does the handshake and lists the
server's tools, `call` calls one, `close` ends the session (and its HTTP client). Every request
first waits for the server's own global rate limit (`ratelimit.acquire` under the name and the
requests a minute the caller gives, in `user`'s share as everywhere): the handshake with its
tool list counts as one request, each tool call as one. The answers are the SDK's own objects
(`mcp.types.Tool`, `mcp.types.CallToolResult`). Plain values in, so no app model is needed here.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx2

from mindsearch.clients import ratelimit, tls

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult, Tool


@dataclass(frozen=True)
class Server:
    """Where a tool server is and how it may be asked: its endpoint, the headers every request
    carries (an API key, say), how long a request may take, and its global limit."""

    url: str
    rate_limit_name: str
    requests_per_minute: float
    timeout_seconds: float
    headers: dict[str, str] = field(default_factory=dict)


class Session:
    """One MCP session with `server`, for `user` (None: for nobody, as the status page asks)."""

    def __init__(self, server: Server, *, user: int | None) -> None:
        self.server, self.user = server, user
        self._stack = AsyncExitStack()
        self._client: Client | None = None

    async def open(self) -> list[Tool]:
        """Connect and list the server's tools (one request of the limit)."""
        # The SDK is imported here, at the first session: importing it took 1.3 s of CPU, paid by
        # every process that imports the search stage (each worker, manage.py command and test
        # process) though few of them ever talk to an MCP server.
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        await self._wait_turn()
        http = httpx2.AsyncClient(
            headers=dict(self.server.headers), timeout=self.server.timeout_seconds, verify=tls.context()
        )
        self._stack.push_async_callback(http.aclose)
        transport = streamable_http_client(self.server.url, http_client=http)
        self._client = await self._stack.enter_async_context(
            Client(transport, read_timeout_seconds=self.server.timeout_seconds, mode="legacy")
        )
        return list((await self._client.list_tools()).tools)

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call `tool` of the opened session (one request of the limit)."""
        if self._client is None:
            raise RuntimeError("the MCP session is not open")
        await self._wait_turn()
        return await self._client.call_tool(tool, arguments)

    async def close(self) -> None:
        """End the session and close its HTTP client; harmless when it was never opened."""
        self._client = None
        await self._stack.aclose()

    async def _wait_turn(self) -> None:
        server = self.server
        await ratelimit.acquire(server.rate_limit_name, server.requests_per_minute, 60.0, user=self.user)
