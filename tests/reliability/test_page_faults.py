"""Fault matrix, reader and page rows: the reader refusing or hanging, and pages that are huge,
binary, redirect in loops or redirect to a private address.

A reader failure falls back to fetching the page directly; a page that cannot be read either way
is a warning on the topic and gives its place to the next-best hit; the topic completes.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from mindsearch.clients import reader as reader_client
from research.models import Document, Hit, Topic
from research.pipeline.stages import read
from tests.reliability.runs import research, warnings_of
from tests.support.fakes import Fault, Request, Response, Route, redirect
from tests.support.world import World

pytestmark = pytest.mark.django_db


def documents_by_via(topic: Topic) -> set[str]:
    return set(Document.objects.filter(topic=topic).values_list("fetched_via", flat=True))


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (Response(402, {"code": 402, "message": "Insufficient balance"}), "quota is used up (HTTP 402)"),
        (Response(429, {"code": 429, "message": "Rate limit"}), "rate-limiting us (HTTP 429)"),
        (Response(502, "Bad Gateway"), "reader failed (HTTP 502)"),
    ],
)
def test_a_refusing_reader_falls_back_to_direct_fetching(
    alice: User, loopback: World, answer: Response, reason: str
) -> None:
    loopback.reader.fallback = lambda request: answer
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert documents_by_via(topic) == {"direct"}
    assert len(loopback.web.requests) == Document.objects.filter(topic=topic).count()
    assert topic.report.sources


def test_a_hanging_reader_falls_back_to_direct_fetching(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_client, "TIMEOUT_SECONDS", 0.3)
    loopback.reader.latency = 1.5
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert documents_by_via(topic) == {"direct"}


def test_one_slow_reader_answer_only_costs_that_page_a_direct_fetch(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_client, "TIMEOUT_SECONDS", 1.0)
    loopback.reader.inject(Fault.hang(4.0))
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    hung = loopback.reader.requests[0].raw_path.removeprefix("/")
    assert Document.objects.get(topic=topic, url=hung).fetched_via == "direct"
    assert "reader" in documents_by_via(topic)


# --- Hostile pages, read directly (the reader is down) ----------------------------------------

BIG = 6_000_000


def hostile_pages(w: World) -> dict[str, tuple[Route, str]]:
    """slug → (route, the reason the warning must give); the three best pages of the world."""
    huge = Response(200, b"<p>" + b"a" * BIG + b"</p>", {"Content-Type": "text/html"}, close_delimited=True)
    binary = Response(200, b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64, {"Content-Type": "image/png"})
    return {
        "mot-paper": (lambda request: huge, "larger than 5,000,000 bytes"),
        "mot-uses": (lambda request: binary, "not a web page: image/png"),
        "mot-improve": (redirect("/pages/mot-improve-loop"), "redirect loop"),
        "mot-improve-loop": (redirect("/pages/mot-improve"), ""),
        "mot-blog": (redirect("http://169.254.169.254/latest/meta-data/iam/"), "169.254.169.254"),
        "mot-apps": (redirect("http://[::ffff:169.254.169.254]/latest/"), "non-public address"),
    }


def test_huge_binary_looping_and_private_redirecting_pages_give_way_to_the_next_best(
    alice: User, loopback: World
) -> None:
    loopback.reader.fallback = lambda request: Response(502, "Bad Gateway")
    pages = hostile_pages(loopback)
    for slug, (route, _reason) in pages.items():
        loopback.web.routes[("GET", f"/pages/{slug}")] = route
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    warnings = warnings_of(topic, "read")
    for slug, (_route, reason) in pages.items():
        if not reason:
            continue
        hit = Hit.objects.get(topic=topic, url__contains=f"/pages/{slug}?")
        assert not Document.objects.filter(hit=hit).exists(), slug
        assert any(hit.url in w and reason in w for w in warnings), (slug, warnings)
    # The next-best pages were read in their place, and the report cites only those.
    read_urls = set(Document.objects.filter(topic=topic).values_list("url", flat=True))
    assert read_urls and all(f"/pages/{slug}?" not in url for url in read_urls for slug in pages)
    assert {source["url"] for source in topic.report.sources} <= read_urls


def test_a_huge_page_from_the_reader_is_kept_up_to_the_document_cap(alice: User, loopback: World) -> None:
    answer = loopback.reader.fallback
    assert answer is not None

    def huge_first_page(request: Request) -> Response:
        response = answer(request)
        if "mot-paper" in request.raw_path:
            assert isinstance(response.body, str), response  # the reader answers Markdown
            response.body += "Mixture of Tokens. " * 200_000  # 3.8 MB of Markdown
        return response

    loopback.reader.fallback = huge_first_page
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    document = Document.objects.get(topic=topic, url__contains="mot-paper")
    assert len(document.text) == read.MAX_DOCUMENT_CHARS
