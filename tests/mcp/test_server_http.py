"""The official MCP SDK's client against a real daphne serving /mcp and a real qcluster running
the topic against the scripted loopback world: list the tools, start a topic with a token, poll
it, read the report (tool and resource); another user's token sees none of it; no token or a
bad one is a 401 before the SDK is reached."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import httpx2
import pytest
from django.contrib.auth.models import User
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mindsearch.models import ApiToken
from research.models import Topic
from tests.support import processes
from tests.support.world import TOPIC, world

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

FINISHED = {"completed", "failed", "cancelled"}
TOOLS = {
    "start_research",
    "get_topic_status",
    "get_report",
    "get_plan",
    "approve_plan",
    "list_topics",
    "search_my_documents",
}


def client(url: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(url, http_client=http))


def data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def error(result: Any) -> str:
    assert result.is_error, result.content
    return result.content[0].text


async def research(url: str, alice_token: str, bob_token: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with client(url, alice_token) as alice:
        seen["tools"] = {tool.name: tool for tool in (await alice.list_tools()).tools}
        topic = data(await alice.call_tool("start_research", {"question": TOPIC, "auto_approve": True}))
        seen["started"] = topic
        since, status, seqs = 0, topic["status"], []
        deadline = time.monotonic() + 240
        while status not in FINISHED:
            assert time.monotonic() < deadline, "the run did not finish"
            page = data(await alice.call_tool("get_topic_status", {"topic_id": topic["id"], "since": since}))
            seqs += [event["seq"] for event in page["events"]]
            status, since = page["topic"]["status"], page["last_seq"]
            await asyncio.sleep(0.3)
        seen["status"], seen["seqs"] = status, seqs
        seen["report"] = data(await alice.call_tool("get_report", {"topic_id": topic["id"]}))
        resource = await alice.read_resource(f"mindsearch://topics/{topic['id']}/report")
        seen["resource"] = resource.contents[0]
        seen["templates"] = [
            t.uri_template for t in (await alice.list_resource_templates()).resource_templates
        ]
        seen["alice_topics"] = data(await alice.call_tool("list_topics", {}))
        seen["bad_input"] = error(await alice.call_tool("start_research", {"question": "x\x00y"}))
    async with client(url, bob_token) as bob:
        topic_id = seen["started"]["id"]
        seen["bob_report"] = error(await bob.call_tool("get_report", {"topic_id": topic_id}))
        seen["bob_status"] = error(await bob.call_tool("get_topic_status", {"topic_id": topic_id}))
        seen["bob_approve"] = error(await bob.call_tool("approve_plan", {"topic_id": topic_id}))
        seen["bob_topics"] = data(await bob.call_tool("list_topics", {}))
        try:
            await bob.read_resource(f"mindsearch://topics/{topic_id}/report")
        except Exception as refused:  # the SDK raises the server's resource error
            seen["bob_resource"] = str(refused)
    return seen


def test_an_mcp_client_with_a_token_researches_a_topic_and_another_token_sees_nothing(
    alice: User, bob: User
) -> None:
    _row, alice_token = ApiToken.issue(alice, "mcp")
    _row, bob_token = ApiToken.issue(bob, "mcp")
    revoked, revoked_token = ApiToken.issue(alice, "old")
    revoked.revoke()
    with world() as w:
        env = processes.process_env(**w.env())
        with processes.daphne(env) as host, processes.qcluster(env):
            url = f"http://{host}/mcp"
            initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            refusals = [
                httpx.post(url, json=initialize, headers=headers)
                for headers in (
                    {},
                    {"Authorization": "Bearer mst_not-a-token"},
                    {"Authorization": f"Bearer {revoked_token}"},
                    {"Authorization": f"Basic {alice_token}"},
                )
            ]
            auth = {"Authorization": f"Bearer {alice_token}"}
            wrong_host = httpx.post(url, json=initialize, headers={**auth, "Host": "evil.example"})
            oversized = httpx.post(url, content=b"[" + b" " * 2_000_000 + b"]", headers=auth)
            seen = asyncio.run(research(url, alice_token, bob_token))
    assert [r.status_code for r in refusals] == [401, 401, 401, 401]
    assert all(r.headers["www-authenticate"].startswith("Bearer") for r in refusals)
    assert "unknown, expired or revoked" in refusals[1].json()["detail"]
    assert wrong_host.status_code == 400  # ALLOWED_HOSTS holds for /mcp as for every other path
    assert oversized.status_code == 413  # the body-size layer stands in front of /mcp

    assert set(seen["tools"]) >= TOOLS
    schema = seen["tools"]["start_research"].input_schema
    assert set(schema["properties"]["sources"]["enum"]) == {"web", "docs", "both", "papers"}
    assert {"sites_only", "sites_prefer", "sites_avoid", "token_cap"} <= set(schema["properties"])
    assert {"report_kind", "outline", "report_length"} <= set(schema["properties"])  # issue 30
    assert seen["started"]["question"] == TOPIC and seen["started"]["auto_approve"] is True
    assert seen["status"] == "completed", Topic.objects.get(pk=seen["started"]["id"]).error
    assert seen["seqs"] == list(range(1, len(seen["seqs"]) + 1)) and len(seen["seqs"]) > 8

    report = seen["report"]
    assert "Mixture of Tokens" in report["markdown"] and "/pages/mot-" in report["markdown"]
    assert report["sources"] and report["model"] == "test-model" and "html" not in report
    assert seen["resource"].text == report["markdown"] and seen["resource"].mime_type == "text/markdown"
    assert "mindsearch://topics/{topic_id}/report" in seen["templates"]
    assert [t["id"] for t in seen["alice_topics"]["items"]] == [seen["started"]["id"]]
    assert "NUL" in seen["bad_input"]

    topic_id = seen["started"]["id"]
    for refused in (seen["bob_report"], seen["bob_status"], seen["bob_approve"]):
        assert refused.endswith(f": Topic {topic_id} not found."), refused
    assert seen["bob_topics"]["count"] == 0 and seen["bob_topics"]["items"] == []
    assert f"Topic {topic_id} not found." in seen["bob_resource"]
    assert TOPIC not in json.dumps(seen["bob_topics"])
