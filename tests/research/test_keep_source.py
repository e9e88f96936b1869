"""*Add to my documents* on a report's web source (research/keep.py): the page as the reader got
it becomes an indexed document, found by document search and cited by its name next time."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research.models import Document, FollowUp, Report, ShareLink, Topic
from research.pipeline.run import plan_topic, run_topic
from retrieval.ingest import ingest
from retrieval.models import UploadedDocument
from tests.research.pipeline.test_private_sources import CRITERIA
from tests.support.world import TOPIC, World

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("media_root")]

KEPT_TITLE = "Where Mixture of Tokens is used: language models and beyond"


def research(owner: User, sources: str = Topic.Sources.WEB) -> Topic:
    topic = Topic.objects.create(owner=owner, question=TOPIC, sources=sources, auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED, topic.error
    return topic


def judge_kept_pages_relevant(world: World, name: str) -> None:
    """The scripted model scores the kept page's passages 10, as it scores the page on the web."""
    web_score = world.script.score

    def score(user: str) -> str:
        listing = user.split("<<<ДАННЫЕ", 1)[-1]
        titles = re.findall(r"^\d+\. Заголовок: (.*)$", listing, re.M)
        if not any(title.startswith(name) for title in titles):
            return web_score(user)
        rows = [
            {"заголовок": title, **dict.fromkeys(CRITERIA, 10 if title.startswith(name) else 1)}
            for title in titles
        ]
        return json.dumps(rows, ensure_ascii=False)

    world.script.score = score  # type: ignore[method-assign]


def test_a_kept_page_is_found_by_document_search_and_cited_by_its_name(
    alice: User, alice_client: Client, loopback: World
) -> None:
    topic = research(alice)
    page = Document.objects.get(topic=topic, title=KEPT_TITLE)
    keep_url = reverse("source_keep", args=[topic.pk, page.pk])
    assert keep_url in alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()

    response = alice_client.post(keep_url, headers={"HX-Request": "true"})
    assert response.status_code == 200 and "Added to your documents" in response.content.decode()
    kept = UploadedDocument.objects.get(owner=alice)
    assert kept.original_name == f"{KEPT_TITLE}.md"
    assert (kept.source_url, kept.fetched_at) == (page.url, page.created_at)
    again = alice_client.post(keep_url, headers={"HX-Request": "true"})
    assert "Already in your documents" in again.content.decode()
    assert UploadedDocument.objects.filter(owner=alice).count() == 1

    ingest(kept.pk)
    kept.refresh_from_db()
    assert kept.status == UploadedDocument.Status.READY, kept.error
    found = alice_client.get("/api/search", {"q": "large language model pretraining reduces training cost"})
    assert found.json()["results"][0]["document_name"] == kept.original_name, found.json()
    described = alice_client.get(f"/api/documents/{kept.pk}").json()
    assert described["source_url"] == page.url and described["fetched_at"]

    judge_kept_pages_relevant(loopback, kept.original_name)
    later = research(alice, Topic.Sources.DOCS)
    titles = [source["title"] for source in later.report.sources]
    assert any(title.startswith(kept.original_name) for title in titles), titles
    assert kept.original_name in later.report.markdown


def test_only_web_pages_can_be_kept_and_only_by_their_owner(
    alice: User, bob: User, alice_client: Client, bob_client: Client
) -> None:
    topic = Topic.objects.create(owner=alice, question="q", status=Topic.Status.COMPLETED)
    web = Document.objects.create(
        topic=topic, title="A page", url="https://a.example/page", text="Text.", fetched_via="reader"
    )
    private = Document.objects.create(
        topic=topic, title="memo.pdf, p. 2", text="Text.", fetched_via="private"
    )
    assert bob_client.post(reverse("source_keep", args=[topic.pk, web.pk])).status_code == 404
    refused = alice_client.post(
        reverse("source_keep", args=[topic.pk, private.pk]), headers={"HX-Request": "1"}
    )
    assert refused.status_code == 400 and "Only a web page" in refused.content.decode()
    made = alice_client.post(f"/api/topics/{topic.pk}/sources/{web.pk}/keep")
    assert made.status_code == 201 and made.json()["name"] == "A page.md"
    assert alice_client.post(f"/api/topics/{topic.pk}/sources/{web.pk}/keep").status_code == 200
    assert bob_client.post(f"/api/topics/{topic.pk}/sources/{web.pk}/keep").status_code == 404
    assert not UploadedDocument.objects.filter(owner=bob).exists()


def test_a_follow_ups_new_web_source_is_kept_from_the_thread(alice: User, alice_client: Client) -> None:
    topic = Topic.objects.create(owner=alice, question="q", status=Topic.Status.COMPLETED)
    sources = [{"n": 1, "title": "Old", "url": "https://a.example/old", "document_id": None}]
    Report.objects.create(topic=topic, markdown="Old fact [1].\n", sources=sources)
    page = Document.objects.create(
        topic=topic,
        title="Puffin burrows",
        url="https://b.example/puffins",
        text="Puffins nest.",
        fetched_via="reader",
    )
    new = {"n": 2, "title": page.title, "url": page.url, "document_id": page.pk, "fetched_via": "reader"}
    FollowUp.objects.create(
        topic=topic,
        position=1,
        question="Where do puffins nest?",
        status=FollowUp.Status.COMPLETED,
        searched=True,
        answer="Puffins nest in burrows [2].\n",
        sources=[new],
    )
    keep_url = reverse("source_keep", args=[topic.pk, page.pk])
    thread = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    new_sources = thread.split('class="sources followup-sources"', 1)[1].split("</ol>", 1)[0]
    assert f'action="{keep_url}"' in new_sources
    _link, token = ShareLink.issue(topic)
    assert keep_url not in Client().get(reverse("shared_report", args=[token])).content.decode()
    kept = alice_client.post(keep_url, headers={"HX-Request": "1"})
    assert kept.status_code == 200 and "Added to your documents" in kept.content.decode()
    upload = UploadedDocument.objects.get(owner=alice)
    assert upload.original_name == "Puffin burrows.md" and upload.source_url == page.url
