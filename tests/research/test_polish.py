"""Polish of the report experience: DOCX export, the dead share link's page, styled error pages,
and what the first-run start form says."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from docx import Document
from docx.document import Document as DocxDocument
from docx.text.paragraph import Paragraph

from research.models import ShareLink, Topic
from tests.research.test_views import completed

pytestmark = pytest.mark.django_db

REPORT = """# Mixture of Tokens

Mixture of Tokens mixes **tokens across examples** before the experts see them [1], and it is
*continuous* [2].

## Where it is used

- In sparse language models [1]
- As a drop-in for MoE layers [2]

| Model | Params |
|-------|--------|
| MoT   | 1.2B   |
"""


def docx_text(content: bytes) -> tuple[DocxDocument, str]:
    document = Document(io.BytesIO(content))
    return document, "\n".join(paragraph.text for paragraph in document.paragraphs)


def style_name(paragraph: Paragraph) -> str:
    """A paragraph's style name ("" for none: python-docx types both as optional)."""
    style = paragraph.style
    return (style.name or "") if style is not None else ""


def test_docx_has_the_headings_formatting_citations_and_linked_sources(
    alice_client: Client, alice: User
) -> None:
    topic = completed(alice, REPORT)
    response = alice_client.get(reverse("report_docx", args=[topic.pk]))
    assert response.status_code == 200
    assert (
        response["Content-Type"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    )
    assert response["Content-Disposition"].endswith('.docx"')
    document, text = docx_text(response.content)
    headings = [(style_name(p), p.text) for p in document.paragraphs if style_name(p).startswith("Heading")]
    assert ("Heading 1", "Mixture of Tokens") in headings
    assert ("Heading 2", "Where it is used") in headings
    assert ("Heading 2", "Источники") in headings
    assert "before the experts see them [1], and it is continuous [2]." in text
    bold = [run.text for p in document.paragraphs for run in p.runs if run.bold]
    assert "tokens across examples" in bold
    bullets = [p.text for p in document.paragraphs if style_name(p) == "List Bullet"]
    # The plan of the header first, one paragraph a sub-query, then the report's own list.
    assert bullets == [
        "What is it?",
        "Where is it used?",
        "How was it improved?",
        "In sparse language models [1]",
        "As a drop-in for MoE layers [2]",
    ]
    # The sub-queries of the .md header come along, and the sources list links its URLs.
    assert "What is it?" in text
    links = [rel.target_ref for rel in document.part.rels.values() if rel.reltype.endswith("/hyperlink")]
    assert links == ["https://example.org/mot"]
    assert document.tables[0].cell(1, 1).text == "1.2B"


def test_a_shared_report_downloads_as_docx_until_the_link_is_revoked(
    alice_client: Client, alice: User
) -> None:
    topic = completed(alice, REPORT)
    link, token = ShareLink.issue(topic)
    response = Client().get(reverse("shared_report_docx", args=[token]))
    assert response.status_code == 200
    assert "Mixture of Tokens" in docx_text(response.content)[1]
    link.revoke()
    assert Client().get(reverse("shared_report_docx", args=[token])).status_code == 404


@pytest.mark.parametrize("debug", [True, False])
def test_a_dead_share_link_says_so_on_a_styled_page_even_with_debug_on(
    alice_client: Client, alice: User, settings: Any, debug: bool
) -> None:
    settings.DEBUG = debug
    topic = completed(alice)
    link, token = ShareLink.issue(topic)
    link.revoke()
    for path in (f"/s/{token}/", "/s/never-issued-token/"):
        response = Client().get(path)
        assert response.status_code == 404
        html = response.content.decode()
        assert "This link was revoked or has expired." in html
        assert "css/mindsearch.css" in html
        assert "URLconf" not in html and "Using the URLconf" not in html


def test_error_pages_are_the_sites_own(alice_client: Client, alice: User, settings: Any) -> None:
    settings.DEBUG = False
    response = alice_client.get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Page not found" in html and "css/mindsearch.css" in html and 'rel="icon"' in html
    assert "My topics" in html  # signed in: the way back


def test_the_server_error_page_renders_without_a_request() -> None:
    from django.template.loader import render_to_string

    html = render_to_string("500.html")
    assert "Something went wrong" in html and "css/mindsearch.css" in html


def test_a_failed_topics_report_card_says_it_failed(alice_client: Client, alice: User) -> None:
    topic = Topic.objects.create(
        owner=alice,
        question="What is Mixture of Tokens?",
        status="failed",
        sources="docs",
        error="No documents to search.",
    )
    html = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "The run failed before a report was written." in html
    assert "No documents to search." in html and 'href="/documents/">Documents page</a>' in html
    assert "The report appears here when the run is done." not in html


def test_the_start_form_says_when_web_search_is_not_configured(
    alice_client: Client, alice: User, settings: Any
) -> None:
    settings.SEARXNG_URL = ""
    html = alice_client.get("/").content.decode()
    assert "Web search is not configured on this server" in html
    assert (
        'value="docs" id="id_sources_1" checked' in html or 'value="docs"' in html.split("checked")[0][-200:]
    )
    settings.SEARXNG_URL = "http://127.0.0.1:9"
    html = alice_client.get("/").content.decode()
    assert "Web search is not configured on this server" not in html
    assert 'value="web"' in html.split("checked")[0][-200:]
