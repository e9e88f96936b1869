"""Production posture: the Content-Security-Policy, and pages that keep to it.

The policy allows scripts, styles and connections from this site only. The pages work under it
because no template holds inline script, handler attributes or styles (read here, file by
file), and no rendered page does either (every kind of page, in every state). The browser
journey (tests/browser) checks that Chromium reports no violation while it uses the pages.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from mindsearch.csp import POLICY
from research.models import ShareLink, SubQuery, Topic
from tests.reliability.html_scan import active_content
from tests.reliability.runs import research
from tests.support.processes import ROOT
from tests.support.world import loopback_world

pytestmark = pytest.mark.django_db

TEMPLATE_DIRS = [ROOT / "templates", *ROOT.glob("*/templates")]
# Rendered by WeasyPrint into a PDF on the server; never sent to a browser as HTML.
PRINT_ONLY = {ROOT / "templates" / "research" / "report_pdf.html"}


def templates() -> list[Path]:
    found = {path for folder in TEMPLATE_DIRS for path in folder.rglob("*.html")}
    return sorted(found - PRINT_ONLY)


@pytest.mark.parametrize("path", templates(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_template_has_inline_script_handlers_or_styles(path: Path) -> None:
    source = path.read_text()
    # Template tags inside attribute values would confuse the HTML parser; their output is
    # escaped text, so they are blanked out.
    html = re.sub(r"{% comment %}.*?{% endcomment %}", "", source, flags=re.S)
    html = re.sub(r"{%.*?%}|{{.*?}}|{#.*?#}", "x", html, flags=re.S)
    assert not active_content(html), active_content(html)


def test_the_policy_allows_only_this_site() -> None:
    assert POLICY["script-src"] == "'self'" and POLICY["style-src"] == "'self'"
    assert POLICY["object-src"] == "'none'" and POLICY["frame-ancestors"] == "'none'"
    assert not any("unsafe" in value or "*" in value for value in POLICY.values())


@pytest.fixture
def workspace(alice: User, settings: object) -> dict[str, str]:
    """Alice's pages in every state: a finished topic, one awaiting review, one that failed."""
    with loopback_world(settings):
        done = research(alice)
    review = Topic.objects.create(owner=alice, question="What is RAG?", status="awaiting_approval")
    SubQuery.objects.create(topic=review, text="What is retrieval-augmented generation?")
    failed = Topic.objects.create(owner=alice, question="Why?", status="failed", error="SearXNG failed")
    _link, token = ShareLink.issue(done)
    return {
        "home": reverse("home"),
        "status": reverse("status"),
        "finished topic": reverse("topic_detail", args=[done.pk]),
        "plan review": reverse("topic_detail", args=[review.pk]),
        "failed topic": reverse("topic_detail", args=[failed.pk]),
        "documents": reverse("document_list"),
        "document search": reverse("document_search") + "?q=tokens",
        "api tokens": reverse("api_tokens"),
        "password": reverse("password_change"),
        "shared report": reverse("shared_report", args=[token]),
        "api docs": "/api/docs",
    }


def test_every_page_carries_the_policy_and_keeps_to_it(alice_client: Client, workspace: dict) -> None:
    alice_client.post(reverse("share_create", args=[Topic.objects.filter(status="completed").get().pk]))
    for where, url in workspace.items():
        response = alice_client.get(url)
        assert response.status_code == 200, where
        policy = response["Content-Security-Policy"]
        assert "script-src 'self';" in policy and "style-src 'self';" in policy, where
        assert "connect-src 'self' ws://testserver wss://testserver" in policy, where
        found = active_content(response.content.decode())
        assert not found, (where, found)


def test_signed_out_pages_errors_and_static_files_carry_it_too(db: None) -> None:
    client = Client()
    for url, status in [
        (reverse("login"), 200),
        (reverse("signup"), 200),
        ("/no/such/page/", 404),
        ("/s/not-a-token/", 404),
        ("/static/js/ui.js", 200),
    ]:
        response = client.get(url)
        assert response.status_code == status, url
        assert "default-src 'self'" in response["Content-Security-Policy"], url
        if response["Content-Type"].startswith("text/html"):
            assert not active_content(response.content.decode()), url


def test_the_admin_keeps_to_it(db: None) -> None:
    staff = User.objects.create_superuser("root", "root@example.com", "staff password 1")
    client = Client()
    client.force_login(staff)
    for url in [
        reverse("admin:index"),
        reverse("admin:research_topic_changelist"),
        reverse("admin:research_llmcall_changelist"),
        reverse("admin:research_cacheentry_changelist"),
        reverse("admin:auth_user_change", args=[staff.pk]),
    ]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert "script-src 'self'" in response["Content-Security-Policy"]
        found = active_content(response.content.decode())
        assert not found, (url, found)
