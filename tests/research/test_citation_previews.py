"""Citation previews: the card behind each `[n]` of a report (research/views_citations.py) — the
source's title and site, the passage the sentence rests on with its words marked, the check's
verdict; for a private source a link that opens the document at that passage; the same card
behind a share link, for nobody else."""

from __future__ import annotations

import hashlib

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from research.models import Citation, Document, Report, ShareLink, Topic
from retrieval.models import Chunk, UploadedDocument
from tests.research.pipeline.test_citation_report import report_with_citations

pytestmark = pytest.mark.django_db


def card(client: Client, topic: Topic, index: int) -> str:
    response = client.get(reverse("citation_card", args=[topic.pk, index]))
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_each_citation_shows_its_own_passage_and_verdict(alice: User, alice_client: Client) -> None:
    topic = report_with_citations(alice)
    first = card(alice_client, topic, 0)
    assert "MoT" in first and "example.org" in first
    assert 'href="https://example.org/mot"' in first
    # The sentence's words are marked in the passage, by stem ("mixed" ~ "mixed", "tokens").
    assert "<mark>Tokens</mark> are <mark>mixed</mark> across examples." in first
    assert "The source supports this sentence" in first
    third = card(alice_client, topic, 2)
    assert "<mark>Routing</mark> weights are trained." in third
    assert "only in part" in third
    assert "does not support" in card(alice_client, topic, 1)


def test_a_report_without_checks_shows_the_source_text(alice: User, alice_client: Client) -> None:
    topic = report_with_citations(alice)
    Citation.objects.all().delete()
    page = card(alice_client, topic, 1)
    # No verdict to show; the passage is the source's own text, with the words it shares marked.
    assert "supports this sentence" not in page and "does not support" not in page
    assert "Tokens are mixed." in page.replace("<mark>", "").replace("</mark>", "")


def test_no_card_past_the_last_citation_or_for_someone_else(
    alice: User, alice_client: Client, bob_client: Client
) -> None:
    topic = report_with_citations(alice)
    assert alice_client.get(reverse("citation_card", args=[topic.pk, 3])).status_code == 404
    assert bob_client.get(reverse("citation_card", args=[topic.pk, 0])).status_code == 404
    assert Client().get(reverse("citation_card", args=[topic.pk, 0])).status_code == 302  # to sign in


def test_a_shared_report_has_the_cards_until_the_link_is_revoked(alice: User) -> None:
    topic = report_with_citations(alice)
    link, token = ShareLink.issue(topic)
    url = reverse("shared_citation_card", args=[token, 1])
    page = Client().get(url, HTTP_ACCEPT_LANGUAGE="ru").content.decode()
    assert "example.org" in page and "Источник не подтверждает это предложение" in page
    link.revoked_at = timezone.now()
    link.save()
    gone = Client().get(url)
    assert gone.status_code == 404 and b"Tokens are mixed" not in gone.content


def private_report(owner: User) -> tuple[Topic, UploadedDocument]:
    """A report citing a passage on page 3 of the owner's uploaded PDF."""
    uploaded = UploadedDocument.objects.create(
        owner=owner,
        file="uploads/x/report.pdf",
        original_name="Annual report.pdf",
        sha256=hashlib.sha256(b"annual").hexdigest(),
    )
    pages = [
        (1, "Contents and a foreword about the year."),
        (2, "Revenue grew by twelve percent to 4.1 million roubles in 2025."),
        (3, "Staff numbers rose from 40 to 52 employees over the year.\nNew offices opened in Kazan."),
    ]
    for position, (page, text) in enumerate(pages):
        Chunk.objects.create(
            document=uploaded, owner=owner, position=position, text=text,
            char_start=0, char_end=len(text), page=page,
        )  # fmt: skip
    topic = Topic.objects.create(
        owner=owner, question="How many staff?", status=Topic.Status.COMPLETED, finished_at=timezone.now()
    )
    document = Document.objects.create(
        topic=topic,
        uploaded_document=uploaded,
        title="Annual report.pdf, p. 3",
        text=pages[2][1],
        fetched_via=Document.FetchedVia.PRIVATE,
        pages=[3],
    )
    sources = [{"n": 1, "title": document.title, "url": "", "document_id": document.pk, "pages": [3]}]
    markdown = "# Staff\n\nThe company had 52 employees [1]."
    Report.objects.create(topic=topic, markdown=markdown, sources=sources)
    return topic, uploaded


def test_a_private_source_opens_its_document_at_the_cited_page(alice: User, alice_client: Client) -> None:
    topic, uploaded = private_report(alice)
    page = card(alice_client, topic, 0)
    assert "Annual report.pdf, p. 3" in page and "from my documents" in page and "page 3" in page
    assert "<mark>employees</mark>" in page
    opened = reverse("document_detail", args=[uploaded.pk]) + "?from=2#passage-2"
    assert f'href="{opened}"' in page.replace("&amp;", "&")
    document_page = alice_client.get(opened.split("#")[0]).content.decode()
    assert 'id="passage-2"' in document_page and "cited" in document_page
    assert "Kazan" in document_page and "foreword" not in document_page


def test_a_shared_private_source_has_no_link_into_the_owners_documents(alice: User) -> None:
    topic, _uploaded = private_report(alice)
    _link, token = ShareLink.issue(topic)
    page = Client().get(reverse("shared_citation_card", args=[token, 0])).content.decode()
    assert "<mark>52</mark> <mark>employees</mark>" in page
    assert "/documents/" not in page


def test_a_forged_source_neither_breaks_the_card_nor_reaches_another_topic(
    alice: User, alice_client: Client, bob: User
) -> None:
    """An imported report's sources may hold anything: odd passages and pages still give a card,
    and a document id of another topic (bob's) is not shown."""
    topic = report_with_citations(alice)
    Citation.objects.all().delete()
    theirs = Document.objects.create(
        topic=Topic.objects.create(owner=bob, question="Bob's"), title="Bob's notes",
        text="Bob's secret plans for the moon.", fetched_via="reader",
    )  # fmt: skip
    report = topic.report
    report.sources = [{**report.sources[0], "passages": [{"start": "x"}], "pages": "p. 3"}]
    report.save()
    assert "Tokens are mixed." in card(alice_client, topic, 0).replace("<mark>", "").replace("</mark>", "")
    report.sources = [{"n": 1, "title": "Notes", "url": "", "document_id": theirs.pk, "passages": [5]}]
    report.save()
    assert "secret plans" not in card(alice_client, topic, 0)
