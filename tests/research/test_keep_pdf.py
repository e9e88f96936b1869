"""*Add to my documents* on a source that is a PDF, or whose page names its PDF, stores the PDF
itself (research/keep.py, fetched through mindsearch/clients/fetch.py): read by the document
reader, found by document search, with its address and fetch date; the page's text otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research.models import Document, Topic
from retrieval.ingest import ingest
from retrieval.models import UploadedDocument
from tests.retrieval.test_parsing import pdf_bytes
from tests.support.fakes import FakeService, Response

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("media_root")]

PAPER = pdf_bytes(["Quokka populations on Rottnest Island doubled between 2010 and 2020."])
LANDING = (
    '<html><head><title>Quokkas</title><meta name="citation_pdf_url" content="/files/quokka.pdf">'
    "</head><body>Abstract only.</body></html>"
)
PLAIN = "<html><head><title>A blog</title></head><body>No paper here.</body></html>"


@pytest.fixture
def web(settings: Any) -> Any:
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = True  # the web is on loopback
    routes = {
        ("GET", "/files/quokka.pdf"): lambda request: Response(
            200, PAPER, headers={"Content-Type": "application/pdf"}
        ),
        ("GET", "/download"): lambda request: Response(
            200, PAPER, headers={"Content-Type": "application/octet-stream"}
        ),
        ("GET", "/abs/quokka"): lambda request: Response(200, LANDING, headers={"Content-Type": "text/html"}),
        ("GET", "/blog"): lambda request: Response(200, PLAIN, headers={"Content-Type": "text/html"}),
        ("GET", "/old.pdf"): lambda request: Response(301, headers={"Location": "/files/quokka.pdf"}),
    }
    with FakeService(routes) as service:
        yield service


def source(owner: User, url: str, title: str = "Quokka census") -> tuple[Topic, Document]:
    topic = Topic.objects.create(owner=owner, question="quokkas", status=Topic.Status.COMPLETED)
    document = Document.objects.create(
        topic=topic, url=url, title=title, text="What the reader made of it.", fetched_via="reader"
    )
    return topic, document


def keep(client: Client, topic: Topic, document: Document) -> UploadedDocument:
    response = client.post(
        reverse("source_keep", args=[topic.pk, document.pk]), headers={"HX-Request": "true"}
    )
    assert response.status_code == 200, response.content.decode()
    return UploadedDocument.objects.get(owner=topic.owner)


@pytest.mark.parametrize("path", ["files/quokka.pdf", "abs/quokka", "old.pdf", "download"])
def test_the_pdf_itself_is_kept_read_and_found(
    alice: User, alice_client: Client, web: Any, path: str
) -> None:
    topic, document = source(alice, f"{web.url}{path}")
    kept = keep(alice_client, topic, document)
    assert kept.original_name == "Quokka census.pdf" and bytes(kept.file.read()) == PAPER
    assert kept.source_url in (f"{web.url}files/quokka.pdf", f"{web.url}download")
    assert kept.fetched_at is not None and kept.fetched_at >= document.created_at
    ingest(kept.pk)
    kept.refresh_from_db()
    assert kept.status == UploadedDocument.Status.READY and kept.page_count == 1, kept.error
    found = alice_client.get("/api/search", {"q": "quokka populations Rottnest Island"}).json()
    assert found["results"][0]["document_name"] == "Quokka census.pdf", found


def test_a_page_without_a_pdf_is_kept_as_the_reader_got_it(
    alice: User, alice_client: Client, web: Any
) -> None:
    topic, document = source(alice, f"{web.url}blog", title="A blog")
    kept = keep(alice_client, topic, document)
    assert kept.original_name == "A blog.md" and b"What the reader made of it." in kept.file.read()


def test_a_pdf_over_the_upload_limit_is_not_fetched_whole(
    alice: User, alice_client: Client, web: Any, settings: Any
) -> None:
    settings.UPLOAD_MAX_BYTES = len(PAPER) - 1
    topic, document = source(alice, f"{web.url}files/quokka.pdf")
    assert keep(alice_client, topic, document).original_name == "Quokka census.md"


def test_a_private_address_is_never_fetched(
    alice: User, alice_client: Client, web: Any, settings: Any
) -> None:
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False
    topic, document = source(alice, f"{web.url}files/quokka.pdf")
    assert keep(alice_client, topic, document).original_name == "Quokka census.md"
    assert not web.requests


def test_the_quota_applies_to_a_kept_pdf(alice: User, alice_client: Client, web: Any, settings: Any) -> None:
    settings.UPLOAD_MAX_STORAGE_BYTES = len(PAPER) - 1
    topic, document = source(alice, f"{web.url}files/quokka.pdf")
    response = alice_client.post(
        reverse("source_keep", args=[topic.pk, document.pk]), headers={"HX-Request": "true"}
    )
    assert response.status_code == 400 and not UploadedDocument.objects.exists()


def test_the_api_keeps_a_follow_ups_pdf_source(alice: User, alice_client: Client, web: Any) -> None:
    topic, _page = source(alice, f"{web.url}blog")
    later = Document.objects.create(
        topic=topic, url=f"{web.url}abs/quokka", title="Quokka census", text="t", fetched_via="reader"
    )
    response = alice_client.post(f"/api/topics/{topic.pk}/sources/{later.pk}/keep")
    assert response.status_code == 201, response.content
    assert response.json()["source_url"] == f"{web.url}files/quokka.pdf"
