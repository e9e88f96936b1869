"""`manage.py mcp --user NAME` over stdio, driven by the official MCP SDK's client: it acts as
that user only, and refuses to start for an unknown user."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest
from django.contrib.auth.models import User
from mcp import Client, StdioServerParameters

from research.models import Topic
from tests.api.conftest import awaiting, completed
from tests.support import processes

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def stdio(username: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--user", username],
        env=processes.process_env(),
        cwd=str(processes.ROOT),
    )


async def session(username: str, alices_topic: int, alices_waiting: int) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with Client(stdio(username), read_timeout_seconds=60) as client:
        seen["tools"] = {tool.name for tool in (await client.list_tools()).tools}
        seen["topics"] = await client.call_tool("list_topics", {})
        seen["report"] = await client.call_tool("get_report", {"topic_id": alices_topic})
        seen["approve"] = await client.call_tool("approve_plan", {"topic_id": alices_waiting})
        seen["too_big"] = await client.call_tool(
            "get_topic_status", {"topic_id": alices_topic, "limit": 10**6}
        )
        try:
            seen["resource"] = (
                await client.read_resource(f"mindsearch://topics/{alices_topic}/report")
            ).contents
        except Exception as refused:
            seen["resource"] = str(refused)
    return seen


def test_stdio_acts_as_its_user_and_no_one_else(alice: User, bob: User) -> None:
    topic = completed(alice, "What is Mixture of Tokens?")
    waiting = awaiting(alice, "Who uses Mixture of Tokens?")

    mine = asyncio.run(session("alice", topic.pk, waiting.pk))
    assert "start_research" in mine["tools"]
    listed = json.loads(mine["topics"].content[0].text)
    assert {item["id"] for item in listed["items"]} == {topic.pk, waiting.pk}
    report = json.loads(mine["report"].content[0].text)
    assert (
        report["markdown"].startswith("# Answer") and report["sources"][0]["url"] == "https://example.org/mot"
    )
    assert json.loads(mine["approve"].content[0].text)["status"] == "queued"
    assert mine["too_big"].is_error and "limit" in mine["too_big"].content[0].text
    assert mine["resource"][0].text == report["markdown"]

    waiting.refresh_from_db()
    waiting.set_status(Topic.Status.AWAITING_APPROVAL)
    theirs = asyncio.run(session("bob", topic.pk, waiting.pk))
    assert json.loads(theirs["topics"].content[0].text)["count"] == 0
    assert theirs["report"].is_error and theirs["report"].content[0].text.endswith(
        f"Topic {topic.pk} not found."
    )
    assert theirs["approve"].is_error
    assert f"Topic {topic.pk} not found." in theirs["resource"]
    waiting.refresh_from_db()
    assert waiting.status == Topic.Status.AWAITING_APPROVAL


def test_stdio_refuses_an_unknown_user(db: None) -> None:
    result = processes.manage("mcp", "--user", "nobody-here", env=processes.process_env(), timeout=60)
    assert result.returncode != 0 and "No user named 'nobody-here'" in result.stderr
