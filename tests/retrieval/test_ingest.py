"""Ingestion end to end on the real database and model: upload → parse → chunk → embed → store."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from django.core.files.base import ContentFile
from django_q.models import OrmQ

from mindsearch.clients import llm
from retrieval import embeddings
from retrieval.ingest import index_documents, ingest
from retrieval.models import Chunk, KeywordStats, UploadedDocument
from retrieval.parsing import ParsedDocument
from retrieval.search import keyword_search
from retrieval.tasks import enqueue_ingest, ingest_document
from tests.retrieval.test_parsing import pdf_bytes
from tests.support.fakes import FakeService, Response

MARKDOWN = "\n\n".join(
    f"## Section {n}\n\n"
    + " ".join(f"Quokka fact {n}.{m}: they live on islands and smile." for m in range(60))
    for n in range(4)
)


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path


def upload(owner, data: bytes, name: str) -> UploadedDocument:
    document = UploadedDocument(
        owner=owner, original_name=name, sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data)
    )
    document.file.save(name, ContentFile(data), save=False)
    document.save()
    return document


def test_markdown_upload_becomes_ready_with_chunks_and_embeddings(alice):
    document = upload(alice, MARKDOWN.encode(), "quokkas.md")
    ingest(document.pk)
    document.refresh_from_db()
    chunks = list(document.chunks.order_by("position"))
    assert document.status == UploadedDocument.Status.READY
    assert document.error == ""
    assert document.chunk_count == len(chunks) > 4
    assert document.page_count is None
    assert [chunk.position for chunk in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert MARKDOWN[chunk.char_start : chunk.char_end] == chunk.text
        assert chunk.heading.startswith("Section ")
        assert chunk.owner_id == alice.pk
        assert len(chunk.embedding) == 384
        assert np.linalg.norm(chunk.embedding) == pytest.approx(1.0, abs=1e-4)
        assert embeddings.count_tokens(chunk.text) <= embeddings.max_tokens()
        assert chunk.embedding_model == embeddings.model_id()
        assert chunk.language == "en"


def test_pdf_upload_keeps_page_numbers(alice):
    document = upload(alice, pdf_bytes(["Quokkas on page one.", "Wallabies on page two."]), "animals.pdf")

    ingest_document(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.READY
    assert document.page_count == 2
    [passage] = keyword_search(alice, "wallabies")
    assert passage.page == 2


def test_malformed_file_fails_with_a_message_and_others_are_unaffected(alice):
    good = upload(alice, MARKDOWN.encode(), "good.md")
    ingest(good.pk)
    chunks_before = set(Chunk.objects.values_list("id", flat=True))
    broken = upload(alice, b"%PDF-1.4\n\x00not a pdf at all", "broken.pdf")
    ingest(broken.pk)
    broken.refresh_from_db()
    good.refresh_from_db()
    assert broken.status == UploadedDocument.Status.FAILED
    assert broken.error.startswith("the PDF is damaged")
    assert not broken.chunks.exists()
    assert good.status == UploadedDocument.Status.READY
    assert set(Chunk.objects.values_list("id", flat=True)) == chunks_before


def test_unsupported_file_fails_with_a_message(alice):
    document = upload(alice, b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "photo.pdf")
    ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.FAILED
    assert document.error == "not a PDF, DOCX, RTF, HTML, Markdown or text file"


def test_reingesting_is_idempotent(alice):
    document = upload(alice, MARKDOWN.encode(), "quokkas.md")
    ingest(document.pk)
    first = list(document.chunks.order_by("position").values_list("text", "char_start", "char_end"))
    stats = KeywordStats.objects.get(owner=alice)
    ingest(document.pk)
    document.refresh_from_db()
    assert list(document.chunks.order_by("position").values_list("text", "char_start", "char_end")) == first
    assert document.chunk_count == len(first)
    again = KeywordStats.objects.get(owner=alice)
    assert (again.chunk_count, again.length_total) == (stats.chunk_count, stats.length_total)


def test_embedding_failure_fails_the_document_and_drops_its_old_chunks(alice, settings, monkeypatch):
    document = upload(alice, MARKDOWN.encode(), "quokkas.md")
    ingest(document.pk)
    monkeypatch.setattr(llm, "BACKOFF_SECONDS", 0.0)

    def wrong_size(request):
        texts = request.json()["input"]
        return Response(200, {"data": [{"index": n, "embedding": [1.0] * 1536} for n in range(len(texts))]})

    with FakeService({("POST", "/v1/embeddings"): wrong_size}) as service:
        settings.EMBEDDING_BACKEND = "openai"
        settings.AITUNNEL_BASE_URL = f"{service.url}v1/"
        ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.FAILED
    assert "1536-dimensional" in document.error
    assert not document.chunks.exists()
    assert document.chunk_count == 0


def test_enqueue_waits_for_the_commit(alice, django_capture_on_commit_callbacks):
    document = upload(alice, MARKDOWN.encode(), "quokkas.md")
    with django_capture_on_commit_callbacks(execute=True):
        enqueue_ingest(document)
        assert not OrmQ.objects.exists()
    [task] = OrmQ.objects.all()
    assert (task.func(), task.args()) == (
        "mindsearch.fairq.run",
        ("files", alice.pk, "retrieval.tasks.ingest_document", document.pk),
    )


def test_an_upload_deleted_before_its_turn_is_skipped(alice):
    document = upload(alice, MARKDOWN.encode(), "quokkas.md")
    document_id = document.pk
    document.delete()
    ingest(document_id)
    assert not Chunk.objects.exists()


def test_an_upload_deleted_while_it_was_embedded_gets_no_chunks(alice):
    kept = upload(alice, MARKDOWN.encode(), "kept.md")
    gone = upload(alice, b"# Gone\n\nSoon deleted.", "gone.md")
    parsed = [(kept, ParsedDocument(MARKDOWN)), (gone, ParsedDocument("# Gone\n\nSoon deleted."))]
    UploadedDocument.objects.filter(pk=gone.pk).delete()
    index_documents(parsed)
    assert set(Chunk.objects.values_list("document_id", flat=True)) == {kept.pk}
    assert KeywordStats.objects.get(owner=alice).chunk_count == Chunk.objects.count()


def test_a_chunk_that_does_not_begin_with_its_heading_is_embedded_after_it():
    from retrieval.chunking import ChunkSpan
    from retrieval.ingest import HEADING_CHARS, embedding_text

    opening = ChunkSpan("## Quokkas\n\nThey smile.", 0, 23, None, "Quokkas")
    later = ChunkSpan("They live on islands.", 24, 45, None, "Quokkas")
    untitled = ChunkSpan("No heading above.", 0, 17, None, "")
    assert embedding_text(opening) == opening.text
    assert embedding_text(later) == "Quokkas\n\nThey live on islands."
    assert embedding_text(untitled) == untitled.text
    long = ChunkSpan("Body.", 0, 5, None, "H" * 1000)
    assert embedding_text(long) == "H" * HEADING_CHARS + "\n\nBody."


def test_index_documents_embeds_the_heading_with_a_later_chunk(alice, monkeypatch):
    seen: list[str] = []
    real = embeddings.embed

    def recording(texts: list[str], **options) -> list[list[float]]:
        seen.extend(texts)
        return real(texts, **options)

    monkeypatch.setattr("retrieval.ingest.embed", recording)
    document = upload(alice, MARKDOWN.encode(), "quokkas.md")
    index_documents([(document, ParsedDocument(MARKDOWN, []))])
    chunks = list(Chunk.objects.filter(document=document).order_by("position"))
    assert len(chunks) == len(seen) > 4
    pairs = zip(chunks, seen, strict=True)
    later = [(chunk, text) for chunk, text in pairs if not chunk.text.startswith("##")]
    assert later
    for chunk, text in later:
        assert text == f"{chunk.heading}\n\n{chunk.text}"


def test_a_heading_that_would_overflow_the_window_is_left_out():
    from retrieval.chunking import ChunkSpan
    from retrieval.ingest import embedding_text

    limit = embeddings.max_tokens()
    words = ["quokka"]
    while embeddings.count_tokens(" ".join([*words, "quokka"])) <= limit:
        words.append("quokka")
    full = " ".join(words)  # exactly fills the window
    span = ChunkSpan(full, 0, len(full), 2, "Islands where quokkas live and smile")
    assert embeddings.count_tokens(full) <= limit
    assert embedding_text(span) == full
    assert embeddings.count_tokens(embedding_text(span)) <= limit
