"""MCP tool servers as sources: a loopback MCP server built with the SDK answers the search
stage's queries; its results are scored, read and cited like web pages, through the cache; a
source that fails or breaks the contract is said in the event log and the topic goes on."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from mcp.types import CallToolResult, TextContent

from mcphub.models import McpSource
from mcphub.sources import SourceError, is_search_tool, results_of
from research.models import Hit, Report, RunEvent, Topic
from research.pipeline.run import plan_topic, run_topic
from tests.support.mcp_source import API_KEY, loopback_mcp
from tests.support.world import PAGES, TOPIC, World

pytestmark = pytest.mark.django_db


def pages_for(base_url: str) -> Any:
    def found(query: str) -> list[dict[str, Any]]:
        words = set(query.lower().split())
        hits = sorted(
            (p for p in PAGES if words & set(p[2].split())), key=lambda p: -len(words & set(p[2].split()))
        )
        return [
            {"url": f"{base_url}pages/{slug}?utm_source=searx", "title": title, "snippet": text[:120]}
            for slug, title, _, _, text in hits[:10]
        ]

    return found


def research(owner: User) -> Topic:
    topic = Topic.objects.create(owner=owner, question=TOPIC, auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def messages(topic: Topic) -> list[str]:
    return [event.message for event in RunEvent.objects.filter(topic=topic).order_by("seq")]


def test_an_mcp_source_alone_is_searched_read_and_cited(alice: User, loopback: World, settings: Any) -> None:
    settings.SEARXNG_URL = ""  # no web search engine: the MCP source is the only one
    with loopback_mcp(pages_for(loopback.web.url)) as server:
        McpSource.objects.create(name="loopback", url=server.url, headers={"X-Api-Key": API_KEY})
        topic = research(alice)
        assert topic.status == Topic.Status.COMPLETED, topic.error
        asked = list(server.calls)
        again = research(alice)
    assert asked and set(server.headers_seen) == {API_KEY}
    hits = Hit.objects.filter(topic=topic)
    assert hits.exists() and set(hits.values_list("engine", flat=True)) == {"mcp:loopback"}
    report = Report.objects.get(topic=topic)
    cited = {source["url"] for source in report.sources}
    assert cited and cited <= set(hits.values_list("url", flat=True))
    assert all(f"({url})" in report.markdown for url in cited)
    assert any("using the MCP sources' results" in text for text in messages(topic))
    assert any("from the MCP source loopback" in text for text in messages(topic))
    # The same topic again is answered from the cache: the server is not asked.
    assert again.status == Topic.Status.COMPLETED and server.calls == asked
    assert not loopback.searxng.requests


def test_a_failing_source_is_said_and_the_web_goes_on(alice: User, loopback: World) -> None:
    with loopback_mcp(pages_for(loopback.web.url)) as server:
        McpSource.objects.create(name="keyless", url=server.url, headers={})
        topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert any("The MCP source keyless failed" in text and "X-Api-Key" in text for text in messages(topic))
    assert not Hit.objects.filter(topic=topic, engine__startswith="mcp:").exists()
    assert Hit.objects.filter(topic=topic).exists()  # SearXNG's


def test_output_outside_the_contract_fails_the_source(alice: User, loopback: World, settings: Any) -> None:
    settings.SEARXNG_URL = ""
    with loopback_mcp(pages_for(loopback.web.url)) as server:
        server.answer = lambda query: "just some prose about " + query
        McpSource.objects.create(name="prose", url=server.url, headers={"X-Api-Key": API_KEY})
        topic = research(alice)
    assert topic.status == Topic.Status.FAILED
    assert any("The MCP source prose failed" in text for text in messages(topic))


def test_a_disabled_source_is_not_asked(alice: User, loopback: World) -> None:
    with loopback_mcp(pages_for(loopback.web.url)) as server:
        McpSource.objects.create(name="off", url=server.url, headers={"X-Api-Key": API_KEY}, enabled=False)
        topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED and server.calls == []


def test_the_tool_contract() -> None:
    assert is_search_tool(
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    )
    assert is_search_tool({"properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}})
    assert not is_search_tool({"properties": {"q": {"type": "string"}}})
    assert not is_search_tool(
        {"properties": {"query": {"type": "string"}, "n": {}}, "required": ["query", "n"]}
    )

    def call(text: str, structured: Any = None, error: bool = False) -> CallToolResult:
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=structured, is_error=error
        )

    good = {
        "url": "https://example.org/a",
        "title": " A ",
        "content": "about a",
        "published_at": "2025-01-02",
    }
    bad = [
        {"url": "ftp://example.org/b", "title": "B"},
        {"url": "https://example.org/c"},
        "d",
        {"title": "E"},
    ]
    assert results_of(call('{"results": [' + __import__("json").dumps(good) + "]}"), 10) == [
        {
            "url": "https://example.org/a",
            "title": "A",
            "snippet": "about a",
            "published_at": "2025-01-02T00:00:00",
        }
    ]
    assert results_of(call("", structured={"results": [good, *bad]}), 10)[0]["url"] == "https://example.org/a"
    assert len(results_of(call("", structured={"results": [good] * 5}), 3)) == 3
    for broken in (call("not json"), call('{"items": []}'), call("boom", error=True)):
        with pytest.raises(SourceError):
            results_of(broken, 10)
