"""The API answers Cyrillic as it is, not as \\u escapes (issue 29), and refuses a Web topic
clearly while web search is not configured."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User

from research.models import Topic
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def test_cyrillic_comes_back_as_it_is(alice: User, alice_api: ApiClient) -> None:
    Topic.objects.create(owner=alice, question="Какой курс рубля?", status="completed")
    response = alice_api.get("/api/topics")
    assert response.status_code == 200 and response["Content-Type"] == "application/json; charset=utf-8"
    raw = response.content.decode("utf-8")
    assert "Какой курс рубля?" in raw and "\\u04" not in raw
    assert json.loads(raw)["items"][0]["question"] == "Какой курс рубля?"


def test_a_web_topic_is_refused_while_web_search_is_not_configured(
    alice_api: ApiClient, settings: Any
) -> None:
    settings.SEARXNG_URL = ""
    refused = alice_api.post("/api/topics", {"question": "How do tides work?", "sources": "web"})
    assert refused.status_code == 422
    assert "Web search is not configured on this server (SEARXNG_URL is empty)" in refused.json()["detail"]
    assert not Topic.objects.exists()
    started = alice_api.post("/api/topics", {"question": "How do tides work?", "sources": "docs"})
    assert started.status_code == 201
    settings.SEARXNG_URL = "http://127.0.0.1:9"
    assert (
        alice_api.post("/api/topics", {"question": "How do tides work?", "sources": "web"}).status_code == 201
    )


def test_document_search_is_documented_with_its_fields() -> None:
    """`GET /api/search` is named in the README and in docs/API.md with every field it answers
    (issue 29)."""
    from pathlib import Path

    from retrieval.api import PassageOut, SearchOut

    root = Path(__file__).resolve().parents[2]
    assert "`GET /api/search?q=…`" in (root / "README.md").read_text()
    text = (root / "docs" / "API.md").read_text()
    assert "GET /api/search?q=" in text
    for field in [*SearchOut.model_fields, *PassageOut.model_fields]:
        assert f'"{field}"' in text, field


def test_a_new_token_has_a_copy_button(alice_client: Any) -> None:
    """The token shown once can be copied in one click (static/js/ui.js's data-copy), like a share link."""
    page = alice_client.post(
        "/settings/tokens/", {"name": "script", "expires_in_days": "", "scopes": ["read"]}
    ).content.decode()
    assert 'id="new-token" readonly' in page
    assert '<button type="button" data-copy="new-token"' in page
    assert 'data-copy="new-token"' not in alice_client.get("/settings/tokens/").content.decode()
