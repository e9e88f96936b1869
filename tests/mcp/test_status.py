"""The status page's MCP sources line: none registered, a reachable source with its tool, and a
source that cannot be reached (staff see why; others only the state)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from mcphub.models import McpSource
from tests.mindsearch.test_status import row
from tests.support.mcp_source import API_KEY, loopback_mcp
from tests.support.processes import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_checks(settings: Any) -> None:
    settings.STATUS_CACHE_SECONDS = 0


def test_the_status_page_shows_each_mcp_source(alice: User, alice_client: Client) -> None:
    assert "Not configured" in row(alice_client.get("/status/").content.decode(), "MCP sources")
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    with loopback_mcp(lambda query: []) as server:
        McpSource.objects.create(name="loopback", url=server.url, headers={"X-Api-Key": API_KEY})
        working = row(alice_client.get("/status/").content.decode(), "MCP sources")
        McpSource.objects.create(name="gone", url=f"http://127.0.0.1:{free_port()}/mcp")
        partly = row(alice_client.get("/status/").content.decode(), "MCP sources")
    assert "1 source" in working and "loopback: tool web_search" in working
    assert (
        "2 sources · 1 failing" in partly
        and "gone: failed:" in partly
        and "loopback: tool web_search" in partly
    )
    assert API_KEY not in working + partly
    alice.is_staff = False
    alice.save(update_fields=["is_staff"])
    McpSource.objects.filter(name="loopback").delete()
    public = row(alice_client.get("/status/").content.decode(), "MCP sources")
    assert "Unavailable; the administrator can see why" in public and "127.0.0.1" not in public
