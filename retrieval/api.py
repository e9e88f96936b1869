"""My documents over the API: upload, list, status, delete, and search over them. Uploads go
through the same `accept_upload` as the documents page; every lookup starts from the user."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any

from django.conf import settings
from django.http import Http404, HttpRequest
from ninja import Field, File, Query, Router, Schema
from ninja.errors import HttpError
from ninja.files import UploadedFile
from ninja.responses import Status

from mindsearch.api_common import Limit, Offset, Page, Text, choices_enum, errors, invalid, page_of
from retrieval import uploads
from retrieval.embeddings import EmbeddingError
from retrieval.models import Chunk, UploadedDocument
from retrieval.search import hybrid_search

router = Router()

MAX_RESULTS = 50


DocumentStatus = choices_enum("DocumentStatus", UploadedDocument.Status)


class DocumentOut(Schema):
    id: int
    name: str
    content_type: str
    size_bytes: int
    sha256: str
    status: DocumentStatus = Field(description="pending → parsing → embedding → ready, or failed.")
    error: str = Field(description="Why indexing failed, for a failed document.")
    page_count: int | None
    chunk_count: int
    published_at: date | None
    source_url: str = Field(
        description="For a web page kept from a report's sources: its address; else empty."
    )
    fetched_at: datetime | None = Field(description="When that page was read; null for an uploaded file.")
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_name(document: UploadedDocument) -> str:
        return document.original_name


class DocumentPage(Page):
    items: list[DocumentOut]


class PassageOut(Schema):
    chunk_id: int
    document_id: int
    document_name: str
    page: int | None
    text: str
    score: float = Field(description="The fused dense + keyword score, in [0, 1].")
    similarity: float | None = Field(
        description="Cosine similarity of the passage to the question (null for a passage not yet "
        "moved to the configured embedding model)."
    )


class SearchOut(Schema):
    query: str
    results: list[PassageOut]
    message: str = Field(
        description="Empty when there are results; otherwise why there are none: nothing in the "
        "documents reaches the relevance floor, or nothing is indexed yet."
    )


NOTHING_MATCHES = "Nothing in your documents matches the question."
NOTHING_INDEXED = "You have no indexed documents to search."


def _document(request: HttpRequest, document_id: int) -> UploadedDocument:
    document = UploadedDocument.objects.for_user(request.auth).filter(pk=document_id).first()
    if document is None:
        raise Http404(f"Document {document_id} not found.")
    return document


@router.post("/documents", response={201: DocumentOut, 200: DocumentOut, **errors(413)}, tags=["documents"])
def upload_document(request: HttpRequest, file: File[UploadedFile]) -> Status:
    """Upload a PDF, DOCX, Markdown, text or HTML file (multipart field `file`); it is indexed in
    the background (poll its status). The same bytes again answer 200 with the document
    already there."""
    try:
        document, created = uploads.accept_upload(request.auth, file)
    except uploads.UploadRejected as rejected:
        if (file.size or 0) > settings.UPLOAD_MAX_BYTES:
            raise HttpError(413, rejected.message) from None
        raise invalid(("body", "file"), [rejected.message]) from None
    return Status(201 if created else 200, document)


@router.get("/documents", response={200: DocumentPage, **errors()}, tags=["documents"])
def list_documents(
    request: HttpRequest,
    limit: Limit = 50,
    offset: Offset = 0,
) -> dict[str, Any]:
    """My documents, newest first."""
    documents = UploadedDocument.objects.for_user(request.auth).order_by("-created_at", "-id")
    return page_of(documents, limit=limit, offset=offset)


@router.get("/documents/{document_id}", response={200: DocumentOut, **errors(404)}, tags=["documents"])
def get_document(request: HttpRequest, document_id: int) -> UploadedDocument:
    """One document with its indexing status."""
    return _document(request, document_id)


@router.delete("/documents/{document_id}", response={204: None, **errors(404)}, tags=["documents"])
def delete_document(request: HttpRequest, document_id: int) -> Status:
    """Delete the document, its passages and its stored file."""
    uploads.delete_document(_document(request, document_id))
    return Status(204, None)


@router.get("/search", response={200: SearchOut, **errors(503)}, tags=["search"])
def search_documents(
    request: HttpRequest,
    q: Annotated[Text, Query(min_length=1, max_length=1000, description="What to look for in my documents.")],
    k: Annotated[int, Query(ge=1, le=MAX_RESULTS, description="How many passages to return.")] = 10,
) -> dict[str, Any]:
    """The passages of my indexed documents that best match `q` (hybrid: meaning and keywords)."""
    query = q.strip()
    # Without a single indexed passage there is nothing to rank, and no model to load.
    if not query or not Chunk.objects.for_user(request.auth).exists():
        return {"query": query, "results": [], "message": NOTHING_INDEXED if query else ""}
    try:
        passages = hybrid_search(request.auth, query, k=k)
    except EmbeddingError as error:
        raise HttpError(503, f"Search over documents is unavailable: {error}") from None
    return {"query": query, "results": passages, "message": "" if passages else NOTHING_MATCHES}
