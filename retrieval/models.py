"""Private documents a user uploads, and the chunks they are searched by."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from pgvector.django import HnswIndex, VectorField

from mindsearch.querysets import OwnedQuerySet
from retrieval.embeddings import EMBEDDING_DIMENSIONS, model_id

KEYWORD_CONFIG = "mindsearch_stem"
# What chunks embedded before models were recorded (migration 0003) were embedded with.
LEGACY_EMBEDDING_MODEL = "local:all-MiniLM-L6-v2"


def current_embedding_model() -> str:
    """The configured model's name as chunks store it (retrieval.embeddings.model_id)."""
    return model_id()


def upload_path(instance: UploadedDocument, filename: str) -> str:
    # The stored name never comes from the user: the hash is unique per owner.
    return f"uploads/{instance.owner_id}/{instance.sha256}"


# The MIME type stored for each kind of content the upload check recognises, and its label.
CONTENT_TYPES = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "html": "text/html",
    "markdown": "text/markdown",
    "text": "text/plain",
}
TYPE_LABELS = {
    CONTENT_TYPES["pdf"]: "PDF",
    CONTENT_TYPES["docx"]: "DOCX",
    CONTENT_TYPES["html"]: "HTML",
    CONTENT_TYPES["markdown"]: "Markdown",
    CONTENT_TYPES["text"]: _("Text"),
}


class UploadedDocumentQuerySet(OwnedQuerySet):
    def ready(self) -> UploadedDocumentQuerySet:
        return self.filter(status=UploadedDocument.Status.READY)

    def in_progress(self) -> UploadedDocumentQuerySet:
        """Documents the worker has yet to finish (neither ready nor failed)."""
        return self.exclude(status__in=UploadedDocument.SETTLED)


class UploadedDocument(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", _("Waiting")
        PARSING = "parsing", _("Parsing")
        EMBEDDING = "embedding", _("Indexing")
        READY = "ready", _("Ready")
        FAILED = "failed", _("Failed")

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="uploads")
    file = models.FileField(upload_to=upload_path, max_length=500)
    original_name = models.CharField(max_length=255)
    content_type = models.CharField(max_length=100, blank=True, default="")
    size_bytes = models.PositiveBigIntegerField(default=0)
    sha256 = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True, default="")
    page_count = models.PositiveIntegerField(null=True, blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    # While indexing: the passages to embed (chunk_count counts those done so far).
    chunk_total = models.PositiveIntegerField(default=0)
    # Pages (1-based) that could not be read (OCR noise, handwriting) and were left out.
    unreadable_pages = models.JSONField(default=list, blank=True)
    index_attempts = models.PositiveSmallIntegerField(
        default=0,
        help_text=_("Indexing runs started for this file; a failed one is queued again only so often."),
    )
    published_at = models.DateField(null=True, blank=True)
    # A web page kept from a report's sources (research/keep.py): where it came from and when it was read.
    source_url = models.URLField(max_length=2000, blank=True, default="")
    fetched_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = UploadedDocumentQuerySet.as_manager()

    SETTLED = (Status.READY, Status.FAILED)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["owner", "sha256"], name="upload_unique_per_owner")]

    def __str__(self) -> str:
        return self.original_name

    @property
    def is_settled(self) -> bool:
        return self.status in self.SETTLED

    @property
    def error_message(self) -> str:
        """Why indexing failed, in the active language."""
        from retrieval.failures import translate

        return translate(self.error)

    @property
    def unreadable_notice(self) -> str:
        """ "Pages 3–4 could not be read and were left out", in the active language, or ""."""
        from django.utils.translation import ngettext

        from retrieval.parsing import page_ranges

        pages = [page for page in self.unreadable_pages or [] if isinstance(page, int)]
        if not pages:
            return ""
        return ngettext(
            "Page %(pages)s could not be read (handwriting, or noise rather than text) and was left out.",
            "Pages %(pages)s could not be read (handwriting, or noise rather than text) and were left out.",
            len(pages),
        ) % {"pages": page_ranges(pages)}

    @property
    def progress(self) -> int | None:
        """Per cent of the passages embedded, while indexing a file whose passages are counted."""
        if self.status != self.Status.EMBEDDING or not self.chunk_total:
            return None
        return min(100, 100 * self.chunk_count // self.chunk_total)

    @property
    def is_stalled(self) -> bool:
        """In progress, but no run has moved it for longer than the worker's task timeout: its
        worker was stopped and the task is not (yet) handed out again; *Index again* resumes it."""
        if self.is_settled:
            return False
        timeout = int(str(settings.Q_CLUSTER.get("retry", 1860)))
        return (timezone.now() - self.updated_at).total_seconds() > timeout

    @property
    def type_label(self) -> str:
        return str(TYPE_LABELS.get(self.content_type, self.content_type))

    def queue_again(self) -> None:
        """Back to PENDING for another indexing attempt (the caller enqueues it)."""
        self.status = self.Status.PENDING
        self.error = ""
        self.updated_at = timezone.now()
        self.save(update_fields=["status", "error", "updated_at"])

    def fail(self, error: str) -> None:
        self.status = self.Status.FAILED
        self.error = error
        self.updated_at = timezone.now()
        self.save(update_fields=["status", "error", "updated_at"])


class Chunk(models.Model):
    document = models.ForeignKey(UploadedDocument, on_delete=models.CASCADE, related_name="chunks")
    # Denormalised from the document so that vector and keyword search filter on one table.
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chunks")
    position = models.PositiveIntegerField()
    text = models.TextField()
    char_start = models.PositiveIntegerField()
    char_end = models.PositiveIntegerField()
    page = models.PositiveIntegerField(null=True, blank=True)
    heading = models.TextField(blank=True, default="")
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    # The model the embedding came from: a query is compared only with chunks of its own model,
    # and `manage.py reembed` moves the others.
    embedding_model = models.CharField(max_length=200, default=current_embedding_model)
    # "ru" (mostly Cyrillic letters), "en" (mostly Latin) or "" (neither): fusion weighs the
    # keyword leg, which matches only the query's language, per language (retrieval/search.py).
    language = models.CharField(max_length=8, blank=True, default="")
    # What keyword search (BM25) ranks by: English and Russian Snowball stems, no stop words
    # (the text search configuration is created by migration 0002). Triggers copy it into
    # Posting rows, the index BM25 actually reads.
    stemmed_vector = models.GeneratedField(
        expression=SearchVector("text", config=KEYWORD_CONFIG),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    objects = OwnedQuerySet.as_manager()

    class Meta:
        ordering = ["document", "position"]
        constraints = [models.UniqueConstraint(fields=["document", "position"], name="chunk_unique_position")]
        indexes = [
            HnswIndex(
                name="chunk_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            models.Index(fields=["owner", "document"]),
            models.Index(fields=["owner", "embedding_model"], name="chunk_owner_model"),
        ]

    def __str__(self) -> str:
        return f"{self.document} #{self.position}"


class KeywordStats(models.Model):
    """An owner's chunk count and total chunk length (in distinct stems), for BM25.

    Kept current by database triggers on the chunk table (migration 0002), so every way of
    adding or deleting chunks, cascades included, updates it.
    """

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    chunk_count = models.BigIntegerField(default=0)
    length_total = models.BigIntegerField(default=0)

    class Meta:
        verbose_name_plural = "keyword statistics"

    def __str__(self) -> str:
        return f"{self.chunk_count} chunks of user {self.owner_id}"


class TermStat(models.Model):
    """How many of an owner's chunks contain a stem (its document frequency), for BM25."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    term = models.TextField()
    df = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "term"], name="termstat_unique_term")]

    def __str__(self) -> str:
        return f"{self.term} ({self.df})"


class Posting(models.Model):
    """One stem in one chunk, with its count: the inverted index that BM25 reads.

    Written only by the database triggers on the chunk table (migration 0002); the primary key
    also carries `tf` and `length`, so scoring a term is an index-only scan.
    """

    pk = models.CompositePrimaryKey("owner_id", "term", "chunk_id")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )
    term = models.TextField()
    chunk = models.ForeignKey(
        Chunk, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    tf = models.SmallIntegerField()
    length = models.SmallIntegerField(help_text="The chunk's number of distinct stems.")

    def __str__(self) -> str:
        return f"{self.term} ×{self.tf} in chunk {self.chunk_id}"


# --- Notes on passages (retrieval/notes.py) ---------------------------------------------------------


class PassageNote(models.Model):
    """A user's note on a passage: of one of their documents, or the passage a citation of one of
    their reports (or of a follow-up's answer) rests on. The passage is quoted as it was when
    noted, so the note survives re-indexing (its chunk link is then cleared); document search
    finds it by its words or the passage's."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="passage_notes"
    )
    text = models.TextField(_("note"))
    passage = models.TextField(help_text=_("The passage as it was when the note was made."))
    document = models.ForeignKey(
        UploadedDocument, on_delete=models.CASCADE, null=True, blank=True, related_name="notes"
    )
    chunk = models.ForeignKey(Chunk, on_delete=models.SET_NULL, null=True, blank=True, related_name="notes")
    page = models.PositiveIntegerField(null=True, blank=True)
    # A report's cited passage: the note goes with the report (research depends on retrieval,
    # never the reverse in code; the link is by the model's label only).
    citation = models.ForeignKey(
        "research.Citation", on_delete=models.CASCADE, null=True, blank=True, related_name="notes"
    )
    # A follow-up answer's cited passage: its citations are the follow-up's `citations` list, not
    # Citation rows, so the note names the follow-up and the citation (sentence, source number).
    followup = models.ForeignKey(
        "research.FollowUp", on_delete=models.CASCADE, null=True, blank=True, related_name="notes"
    )
    sentence_index = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("In a follow-up's answer: the cited sentence's place, from 0.")
    )
    n = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("In a follow-up's answer: the number of the source cited.")
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(document__isnull=False, citation__isnull=True, followup__isnull=True)
                | models.Q(document__isnull=True, citation__isnull=False, followup__isnull=True)
                | models.Q(
                    document__isnull=True,
                    citation__isnull=True,
                    followup__isnull=False,
                    sentence_index__isnull=False,
                    n__isnull=False,
                ),
                name="passage_note_on_one_thing",
            )
        ]

    def __str__(self) -> str:
        return self.text[:80]
