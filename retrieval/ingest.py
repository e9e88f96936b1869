"""Index an uploaded document: parse → chunk → embed → store, recording each step on the row.

Runs in the worker. Parsing and embedding happen outside any transaction; the chunks replace
the document's old ones (if any) and the document becomes READY in one short transaction, so a
re-run is idempotent and searches never see a half-indexed document.
"""

from __future__ import annotations

import logging

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from retrieval.chunking import HEADING, ChunkSpan, chunk, language_of
from retrieval.embeddings import EmbeddingError, count_tokens, embed, max_tokens, model_id
from retrieval.models import Chunk, UploadedDocument
from retrieval.parsing import ParsedDocument, ParseError, parse

log = logging.getLogger(__name__)

INSERT_BATCH = 500
# A heading put before a chunk for the model is cut to this many characters.
HEADING_CHARS = 200


def ingest(upload_id: int) -> None:
    """Index one upload; a failure is recorded on it (FAILED + message), never raised for bad input."""
    upload = UploadedDocument.objects.filter(pk=upload_id).first()
    if upload is None:  # deleted while it waited in the queue
        return
    UploadedDocument.objects.filter(pk=upload_id).update(index_attempts=F("index_attempts") + 1)
    try:
        set_status(upload, UploadedDocument.Status.PARSING)
        parsed = parse(_read(upload), filename=upload.original_name)
        set_status(upload, UploadedDocument.Status.EMBEDDING)
        index_documents([(upload, parsed)])
    except (ParseError, EmbeddingError, OSError) as error:
        log.info("upload %s failed: %s", upload_id, error)
        fail(upload, str(error))
    except Exception as error:
        fail(upload, f"indexing failed unexpectedly: {error}")
        raise


def index_documents(items: list[tuple[UploadedDocument, ParsedDocument]]) -> int:
    """Chunk, embed (in batches across all the documents) and store; returns the chunk count."""
    spans = [chunk_document(parsed) for _, parsed in items]
    vectors = embed([embedding_text(span) for document_spans in spans for span in document_spans])
    store(items, spans, vectors)
    return len(vectors)


def chunk_document(parsed: ParsedDocument) -> list[ChunkSpan]:
    """The document's chunks, each within what the configured model reads whole."""
    return chunk(parsed.text, parsed.pages, count_tokens=count_tokens, max_tokens=max_tokens())


def embedding_text(span: ChunkSpan) -> str:
    """What the model embeds for a chunk (the bench encodes exactly these texts for its baseline):
    its text, after its section's heading when the chunk does not begin with it — the second
    part of a long section is about what its heading names, and the model should know that too.
    On 300 SciFact training claims over 1,182 abstracts the dense leg's nDCG@10 went 0.766 →
    0.797 with the heading (chunks of 1,000 characters) and 0.788 → 0.798 (whole sections)."""
    if span.heading and not HEADING.match(span.text):
        titled = f"{span.heading[:HEADING_CHARS]}\n\n{span.text}"
        # Chunks fill the model's window; a heading that would push one past it is left out
        # rather than cut the chunk's own tail off its vector (or, at an endpoint that refuses
        # long input, fail the document).
        if count_tokens(titled) <= max_tokens():
            return titled
    return span.text


def store(
    items: list[tuple[UploadedDocument, ParsedDocument]],
    spans: list[list[ChunkSpan]],
    vectors: list[list[float]],
) -> None:
    """Replace the documents' chunks and mark them READY, all at once.

    A document deleted while it was being embedded is skipped.
    """
    vector_iter = iter(vectors)
    model = model_id()
    rows = [
        _chunk_row(upload, position, span, next(vector_iter), model)
        for (upload, _), document_spans in zip(items, spans, strict=True)
        for position, span in enumerate(document_spans)
    ]
    with transaction.atomic():
        _lock_owners({upload.owner_id for upload, _ in items})
        present = _lock_uploads([upload.pk for upload, _ in items])
        Chunk.objects.filter(document__in=present).delete()
        rows = [row for row in rows if row.document_id in present]
        Chunk.objects.bulk_create(rows, batch_size=INSERT_BATCH)
        for (upload, parsed), document_spans in zip(items, spans, strict=True):
            if upload.pk in present:
                _mark_ready(upload, len(document_spans), len(parsed.pages) or None)


def fail(upload: UploadedDocument, error: str) -> None:
    """FAILED with the message; chunks of an earlier run go too, so search never shows them."""
    with transaction.atomic():
        _lock_owners({upload.owner_id})
        upload.chunks.all().delete()
        upload.chunk_count = 0
        upload.save(update_fields=["chunk_count"])
        upload.fail(error)


def set_status(upload: UploadedDocument, status: str) -> None:
    upload.status = status
    upload.error = ""
    upload.updated_at = timezone.now()
    upload.save(update_fields=["status", "error", "updated_at"])


def _read(upload: UploadedDocument) -> bytes:
    with upload.file.open("rb") as handle:
        return handle.read()


def _chunk_row(
    upload: UploadedDocument, position: int, span: ChunkSpan, vector: list[float], model: str
) -> Chunk:
    return Chunk(
        document=upload,
        owner_id=upload.owner_id,
        position=position,
        text=span.text,
        char_start=span.start,
        char_end=span.end,
        page=span.page,
        heading=span.heading[:1000],
        embedding=vector,
        embedding_model=model,
        language=language_of(span.text),
    )


def _lock_owners(owner_ids: set[int]) -> None:
    # One indexing transaction per owner at a time: their BM25 statistics rows stay in order.
    with connection.cursor() as cursor:
        for owner_id in sorted(owner_ids):
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtext('retrieval.ingest'), %s::integer)", [owner_id]
            )


def _lock_uploads(upload_ids: list[int]) -> set[int]:
    """Lock the uploads that still exist and return their ids."""
    uploads = UploadedDocument.objects.select_for_update().filter(pk__in=upload_ids)
    return set(uploads.values_list("pk", flat=True))


def _mark_ready(upload: UploadedDocument, chunk_count: int, page_count: int | None) -> None:
    upload.status = UploadedDocument.Status.READY
    upload.error = ""
    upload.chunk_count = chunk_count
    upload.page_count = page_count
    upload.updated_at = timezone.now()
    upload.save(update_fields=["status", "error", "chunk_count", "page_count", "updated_at"])
