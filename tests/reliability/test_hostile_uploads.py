"""Hostile input: uploads that are too big, mislabelled, DOCX zip bombs or malformed PDFs, sent
through the documents page and through the API together with a good file.

Each bad file is refused with a message that names it (or, for a PDF that only breaks when it
is parsed, indexed to a clear failure on its document); the good file goes in; nothing answers
500 and nothing else is lost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import DjangoCaptureOnCommitCallbacks

from mindsearch.models import ApiToken
from retrieval.ingest import ingest
from retrieval.models import UploadedDocument
from tests.retrieval.test_parsing import pdf_bytes, zip_bytes

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
GOOD = b"# Field notes\n\nQuokkas live on Rottnest Island and feed at night.\n"
LIMIT = 64 * 1024


def hostile_files() -> dict[str, tuple[bytes, str]]:
    """name → (bytes, what the refusal says)."""
    bomb = zip_bytes({"word/document.xml": b"<w:document/>", "word/padding.xml": b"\0" * (20 * 1024 * 1024)})
    return {
        # Sizes precise enough to differ: one byte over 64 KB is not "64.0 KB; at most 64.0 KB".
        "huge.md": (b"x" * (LIMIT + 1), "is 65,537\xa0bytes; files may be at most 65,536\xa0bytes"),
        "photo.pdf": (PNG, "is not a PDF, DOCX, RTF, Markdown, text or HTML file"),
        "login.docx": (b"<!doctype html><html><body>Sign in</body></html>", "named like a DOCX file"),
        "report.pdf": (b"<html><body><p>Not a PDF at all</p></body></html>", "content is an HTML page"),
        "bomb.docx": (bomb, "unpacks to more than 100 times its size (a zip bomb?)"),
    }


@pytest.fixture(autouse=True)
def limits(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path
    settings.UPLOAD_MAX_BYTES = LIMIT


def files(*extra: tuple[str, bytes]) -> list[SimpleUploadedFile]:
    named = [(name, data) for name, (data, _) in hostile_files().items()] + list(extra)
    return [SimpleUploadedFile(name, data) for name, data in named]


def malformed_pdf() -> bytes:
    return pdf_bytes(["Quokkas"])[:60] + b"\x00garbage" * 10


def test_the_documents_page_refuses_each_bad_file_by_name_and_keeps_the_good_ones(
    alice: User, alice_client: Client, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        response = alice_client.post(
            reverse("document_upload"),
            {"files": files(("notes.md", GOOD), ("broken.pdf", malformed_pdf()))},
            headers={"HX-Request": "true"},
        )
    assert response.status_code == 200
    page = response.content.decode().replace("&#x27;", "'")
    for name, (_data, reason) in hostile_files().items():
        assert name in page and reason in page, name
    stored = set(UploadedDocument.objects.for_user(alice).values_list("original_name", flat=True))
    assert stored == {"notes.md", "broken.pdf"}  # a damaged PDF still looks like one until parsed


def test_a_malformed_pdf_fails_its_own_indexing_clearly_and_nothing_else(
    alice: User, alice_client: Client, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        alice_client.post(
            reverse("document_upload"),
            {
                "files": [
                    SimpleUploadedFile("notes.md", GOOD),
                    SimpleUploadedFile("broken.pdf", malformed_pdf()),
                ]
            },
        )
    for document in UploadedDocument.objects.for_user(alice):
        ingest(document.pk)
    broken = UploadedDocument.objects.get(original_name="broken.pdf")
    notes = UploadedDocument.objects.get(original_name="notes.md")
    assert broken.status == UploadedDocument.Status.FAILED and "the PDF is damaged" in broken.error
    assert notes.status == UploadedDocument.Status.READY and notes.chunks.exists()
    listing = alice_client.get(reverse("document_list"))
    assert listing.status_code == 200 and "the PDF is damaged" in listing.content.decode()
    assert alice_client.get(reverse("document_detail", args=[broken.pk])).status_code == 200


@pytest.mark.parametrize("name", list(hostile_files()))
def test_the_api_refuses_each_bad_file_with_a_clear_status(alice: User, name: str) -> None:
    _row, token = ApiToken.issue(alice, "uploads")
    data, reason = hostile_files()[name]
    response = Client().post(
        "/api/documents",
        {"file": SimpleUploadedFile(name, data)},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == (413 if name == "huge.md" else 422), response.content
    assert reason in response.json()["detail"]
    assert not UploadedDocument.objects.exists()


def test_docx_files_that_unpack_to_far_more_than_they_say_are_refused_by_name(
    alice: User, alice_client: Client, settings: Any
) -> None:
    """Issue 26: an 800 KB DOCX whose [Content_Types].xml declares 1 KB and inflates to 800 MiB,
    and a 10 MB one whose _rels/.rels unpacks to 187 MB, were let through or called 'not a DOCX'
    after the web process had inflated them whole; now both are refused for what they unpack to."""
    from tests.retrieval.hostile_files import content_types_bomb, relationships_bomb

    settings.UPLOAD_MAX_BYTES = 20 * 1024 * 1024
    bombs = {"types.docx": content_types_bomb(), "rels.docx": relationships_bomb()}
    response = alice_client.post(
        reverse("document_upload"),
        {"files": [SimpleUploadedFile(name, data) for name, data in bombs.items()]},
        headers={"HX-Request": "true"},
    )
    page = response.content.decode()
    for name in bombs:
        assert f"{name} cannot be read: a part of the file unpacks to more than 64 MB (a zip bomb?)" in page
    _row, token = ApiToken.issue(alice, "uploads")
    api = Client().post(
        "/api/documents",
        {"file": SimpleUploadedFile("types.docx", bombs["types.docx"])},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert api.status_code == 422 and "unpacks to more than 64 MB" in api.json()["detail"]
    assert not UploadedDocument.objects.exists()
