"""start_research over MCP (the SDK's client, `manage.py mcp --user NAME` over stdio) takes a
picture like the API: stored without metadata for its owner; a file that is not a picture is a
tool error and no topic."""

from __future__ import annotations

import asyncio
import base64
import sys
from typing import Any

import pytest
from django.contrib.auth.models import User
from mcp import Client, StdioServerParameters

from research.models import Topic, TopicImage
from tests.support import processes
from tests.support.domain_world import picture

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


async def start_two(username: str) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--user", username],
        # A Web topic needs web search configured (issue 29); this one never searches.
        env=processes.process_env(SEARXNG_URL="http://127.0.0.1:9"),
        cwd=str(processes.ROOT),
    )
    photo = base64.b64encode(picture((220, 30, 30), exif_gps=True)).decode()
    async with Client(params, read_timeout_seconds=60) as client:
        good = await client.call_tool(
            "start_research", {"question": "What is this tower?", "auto_approve": False, "image": photo}
        )
        bad = await client.call_tool(
            "start_research",
            {"question": "And this?", "image": base64.b64encode(b"%PDF-1.7 no picture").decode()},
        )
    return {"good": good, "bad": bad}


def test_start_research_takes_a_picture(alice: User) -> None:
    seen = asyncio.run(start_two("alice"))
    assert not seen["good"].is_error, seen["good"].content
    assert '"analysis": "pending"' in seen["good"].content[0].text.replace('":"', '": "')
    topic = Topic.objects.get(owner=alice)
    image = TopicImage.objects.get(topic=topic)
    assert image.content_type == "image/jpeg" and b"SpyCam" not in bytes(image.data)
    assert seen["bad"].is_error and "image" in seen["bad"].content[0].text
    assert Topic.objects.count() == 1
