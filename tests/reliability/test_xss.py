"""Hostile input: XSS. A research run in which everything from outside carries script.

The question, the search results (titles, snippets, a javascript: URL), the pages read, the
LLM's plan, summaries and report, and an uploaded document's file name all hold payloads.
Every page that shows them — to the owner, to a share-link visitor, to staff in the admin, and
the websocket's live fragments — must show them as text: no script, handler, style, script URL
or embedded frame may come out of them (tests/reliability/html_scan.py), and each page must
really contain the payloads, escaped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from asgiref.sync import async_to_sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from research.models import Hit, Report, ShareLink, Topic
from research.routing import websocket_urlpatterns
from retrieval.ingest import ingest
from retrieval.models import UploadedDocument
from retrieval.uploads import accept_upload
from tests.reliability.html_scan import active_content
from tests.reliability.runs import research
from tests.support.fakes import Request, Response
from tests.support.world import TOPIC, World, loopback_world

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"])

PAYLOADS = [
    '<script>alert("XSS-script")</script>',
    '<img src=x onerror=alert("XSS-img")>',
    '"><svg onload=alert("XSS-svg")>',
    "'><iframe src=javascript:alert('XSS-iframe')></iframe>",
    '<a href="javascript:alert(1)">XSS-anchor</a>',
    "[XSS-mdlink](javascript:alert(1)) ![XSS-mdimg](x onerror=alert(1))",
    "<style>body{display:none}</style><base href=//evil.example/>XSS-style",
    '<form action="//evil.example"><button formaction=javascript:alert(1)>XSS-form</button></form>',
]
HOSTILE = " ".join(PAYLOADS)
MARKER = re.compile(r"XSS-\w+")
BAD_URL = "javascript:alert(document.cookie)//https://example.org/"
HOSTILE_FILE_NAME = '<img src=x onerror=alert("XSS-name")>mot.md'


def poison(w: World) -> None:
    """Payloads in every answer of the outside world."""
    script = w.script
    plan, summarise, answer = script.plan, script.summarise, script.answer
    script.plan = lambda user: plan(user).replace("машинном обучении?", f"машинном обучении? {HOSTILE}")
    script.summarise = lambda user: f"{summarise(user)} {HOSTILE}"
    # Before the model's own sources list, which MindSearch cuts off and writes itself.
    script.answer = lambda user: answer(user).replace(
        "## Улучшения", f"{HOSTILE}\n\n<details open ontoggle=alert(1)>x</details>\n\n## Улучшения"
    )
    search = w.searxng.routes[("GET", "/search")]

    def poisoned_search(request: Request) -> Response:
        response = search(request)
        for result in response.body["results"]:
            result["title"] += f" {PAYLOADS[1]}"
            result["content"] += f" {HOSTILE}"
        bad = {**response.body["results"][0], "url": BAD_URL, "title": f"Mixture of Tokens {PAYLOADS[0]}"}
        response.body["results"].append(bad)
        return response

    w.searxng.routes[("GET", "/search")] = poisoned_search
    read = w.reader.fallback

    def poisoned_page(request: Request) -> Response:
        response = read(request)
        if response.status == 200:
            response.body += f"\n\n{HOSTILE}\n"
        return response

    w.reader.fallback = poisoned_page


@pytest.fixture
def hostile_topic(alice: User, settings: object, tmp_path: object) -> Iterator[Topic]:
    settings.MEDIA_ROOT = tmp_path
    text = "# Mixture of Tokens\n\nMixture of Tokens mixes tokens across examples before the experts.\n"
    document, _ = accept_upload(alice, SimpleUploadedFile(HOSTILE_FILE_NAME, text.encode()))
    ingest(document.pk)
    with loopback_world(settings) as w:
        poison(w)
        yield research(alice, question=f"{TOPIC} {PAYLOADS[1]}", sources=Topic.Sources.BOTH)


def assert_inert(html: str, where: str) -> None:
    assert not active_content(html), (where, active_content(html))
    assert MARKER.search(html), f"{where}: the payloads were not shown at all"


def test_payloads_everywhere_are_shown_as_text(
    alice: User, alice_client: Client, hostile_topic: Topic
) -> None:
    topic = hostile_topic
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert "XSS-" in topic.report.markdown
    document = UploadedDocument.objects.get(owner=alice)
    assert "XSS-name" in document.original_name
    pages = {
        "topic page": reverse("topic_detail", args=[topic.pk]),
        "topic list": reverse("home"),
        "topic list search": f"{reverse('home')}?q={quote(PAYLOADS[1])}",
        "documents": reverse("document_list"),
        "document": reverse("document_detail", args=[document.pk]),
        "document search": f"{reverse('document_search')}?q={quote('Mixture ' + PAYLOADS[0])}",
    }
    for where, url in pages.items():
        response = alice_client.get(url)
        assert response.status_code == 200, where
        assert_inert(response.content.decode(), where)
    markdown = alice_client.get(reverse("report_markdown", args=[topic.pk]))
    assert markdown["Content-Type"].startswith("text/markdown")
    assert markdown["X-Content-Type-Options"] == "nosniff"  # a browser never reads it as HTML


def test_a_search_result_with_a_script_url_is_never_linked(alice: User, hostile_topic: Topic) -> None:
    assert not Hit.objects.filter(topic=hostile_topic, url__startswith="javascript:").exists()


def test_the_shared_report_shows_payloads_as_text(hostile_topic: Topic) -> None:
    _link, token = ShareLink.issue(hostile_topic)
    response = Client().get(reverse("shared_report", args=[token]))
    assert response.status_code == 200
    assert_inert(response.content.decode(), "shared report")


def test_the_admin_shows_payloads_as_text(hostile_topic: Topic) -> None:
    staff = User.objects.create_superuser("root", "root@example.com", "staff password 1")
    client = Client()
    client.force_login(staff)
    report = Report.objects.get(topic=hostile_topic)
    pages = [
        reverse("admin:research_topic_changelist"),
        reverse("admin:research_topic_change", args=[hostile_topic.pk]),
        reverse("admin:research_report_change", args=[report.pk]),
        reverse("admin:research_hit_changelist"),
        reverse("admin:research_runevent_changelist"),
        reverse("admin:retrieval_uploadeddocument_changelist"),
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert not active_content(html), (url, active_content(html))
        assert "XSS-" in html, url


def test_live_fragments_over_the_websocket_show_payloads_as_text(alice: User, hostile_topic: Topic) -> None:
    async def replay() -> str:
        path = f"/ws/topics/{hostile_topic.pk}/?since=0"
        comm = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
        comm.scope["user"] = alice
        connected, _ = await comm.connect()
        assert connected
        frames = []
        while not await comm.receive_nothing(timeout=1.0):
            frames.append(await comm.receive_from())
        await comm.disconnect()
        return "".join(frames)

    assert_inert(async_to_sync(replay)(), "websocket")
