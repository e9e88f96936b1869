"""Big files are indexed in checkpointed steps: a run stopped midway (the worker's task timeout,
a worker killed) is taken up where it stopped and reaches Ready with every page's passages."""

from __future__ import annotations

import hashlib

import pytest
from django.core.files.base import ContentFile
from django_q.exceptions import TimeoutException
from django_q.models import OrmQ

from retrieval import checkpoints, embeddings, ingest
from retrieval.models import UploadedDocument
from retrieval.parsing import parse
from retrieval.uploads import delete_document
from tests.retrieval.test_parsing import pdf_bytes

PAGES = 40
# Each page a different sentence, long enough for several passages a few pages each.
BOOK = [f"Page {n} of the book tells of island number {n} and its quokkas." * 6 for n in range(PAGES)]


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path


@pytest.fixture
def small_steps(monkeypatch):
    monkeypatch.setattr(ingest, "EMBED_BATCH", 4)
    monkeypatch.setattr(ingest, "PROGRESS_SECONDS", 0.0)


def upload(owner, data: bytes, name: str) -> UploadedDocument:
    document = UploadedDocument(
        owner=owner, original_name=name, sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data)
    )
    document.file.save(name, ContentFile(data), save=False)
    document.save()
    return document


class Killed(BaseException):
    """A worker killed outright: no handler runs, nothing is recorded."""


def stopping_after(monkeypatch, batches: int, stop: BaseException) -> list[int]:
    """Embed for real, then stop the run as `stop` on batch `batches` + 1; returns batch sizes."""
    real = embeddings.embed
    sizes: list[int] = []

    def embed(texts: list[str]) -> list[list[float]]:
        if len(sizes) == batches:
            raise stop
        sizes.append(len(texts))
        return real(texts)

    monkeypatch.setattr(ingest, "embed", embed)
    return sizes


@pytest.mark.usefixtures("small_steps")
def test_a_run_stopped_by_the_task_timeout_queues_the_next_which_finishes(
    alice, monkeypatch, django_capture_on_commit_callbacks
):
    document = upload(alice, pdf_bytes(BOOK), "book.pdf")
    first = stopping_after(
        monkeypatch, 3, TimeoutException("Task exceeded maximum timeout value (1800 seconds)")
    )
    with pytest.raises(SystemExit), django_capture_on_commit_callbacks(execute=True):
        ingest.ingest(document.pk)
    document.refresh_from_db()
    # Still indexing, with its progress, and the next run is queued (not a new attempt).
    assert document.status == UploadedDocument.Status.EMBEDDING
    assert document.chunk_count == sum(first) == 12 and document.chunk_total > 12
    [task] = OrmQ.objects.all()
    assert task.args() == ("files", alice.pk, "retrieval.tasks.ingest_document", document.pk, True)
    assert document.index_attempts == 1

    again = stopping_after(monkeypatch, 10_000, Killed())
    parsed_before = []
    monkeypatch.setattr(ingest, "parse", lambda *a, **k: parsed_before.append(1))  # read from the checkpoint
    ingest.ingest(document.pk, resuming=True)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.READY and parsed_before == []
    assert sum(again) == document.chunk_count - 12  # only the rest was embedded
    assert document.index_attempts == 1
    assert {chunk.page for chunk in document.chunks.all()} == set(range(1, PAGES + 1))
    assert not any(checkpoints.folder().iterdir())


@pytest.mark.usefixtures("small_steps")
def test_a_killed_worker_leaves_a_checkpoint_the_next_run_goes_on_from(alice, monkeypatch):
    document = upload(alice, pdf_bytes(BOOK), "book.pdf")
    stopping_after(monkeypatch, 2, Killed())
    with pytest.raises(Killed):
        ingest.ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.EMBEDDING and document.chunk_count == 8
    assert document.chunks.count() == 0  # search never sees half a document
    # The broker hands the task out again: the same call, not marked as resuming.
    rest = stopping_after(monkeypatch, 10_000, Killed())
    ingest.ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.READY
    assert sum(rest) == document.chunk_count - 8
    pages = [chunk.page for chunk in document.chunks.order_by("position")]
    assert set(pages) == set(range(1, PAGES + 1)) and pages == sorted(pages)


@pytest.mark.usefixtures("small_steps")
def test_a_run_stopped_in_its_first_batch_after_reading_the_file_is_continued_not_failed(
    alice, monkeypatch, django_capture_on_commit_callbacks
):
    # A long read and a slow first batch (a loaded machine) can fill a whole run: the text read is
    # in the checkpoint, so the next run starts with the passages instead of the file failing.
    document = upload(alice, pdf_bytes(BOOK), "book.pdf")
    stopping_after(monkeypatch, 0, TimeoutException("Task exceeded maximum timeout value (300 seconds)"))
    with pytest.raises(SystemExit), django_capture_on_commit_callbacks(execute=True):
        ingest.ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.EMBEDDING and document.error == ""
    [task] = OrmQ.objects.all()
    assert task.args() == ("files", alice.pk, "retrieval.tasks.ingest_document", document.pk, True)

    stopping_after(monkeypatch, 10_000, Killed())
    parsed_again = []
    monkeypatch.setattr(ingest, "parse", lambda *a, **k: parsed_again.append(1))
    ingest.ingest(document.pk, resuming=True)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.READY and parsed_again == []
    assert {chunk.page for chunk in document.chunks.all()} == set(range(1, PAGES + 1))


def test_a_run_stopped_while_reading_fails_saying_so_and_can_be_indexed_again(alice, monkeypatch):
    document = upload(alice, pdf_bytes(BOOK[:3]), "short.pdf")

    def timed_out(*args: object, **kwargs: object) -> None:
        raise TimeoutException("Task exceeded maximum timeout value (10 seconds)")

    monkeypatch.setattr(ingest, "parse", timed_out)
    with pytest.raises(SystemExit):
        ingest.ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.FAILED
    assert "index it again to continue" in document.error
    assert not OrmQ.objects.exists()


def test_a_run_stopped_before_any_progress_fails_saying_so_and_can_be_indexed_again(alice, monkeypatch):
    document = upload(alice, pdf_bytes(BOOK[:3]), "short.pdf")
    # An earlier run read the file; this one gets no batch done: nothing moved, so it fails.
    checkpoints.save_parsed(document, parse(pdf_bytes(BOOK[:3]), filename="short.pdf"))
    stopping_after(monkeypatch, 0, TimeoutException("Task exceeded maximum timeout value (1800 seconds)"))
    with pytest.raises(SystemExit):
        ingest.ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.FAILED
    assert "index it again to continue" in document.error
    assert not OrmQ.objects.exists()


def test_a_document_no_run_has_moved_for_longer_than_the_timeout_is_stalled(alice, settings):
    document = upload(alice, b"# Notes\n\nSome text.", "notes.md")
    UploadedDocument.objects.filter(pk=document.pk).update(status=UploadedDocument.Status.EMBEDDING)
    document.refresh_from_db()
    assert not document.is_stalled
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "retry": -1}
    assert document.is_stalled


def test_a_checkpoint_of_another_model_or_cut_short_is_not_trusted(alice):
    document = upload(alice, b"x", "x.md")
    vectors = checkpoints.Vectors(document, "model-a")
    vectors.append(["one", "two"], [[0.5] * 384, [0.25] * 384])
    with vectors.path.open("ab") as handle:
        handle.write(b"\x00" * 100)  # a record a killed run left half-written
    vectors.append(["three"], [[1.0] * 384])
    found = vectors.load()
    assert set(found) == {checkpoints.digest(text) for text in ("one", "two", "three")}
    assert found[checkpoints.digest("three")] == [1.0] * 384
    assert checkpoints.Vectors(document, "model-b").load() == {}


def test_deleting_a_document_removes_its_checkpoint(alice, django_capture_on_commit_callbacks):
    document = upload(alice, b"x", "x.md")
    checkpoints.Vectors(document, embeddings.model_id()).append(["one"], [[0.5] * 384])
    with django_capture_on_commit_callbacks(execute=True):
        delete_document(document)
    assert not any(checkpoints.folder().iterdir())


def test_the_page_shows_progress_and_offers_index_again_once_a_run_has_stalled(alice, alice_client):
    from datetime import timedelta

    from django.utils import timezone

    document = upload(alice, b"# Notes\n\nSome text.", "notes.md")
    UploadedDocument.objects.filter(pk=document.pk).update(
        status=UploadedDocument.Status.EMBEDDING, chunk_count=1200, chunk_total=3400
    )
    page = alice_client.get(f"/documents/{document.pk}/status/").content.decode()
    assert "1200 of 3400 passages" in page and "Index again" not in page
    UploadedDocument.objects.filter(pk=document.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    page = alice_client.get(f"/documents/{document.pk}/status/").content.decode()
    assert "Index again" in page
    alice_client.post(f"/documents/{document.pk}/retry/")
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.PENDING


def test_a_ready_document_names_the_pages_it_left_out(alice, alice_client):
    document = upload(alice, b"# Notes\n\nSome text.", "notes.md")
    UploadedDocument.objects.filter(pk=document.pk).update(
        status=UploadedDocument.Status.READY, unreadable_pages=[3, 4]
    )
    page = alice_client.get(f"/documents/{document.pk}/status/").content.decode()
    assert "Pages 3–4 could not be read" in page
    assert "Pages 3–4 could not be read" in alice_client.get("/documents/").content.decode()
