"""Index an uploaded document: parse → chunk → embed → store, recording each step on the row.

Runs in the worker. Parsing and embedding happen outside any transaction; the chunks replace
the document's old ones (if any) and the document becomes READY in one short transaction, so a
re-run is idempotent and searches never see a half-indexed document.

A big file is embedded in bounded steps: batches of EMBED_BATCH passages, each appended to the
document's checkpoint (`retrieval.checkpoints`) as it is made, with the progress (passages done
of all) on the row. A run the worker's task timeout stops (django-q2 raises SystemExit) queues
the next run if it got anywhere, or fails the document with a message that says so; a run whose
worker is killed is handed out again by the broker (or *Index again*, offered once the document
has not moved for longer than the task timeout). Either way the next run reads the parsed text
and the vectors already made from the checkpoint and embeds only the rest.
"""

from __future__ import annotations

import logging
import time

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from retrieval import checkpoints, failures
from retrieval.chunking import HEADING, ChunkSpan, chunk, language_of
from retrieval.embeddings import EmbeddingError, count_tokens, embed, max_tokens, model_id
from retrieval.models import Chunk, UploadedDocument
from retrieval.parsing import ParsedDocument, ParseError, parse

log = logging.getLogger(__name__)

INSERT_BATCH = 500
# Passages embedded (and checkpointed) per step: a stopped run loses at most one step's work.
EMBED_BATCH = 64
# The row's progress is written at most this often (each write is a status poll's answer).
PROGRESS_SECONDS = 2.0
STOPPED = failures.STOPPED
# A heading put before a chunk for the model is cut to this many characters.
HEADING_CHARS = 200


def ingest(upload_id: int, *, resuming: bool = False) -> None:
    """Index one upload; a failure is recorded on it (FAILED + message), never raised for bad input.

    `resuming`: a run queued by a stopped one to go on with it (not counted as a new attempt)."""
    upload = UploadedDocument.objects.filter(pk=upload_id).first()
    if upload is None:  # deleted while it waited in the queue
        return
    if not resuming:
        UploadedDocument.objects.filter(pk=upload_id).update(index_attempts=F("index_attempts") + 1)
    run = _Run(upload)
    try:
        run.index()
    except ParseError as error:
        log.info("upload %s failed: %s", upload_id, error)
        fail(upload, str(error))
        checkpoints.remove(upload)
    except (EmbeddingError, OSError) as error:
        # Often passing (the endpoint, the disk): the vectors made so far stay for the next run.
        log.info("upload %s failed: %s", upload_id, error)
        fail(upload, str(error))
    except (SystemExit, KeyboardInterrupt):
        # django-q2's task timeout (a SystemExit), or the worker told to stop: what is done is in
        # the checkpoint. Go on in a new run if this one got anywhere, else say it stopped.
        run.stopped()
        raise
    except Exception as error:
        fail(upload, failures.UNEXPECTED % {"error": error})
        raise


class _Run:
    """One indexing run of one upload, embedding in checkpointed steps."""

    def __init__(self, upload: UploadedDocument) -> None:
        self.upload = upload
        self.embedded_now = 0
        self.parsed_now = False
        self.done = self.total = 0

    def index(self) -> None:
        upload = self.upload
        parsed = checkpoints.load_parsed(upload)
        if parsed is None:
            set_status(upload, UploadedDocument.Status.PARSING)
            parsed = parse(_read(upload), filename=upload.original_name)
            checkpoints.save_parsed(upload, parsed)
            self.parsed_now = True
        spans = chunk_document(parsed)
        texts = [embedding_text(span) for span in spans]
        vectors = self._embed(texts)
        store([(upload, parsed)], [spans], vectors)
        checkpoints.remove(upload)

    def _embed(self, texts: list[str]) -> list[list[float]]:
        """Every text's vector: those of the checkpoint, the rest embedded step by step."""
        saved = checkpoints.Vectors(self.upload, model_id())
        found = saved.load()
        wanted = {checkpoints.digest(text): text for text in texts}
        missing = [text for key, text in wanted.items() if key not in found]
        done = len(wanted) - len(missing)
        _progress(self.upload, done, len(wanted))
        last = time.monotonic()
        for first in range(0, len(missing), EMBED_BATCH):
            batch = missing[first : first + EMBED_BATCH]
            vectors = embed(batch)
            saved.append(batch, vectors)
            found.update(
                (checkpoints.digest(text), vector) for text, vector in zip(batch, vectors, strict=True)
            )
            self.embedded_now += len(batch)
            done += len(batch)
            self.done, self.total = done, len(wanted)
            if time.monotonic() - last >= PROGRESS_SECONDS:
                _progress(self.upload, done, len(wanted))
                last = time.monotonic()
        return [found[checkpoints.digest(text)] for text in texts]

    def stopped(self) -> None:
        """The run was stopped from outside: queue the next one, or fail saying why."""
        from retrieval.tasks import enqueue_ingest

        try:
            if not UploadedDocument.objects.filter(pk=self.upload.pk).exists():
                return
            # Reading the file is progress too: its text is in the checkpoint, and the next run
            # starts with the passages (a long read and a slow first batch can fill one run).
            if self.embedded_now or self.parsed_now:
                log.info(
                    "upload %s stopped after %s passages; queued to go on", self.upload.pk, self.embedded_now
                )
                if self.total:
                    _progress(self.upload, self.done, self.total)
                enqueue_ingest(self.upload, resuming=True)
            else:
                log.warning("upload %s stopped without progress", self.upload.pk)
                self.upload.fail(STOPPED)
        except Exception:  # the worker is going down: never mask why
            log.exception("could not record that upload %s was stopped", self.upload.pk)


def _progress(upload: UploadedDocument, done: int, total: int) -> None:
    upload.status = UploadedDocument.Status.EMBEDDING
    upload.error = ""
    upload.chunk_count, upload.chunk_total = done, total
    upload.updated_at = timezone.now()
    upload.save(update_fields=["status", "error", "chunk_count", "chunk_total", "updated_at"])


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
                _mark_ready(upload, len(document_spans), len(parsed.pages) or None, parsed.unreadable_pages)


def fail(upload: UploadedDocument, error: str) -> None:
    """FAILED with the message; chunks of an earlier run go too, so search never shows them."""
    with transaction.atomic():
        _lock_owners({upload.owner_id})
        upload.chunks.all().delete()
        upload.chunk_count = 0
        upload.chunk_total = 0
        upload.save(update_fields=["chunk_count", "chunk_total"])
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


def _mark_ready(
    upload: UploadedDocument, chunk_count: int, page_count: int | None, unreadable_pages: list[int]
) -> None:
    upload.status = UploadedDocument.Status.READY
    upload.error = ""
    upload.chunk_count = chunk_count
    upload.chunk_total = chunk_count
    upload.page_count = page_count
    upload.unreadable_pages = unreadable_pages
    upload.updated_at = timezone.now()
    upload.save(
        update_fields=[
            "status",
            "error",
            "chunk_count",
            "chunk_total",
            "page_count",
            "unreadable_pages",
            "updated_at",
        ]
    )
