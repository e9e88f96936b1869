"""Notes on passages (retrieval/notes.py): on a passage of one's document and on the passage a
report's citation rests on; listed, edited, deleted; found again by document search with their
passage; the owner's only, page and API; text shown escaped."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from research.models import Citation, FollowUp, Report, ShareLink, Topic
from retrieval.ingest import ingest
from retrieval.models import Chunk, PassageNote, UploadedDocument
from retrieval.uploads import accept_upload

pytestmark = pytest.mark.django_db

BODY = (
    "# Quokkas\n\nQuokka populations on Rottnest Island doubled between 2010 and 2020, "
    "after foxes were removed from the island.\n"
)
HOSTILE = '<script>alert("x")</script> & <b>bold</b>'


@pytest.fixture
def document(alice: User, settings: Any, tmp_path: Any) -> UploadedDocument:
    settings.MEDIA_ROOT = tmp_path
    upload, _created = accept_upload(alice, SimpleUploadedFile("quokkas.md", BODY.encode()))
    ingest(upload.pk)
    upload.refresh_from_db()
    assert upload.status == UploadedDocument.Status.READY, upload.error
    return upload


@pytest.fixture
def cited(alice: User) -> tuple[Topic, Citation]:
    topic = Topic.objects.create(owner=alice, question="How are the quokkas?", status=Topic.Status.COMPLETED)
    sources = [{"n": 1, "title": "Island survey", "url": "https://survey.example/", "document_id": None}]
    report = Report.objects.create(topic=topic, markdown="Foxes were removed [1].\n", sources=sources)
    citation = Citation.objects.create(
        report=report,
        sentence_index=0,
        sentence="Foxes were removed.",
        n=1,
        verdict=Citation.Verdict.SUPPORTED,
        local_verdict=Citation.Verdict.SUPPORTED,
        method=Citation.Method.LOCAL,
        score=0.9,
        passage="The last foxes were removed from the island in 2016 by the rangers.",
    )
    return topic, citation


def test_a_note_on_a_passage_of_my_document_is_found_again(
    alice: User, alice_client: Client, document: UploadedDocument
) -> None:
    chunk = Chunk.objects.get(document=document)
    page = alice_client.get(reverse("document_detail", args=[document.pk])).content.decode()
    add_url = reverse("note_add", args=[document.pk])
    assert f'action="{add_url}"' in page and f'name="chunk" value="{chunk.pk}"' in page
    response = alice_client.post(
        add_url, {"chunk": chunk.pk, "text": "Check the marsupial census", "next": "/x"}
    )
    assert response.status_code == 302
    note = PassageNote.objects.get(owner=alice)
    assert (note.document_id, note.chunk_id, note.passage) == (document.pk, chunk.pk, chunk.text)
    # By the note's own words (stemmed: "censuses" finds "census")…
    found = alice_client.get(reverse("document_search"), {"q": "marsupial censuses"}).content.decode()
    assert "1 of my notes" in found and "Check the marsupial census" in found
    # …and beside its passage when the passage is found.
    found = alice_client.get(
        reverse("document_search"), {"q": "quokka populations Rottnest"}
    ).content.decode()
    assert re.search(r"My note:</strong> Check the marsupial census", found)
    assert (
        "Check the marsupial census"
        in alice_client.get(reverse("document_detail", args=[document.pk])).content.decode()
    )


def test_a_note_on_a_cited_passage_from_the_reports_card(
    alice: User, alice_client: Client, cited: tuple[Topic, Citation]
) -> None:
    topic, citation = cited
    card = alice_client.get(reverse("citation_card", args=[topic.pk, 0])).content.decode()
    note_url = reverse("citation_note", args=[topic.pk, 0])
    assert f'action="{note_url}"' in card
    response = alice_client.post(note_url, {"text": "Ask the rangers for the 2016 cull report"})
    assert response.status_code == 302 and response["Location"].endswith(f"/topics/{topic.pk}/#source-1")
    note = PassageNote.objects.get(owner=alice)
    assert note.citation_id == citation.pk and note.passage == citation.passage
    card = alice_client.get(reverse("citation_card", args=[topic.pk, 0])).content.decode()
    assert "Ask the rangers for the 2016 cull report" in card
    # Document search finds it by the passage's words, even without any document.
    found = alice_client.get(reverse("document_search"), {"q": "foxes removed"}).content.decode()
    assert "Ask the rangers" in found and f"/topics/{topic.pk}/#source-1" in found
    # A share link's card shows neither the notes nor the form.
    _link, token = ShareLink.issue(topic)
    shared = Client().get(reverse("shared_citation_card", args=[token, 0])).content.decode()
    assert "Ask the rangers" not in shared and note_url not in shared


def test_notes_are_listed_edited_and_deleted(
    alice: User, alice_client: Client, cited: tuple[Topic, Citation]
) -> None:
    topic, _citation = cited
    alice_client.post(reverse("citation_note", args=[topic.pk, 0]), {"text": "first words"})
    note = PassageNote.objects.get()
    listing = alice_client.get(reverse("note_list")).content.decode()
    assert "first words" in listing and reverse("note_edit", args=[note.pk]) in listing
    alice_client.post(reverse("note_edit", args=[note.pk]), {"text": "second words"})
    note.refresh_from_db()
    assert note.text == "second words"
    alice_client.post(reverse("note_edit", args=[note.pk]), {"text": "   "})  # blank: refused, kept
    note.refresh_from_db()
    assert note.text == "second words"
    alice_client.post(reverse("note_edit", args=[note.pk]), {"text": "x" * 2001})
    note.refresh_from_db()
    assert note.text == "second words"
    alice_client.post(reverse("note_delete", args=[note.pk]))
    assert not PassageNote.objects.exists()


def test_a_note_is_shown_escaped_everywhere(
    alice: User, alice_client: Client, cited: tuple[Topic, Citation]
) -> None:
    topic, _citation = cited
    alice_client.post(reverse("citation_note", args=[topic.pk, 0]), {"text": f"foxes {HOSTILE}"})
    pages = [
        alice_client.get(reverse("note_list")),
        alice_client.get(reverse("document_search"), {"q": "foxes"}),
        alice_client.get(reverse("citation_card", args=[topic.pk, 0])),
    ]
    for page in pages:
        text = page.content.decode()
        assert "&lt;script&gt;" in text and '<script>alert("x")' not in text and "<b>bold</b>" not in text


def test_another_users_notes_are_out_of_reach(
    alice: User, bob: User, bob_client: Client, cited: tuple[Topic, Citation]
) -> None:
    topic, citation = cited
    note = PassageNote.objects.create(owner=alice, text="foxes secret", passage="p", citation=citation)
    assert bob_client.post(reverse("citation_note", args=[topic.pk, 0]), {"text": "mine"}).status_code == 404
    assert bob_client.post(reverse("note_edit", args=[note.pk]), {"text": "mine"}).status_code == 404
    assert bob_client.post(reverse("note_delete", args=[note.pk])).status_code == 404
    assert "foxes secret" not in bob_client.get(reverse("document_search"), {"q": "foxes"}).content.decode()
    assert "foxes secret" not in bob_client.get(reverse("note_list")).content.decode()
    note.refresh_from_db()
    assert note.text == "foxes secret" and PassageNote.objects.count() == 1


def test_notes_over_the_api(
    alice: User, bob: User, alice_client: Client, bob_client: Client, document: UploadedDocument, cited: Any
) -> None:
    _topic, citation = cited
    chunk = Chunk.objects.get(document=document)
    report = alice_client.get(f"/api/topics/{_topic.pk}/report").json()
    assert report["citations"][0]["id"] == citation.pk
    made = alice_client.post(
        "/api/notes", {"chunk_id": chunk.pk, "text": "marsupial census"}, content_type="application/json"
    )
    assert made.status_code == 201 and made.json()["where"]["document_id"] == document.pk
    on_citation = alice_client.post(
        "/api/notes", {"citation_id": citation.pk, "text": "rangers"}, content_type="application/json"
    )
    assert on_citation.status_code == 201 and on_citation.json()["where"]["citation_id"] == citation.pk
    both = {"chunk_id": chunk.pk, "citation_id": citation.pk, "text": "x"}
    assert alice_client.post("/api/notes", both, content_type="application/json").status_code == 422
    theirs = {"chunk_id": chunk.pk, "text": "x"}
    assert bob_client.post("/api/notes", theirs, content_type="application/json").status_code == 404
    assert [n["text"] for n in alice_client.get("/api/notes").json()] == ["rangers", "marsupial census"]
    assert bob_client.get("/api/notes").json() == []
    note_id = made.json()["id"]
    edited = alice_client.patch(
        f"/api/notes/{note_id}", {"text": "koala census"}, content_type="application/json"
    )
    assert edited.status_code == 200 and edited.json()["text"] == "koala census"
    assert bob_client.delete(f"/api/notes/{note_id}").status_code == 404
    found = alice_client.get("/api/search", {"q": "quokka populations Rottnest"}).json()
    assert found["results"][0]["notes"][0]["text"] == "koala census"
    assert [n["text"] for n in alice_client.get("/api/search", {"q": "koala"}).json()["notes"]] == [
        "koala census"
    ]
    assert alice_client.delete(f"/api/notes/{note_id}").status_code == 204
    assert PassageNote.objects.filter(owner=alice).count() == 1


@pytest.fixture
def answered(cited: tuple[Topic, Citation]) -> FollowUp:
    """A follow-up answered with a new web source [2], its citation checked (no Citation row: a
    follow-up keeps its check in `citations`)."""
    topic, _citation = cited
    return FollowUp.objects.create(
        topic=topic,
        position=1,
        question="Did the wallabies come back?",
        status=FollowUp.Status.COMPLETED,
        searched=True,
        answer="Wallabies returned to the western bays [2].\n",
        sources=[{"n": 2, "title": "Wallaby count", "url": "https://wallaby.example/", "document_id": None}],
        citations=[
            {
                "sentence_index": 0,
                "sentence": "Wallabies returned to the western bays.",
                "n": 2,
                "verdict": "supported",
                "local_verdict": "supported",
                "method": "local",
                "score": 0.8,
                "coverage": 0.9,
                "similarity": None,
                "passage": "Tammar wallabies were seen again in the western bays after the baiting ended.",
                "note": "",
            }
        ],
    )


def test_a_note_on_a_follow_ups_cited_passage_is_found_again(
    alice: User, alice_client: Client, bob_client: Client, answered: FollowUp
) -> None:
    topic = answered.topic
    card_url = reverse("followup_citation_card", args=[topic.pk, answered.pk, 0])
    note_url = reverse("followup_citation_note", args=[topic.pk, answered.pk, 0])
    assert f'action="{note_url}"' in alice_client.get(card_url).content.decode()
    assert bob_client.post(note_url, {"text": "mine"}).status_code == 404
    response = alice_client.post(note_url, {"text": "Ask about the marsupial baiting schedule"})
    assert response.status_code == 302
    assert response["Location"].endswith(f"/topics/{topic.pk}/#followup-{answered.pk}")
    note = PassageNote.objects.get(owner=alice)
    assert (note.followup_id, note.sentence_index, note.n) == (answered.pk, 0, 2)
    assert note.passage.startswith("Tammar wallabies were seen again")
    assert "Ask about the marsupial baiting schedule" in alice_client.get(card_url).content.decode()
    # Found by its words and by its passage's, linked to the answer it was made on.
    for query in ("baiting schedules", "tammar wallabies"):
        found = alice_client.get(reverse("document_search"), {"q": query}).content.decode()
        assert "Ask about the marsupial baiting schedule" in found
        assert f"/topics/{topic.pk}/#followup-{answered.pk}" in found
    listing = alice_client.get(reverse("note_list")).content.decode()
    assert "Did the wallabies come back?" in listing and "[2]" in listing
    # A shared link's card shows neither the note nor the form.
    _link, token = ShareLink.issue(topic)
    shared = Client().get(reverse("shared_followup_citation_card", args=[token, answered.pk, 0]))
    assert "marsupial baiting" not in shared.content.decode() and note_url not in shared.content.decode()
    # Deleting the topic takes the follow-up's notes with it.
    topic.delete()
    assert not PassageNote.objects.exists()


def test_a_note_on_a_follow_ups_citation_over_the_api(
    alice: User, alice_client: Client, bob_client: Client, answered: FollowUp
) -> None:
    topic = answered.topic
    listed = alice_client.get(f"/api/topics/{topic.pk}/followups").json()
    assert listed[0]["citations"][0]["id"] is None  # no Citation row: named by its place
    body = {"followup_id": answered.pk, "citation_index": 0, "text": "baiting records"}
    assert bob_client.post("/api/notes", body, content_type="application/json").status_code == 404
    made = alice_client.post("/api/notes", body, content_type="application/json")
    assert made.status_code == 201, made.content
    where = made.json()["where"]
    assert (where["kind"], where["followup_id"], where["topic_id"]) == ("followup", answered.pk, topic.pk)
    assert made.json()["passage"].startswith("Tammar wallabies")
    beyond = {**body, "citation_index": 1}
    assert alice_client.post("/api/notes", beyond, content_type="application/json").status_code == 404
    unnamed = {"followup_id": answered.pk, "text": "x"}
    assert alice_client.post("/api/notes", unnamed, content_type="application/json").status_code == 422
    found = alice_client.get("/api/search", {"q": "wallabies"}).json()["notes"]
    assert [note["text"] for note in found] == ["baiting records"]
