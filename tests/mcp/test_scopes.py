"""API token scopes at `/mcp` (issue 26): each tool needs the scope of the API operation it
calls; a token without it gets a tool error naming the scope and nothing is done."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth.models import User

from mcphub.http import app
from mcphub.server import server
from mindsearch.models import ApiToken, TokenScope
from research.models import Topic

pytestmark = pytest.mark.django_db(transaction=True)

# Each tool with arguments it accepts, and the scope it needs.
TOOLS: dict[str, tuple[dict[str, Any], str]] = {
    "start_research": (
        {"question": "What is Mixture of Tokens?", "sources": "docs", "auto_approve": False},
        "research",
    ),
    "get_topic_status": ({"topic_id": 1}, "read"),
    "get_report": ({"topic_id": 1}, "read"),
    "get_plan": ({"topic_id": 1}, "read"),
    "approve_plan": ({"topic_id": 1}, "research"),
    "list_topics": ({}, "read"),
    "search_my_documents": ({"query": "tokens"}, "read"),
}


async def call(token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    headers = [
        (b"host", b"127.0.0.1"),
        (b"accept", b"application/json, text/event-stream"),
        (b"content-type", b"application/json"),
        (b"mcp-protocol-version", b"2025-06-18"),
        (b"authorization", f"Bearer {token}".encode()),
    ]
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers, "scheme": "http"}
    communicator = ApplicationCommunicator(app, scope)
    await communicator.send_input(
        {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
    )
    start = await communicator.receive_output(timeout=20)
    assert start["status"] == 200, start
    chunks = []
    while True:
        message = await communicator.receive_output(timeout=20)
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return json.loads(b"".join(chunks))["result"]


def test_the_table_covers_every_tool() -> None:
    listed = async_to_sync(server.list_tools)()
    assert {tool.name for tool in listed} == set(TOOLS)


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_a_tool_refuses_a_token_without_its_scope(alice: User, name: str) -> None:
    arguments, needed = TOOLS[name]
    _row, token = ApiToken.issue(alice, "narrow", scopes=[s for s in TokenScope.values if s != needed])
    result = async_to_sync(call)(token, name, arguments)
    assert result["isError"], result
    assert f"lacks the '{needed}' scope" in result["content"][0]["text"]
    assert not Topic.objects.exists()


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_a_tool_lets_a_token_with_its_scope_through(alice: User, name: str) -> None:
    arguments, needed = TOOLS[name]
    _row, token = ApiToken.issue(alice, "just enough", scopes=[needed])
    result = async_to_sync(call)(token, name, arguments)
    assert "scope" not in json.dumps(result), result
    if name == "start_research":
        assert not result["isError"], result
        assert Topic.objects.filter(owner=alice).count() == 1
