"""The MCP client against a loopback tool server built with the official SDK and served over
Streamable HTTP: the handshake lists the tools, a call carries the configured headers, and
every request (the handshake as one) takes a slot of the server's own global limit."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from mindsearch.clients import mcp
from mindsearch.models import RateLimitGrant
from tests.support.mcp_source import API_KEY, loopback_mcp


def found(query: str) -> list[dict[str, Any]]:
    return [{"url": "https://example.org/a", "title": f"About {query}"}]


def server(url: str, limit: float = 0) -> mcp.Server:
    return mcp.Server(
        url=url,
        rate_limit_name="mcp-test",
        requests_per_minute=limit,
        timeout_seconds=10.0,
        headers={"X-Api-Key": API_KEY},
    )


async def ask(where: mcp.Server, query: str) -> tuple[list[str], Any]:
    session = mcp.Session(where, user=None)
    try:
        tools = await session.open()
        return [tool.name for tool in tools], await session.call("web_search", {"query": query})
    finally:
        await session.close()


def test_the_tools_are_listed_and_a_call_carries_the_headers() -> None:
    with loopback_mcp(found) as loopback:
        names, call = asyncio.run(ask(server(loopback.url), "tides"))
        assert loopback.calls == ["tides"] and loopback.headers_seen == [API_KEY]
    assert set(names) == {"describe_page", "web_search"}
    assert not call.is_error
    assert json.loads(call.content[0].text) == {"results": found("tides")}  # the SDK's answer as sent


def test_a_call_before_the_handshake_is_refused_and_closing_is_harmless() -> None:
    session = mcp.Session(server("http://127.0.0.1:9/mcp"), user=None)
    with pytest.raises(RuntimeError):
        asyncio.run(session.call("web_search", {"query": "x"}))
    asyncio.run(session.close())


@pytest.mark.django_db(transaction=True)
def test_the_handshake_and_each_call_take_a_slot_of_the_servers_limit() -> None:
    with loopback_mcp(found) as loopback:
        asyncio.run(ask(server(loopback.url, limit=600), "tides"))
    assert RateLimitGrant.objects.filter(name="mcp-test").count() == 2
