"""My documents over the API: upload (the same checks as the page), list, status, delete, and
search over what was indexed (the worker's ingest runs in-process here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django_q.models import OrmQ

from retrieval.ingest import ingest
from retrieval.models import Chunk, UploadedDocument
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db

NOTES = b"# Quokkas\n\nQuokkas live on Rottnest Island and smile at visitors.\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


@pytest.fixture(autouse=True)
def media_root(settings: object, tmp_path: Path) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def upload(api: ApiClient, name: str, data: bytes) -> object:
    return api.client.post("/api/documents", {"file": SimpleUploadedFile(name, data)}, headers=api.headers)


def test_upload_document_queues_indexing_and_the_same_bytes_are_the_same_document(
    alice_api: ApiClient, alice: User, django_capture_on_commit_callbacks: object
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(alice_api, "quokkas.md", NOTES)
    assert response.status_code == 201, response.content
    data = response.json()
    document = UploadedDocument.objects.get(owner=alice)
    assert data["id"] == document.pk and data["name"] == "quokkas.md" and data["status"] == "pending"
    assert data["content_type"] == "text/markdown" and data["size_bytes"] == len(NOTES)
    # Indexing is a heavy job of the fair queue (mindsearch/fairq.py), the owner's.
    assert [task.args()[:3] for task in OrmQ.objects.all()] == [
        ("files", alice.pk, "retrieval.tasks.ingest_document")
    ]
    again = upload(alice_api, "copy.md", NOTES)
    assert again.status_code == 200 and again.json()["id"] == document.pk
    assert UploadedDocument.objects.count() == 1


def test_upload_refuses_unsupported_and_empty_files_with_422(alice_api: ApiClient) -> None:
    image = upload(alice_api, "photo.png", PNG)
    assert image.status_code == 422 and "photo.png" in image.json()["detail"]
    empty = upload(alice_api, "empty.txt", b"")
    assert empty.status_code == 422 and "empty" in empty.json()["detail"]
    missing = alice_api.client.post("/api/documents", {}, headers=alice_api.headers)
    assert missing.status_code == 422 and "file" in missing.json()["detail"]
    assert not UploadedDocument.objects.exists()


def test_upload_refuses_a_file_over_the_limit_with_413(alice_api: ApiClient, settings: object) -> None:
    settings.UPLOAD_MAX_BYTES = 20
    response = upload(alice_api, "quokkas.md", NOTES)
    assert response.status_code == 413 and "at most" in response.json()["detail"]
    assert not UploadedDocument.objects.exists()


def test_list_documents(alice_api: ApiClient, bob_api: ApiClient) -> None:
    first = upload(alice_api, "a.txt", b"first notes about quokkas").json()
    second = upload(alice_api, "b.txt", b"second notes about wombats").json()
    upload(bob_api, "c.txt", b"bob's notes")
    listed = alice_api.get("/api/documents").json()
    assert listed["count"] == 2 and [d["id"] for d in listed["items"]] == [second["id"], first["id"]]
    assert alice_api.get("/api/documents?limit=1&offset=1").json()["items"][0]["id"] == first["id"]


def test_get_document_shows_its_indexing_status(alice_api: ApiClient) -> None:
    document = upload(alice_api, "quokkas.md", NOTES).json()
    ingest(document["id"])
    status = alice_api.get(f"/api/documents/{document['id']}").json()
    assert status["status"] == "ready" and status["chunk_count"] >= 1 and status["error"] == ""


def test_delete_document_removes_it_its_chunks_and_its_file(
    alice_api: ApiClient, media_root: Path, django_capture_on_commit_callbacks: object
) -> None:
    document = upload(alice_api, "quokkas.md", NOTES).json()
    ingest(document["id"])
    stored = media_root / UploadedDocument.objects.get(pk=document["id"]).file.name
    assert stored.exists()
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_api.delete(f"/api/documents/{document['id']}")
    assert response.status_code == 204
    assert not UploadedDocument.objects.exists() and not Chunk.objects.exists()
    assert not stored.exists()
    assert alice_api.delete(f"/api/documents/{document['id']}").status_code == 404


def test_search_finds_passages_in_my_indexed_documents_only(alice_api: ApiClient, bob_api: ApiClient) -> None:
    mine = upload(alice_api, "quokkas.md", NOTES).json()
    theirs = upload(bob_api, "island.md", b"# Rottnest\n\nRottnest Island has quokkas and ferries.\n").json()
    ingest(mine["id"])
    ingest(theirs["id"])
    found = alice_api.get("/api/search?q=Where do quokkas live?&k=3").json()
    assert found["query"] == "Where do quokkas live?"
    assert [r["document_id"] for r in found["results"]] == [mine["id"]]
    assert "Rottnest Island" in found["results"][0]["text"] and 0 <= found["results"][0]["score"] <= 1
    assert alice_api.get("/api/search?q=").status_code == 422
    assert alice_api.get("/api/search?q=quokkas&k=51").status_code == 422
