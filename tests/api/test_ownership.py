"""The ownership matrix: alice owns a topic, its plan, report, share link and a document; bob
gets 404 on every operation that takes one of their ids (the same as an id that does not
exist), nothing of alice's changes, and an anonymous caller gets 401 everywhere."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.contrib.auth.models import User

from mindsearch.api import api
from research import images, workflow
from research.models import Document, FollowUp, ShareLink, Topic
from retrieval.models import PassageNote, UploadedDocument
from tests.api.conftest import ApiClient, awaiting, completed
from tests.support.domain_world import picture

pytestmark = pytest.mark.django_db

# (method, path, body) with {topic}, {link}, {document} and {page} filled in from alice's rows.
# (method, path, JSON body)
Operation = tuple[str, str, dict[str, Any] | None]
ID_OPERATIONS: list[Operation] = [
    ("GET", "/api/topics/{topic}", None),
    ("DELETE", "/api/topics/{topic}", None),
    ("POST", "/api/topics/{topic}/cancel", None),
    ("POST", "/api/topics/{topic}/rerun", None),
    ("GET", "/api/topics/{topic}/plan", None),
    ("PUT", "/api/topics/{topic}/plan", {"subqueries": [{"text": "Bob's plan"}]}),
    ("POST", "/api/topics/{topic}/plan/approve", None),
    ("GET", "/api/topics/{topic}/events", None),
    ("GET", "/api/topics/{topic}/report", None),
    ("GET", "/api/topics/{topic}/versions", None),
    ("POST", "/api/topics/{topic}/sources/{page}/keep", None),
    ("GET", "/api/topics/{topic}/report.md", None),
    ("GET", "/api/topics/{topic}/sources.bib", None),
    ("GET", "/api/topics/{topic}/sources.ris", None),
    ("GET", "/api/topics/{topic}/image", None),
    ("GET", "/api/topics/{topic}/followups", None),
    ("POST", "/api/topics/{topic}/followups", {"question": "Bob's follow-up?"}),
    ("GET", "/api/topics/{topic}/share-links", None),
    ("POST", "/api/topics/{topic}/share-links", {}),
    ("POST", "/api/topics/{topic}/share-links/{link}/revoke", None),
    ("GET", "/api/documents/{document}", None),
    ("DELETE", "/api/documents/{document}", None),
    ("PATCH", "/api/notes/{note}", {"text": "Bob's note"}),
    ("DELETE", "/api/notes/{note}", None),
]
OTHER_OPERATIONS: list[Operation] = [
    ("POST", "/api/topics", {"question": "What is Mixture of Tokens?"}),
    ("GET", "/api/topics", None),
    ("GET", "/api/documents", None),
    ("POST", "/api/documents", None),
    ("GET", "/api/search?q=tokens", None),
    ("GET", "/api/notes", None),
    ("POST", "/api/notes", {"text": "A note", "chunk_id": 1}),
    ("GET", "/api/cache/stats", None),
]


@pytest.fixture
def owned(alice: User) -> dict[str, int]:
    topic = completed(alice)
    workflow.save_image(topic, images.prepare(picture((220, 30, 30))))
    link, _token = ShareLink.issue(topic)
    sha256 = hashlib.sha256(b"alice's notes").hexdigest()
    document = UploadedDocument.objects.create(
        owner=alice, file=f"uploads/{alice.pk}/{sha256}", original_name="notes.txt", sha256=sha256
    )
    page = Document.objects.create(
        topic=topic, title="A page", url="https://a.example/", text="Text.", fetched_via="reader"
    )
    note = PassageNote.objects.create(owner=alice, text="Alice's note", passage="Text.", document=document)
    return {"topic": topic.pk, "link": link.pk, "document": document.pk, "page": page.pk, "note": note.pk}


def test_the_matrix_covers_every_operation() -> None:
    schema = api.get_openapi_schema()
    declared = {(method.upper(), path) for path, ops in schema["paths"].items() for method in ops}
    covered = {(method, path.split("?")[0]) for method, path, _ in ID_OPERATIONS + OTHER_OPERATIONS}
    normalised = {
        (
            method,
            path.replace("{topic}", "{topic_id}")
            .replace("{link}", "{link_id}")
            .replace("{document}", "{document_id}")
            .replace("{page}", "{document_id}")
            .replace("{note}", "{note_id}"),
        )
        for method, path in covered
    }
    assert normalised == declared


@pytest.mark.parametrize(("method", "path", "body"), ID_OPERATIONS)
def test_bob_gets_404_on_alices_ids(
    bob_api: ApiClient, owned: dict[str, int], method: str, path: str, body: dict | None
) -> None:
    response = bob_api.request(method, path.format(**owned), body)
    assert response.status_code == 404, response.content
    assert "not found" in response.json()["detail"].lower()
    topic = Topic.objects.get(pk=owned["topic"])
    assert topic.status == Topic.Status.COMPLETED and topic.subqueries.count() == 3
    assert ShareLink.objects.get(pk=owned["link"]).revoked_at is None
    assert ShareLink.objects.count() == 1
    assert not FollowUp.objects.exists()
    assert UploadedDocument.objects.filter(pk=owned["document"]).exists()
    assert PassageNote.objects.get(pk=owned["note"]).text == "Alice's note"
    assert Topic.objects.count() == 1


@pytest.mark.parametrize(("method", "path", "body"), ID_OPERATIONS + OTHER_OPERATIONS)
def test_anonymous_gets_401_everywhere(
    anonymous_api: ApiClient, owned: dict[str, int], method: str, path: str, body: dict | None
) -> None:
    response = anonymous_api.request(method, path.format(**owned), body)
    assert response.status_code == 401, response.content
    assert Topic.objects.count() == 1 and UploadedDocument.objects.count() == 1


def test_bobs_lists_and_search_do_not_show_alices_rows(bob_api: ApiClient, owned: dict[str, int]) -> None:
    assert bob_api.get("/api/topics").json() == {"count": 0, "limit": 25, "offset": 0, "items": []}
    assert bob_api.get("/api/documents").json()["count"] == 0
    assert bob_api.get("/api/search?q=notes").json()["results"] == []


def test_bob_cannot_pull_alices_sub_queries_into_his_plan(bob_api: ApiClient, bob: User, alice: User) -> None:
    alices = completed(alice).subqueries.first()
    assert alices is not None
    bobs = awaiting(bob)
    body = {"subqueries": [{"id": alices.pk, "text": "Taken over"}]}
    response = bob_api.put(f"/api/topics/{bobs.pk}/plan", body)
    assert response.status_code == 404
    alices.refresh_from_db()
    assert alices.text == "What is it?" and alices.topic.owner == alice
    assert bobs.subqueries.count() == 3
