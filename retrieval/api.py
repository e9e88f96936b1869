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

from mindsearch.api_common import Limit, Offset, Page, Text, choices_enum, errors, invalid, needs, page_of
from mindsearch.models import TokenScope
from retrieval import notes, uploads
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

    @staticmethod
    def resolve_error(document: UploadedDocument) -> str:
        return document.error_message


class DocumentPage(Page):
    items: list[DocumentOut]


class PassageOut(Schema):
    chunk_id: int
    notes: list[dict[str, Any]] = Field(default_factory=list, description="My notes on this passage.")
    document_id: int
    document_name: str
    page: int | None
    text: str
    score: float = Field(description="The fused dense + keyword score, in [0, 1].")
    similarity: float | None = Field(
        description="Cosine similarity of the passage to the question (null for a passage not yet "
        "moved to the configured embedding model)."
    )


class NoteWhereOut(Schema):
    kind: str = Field(
        description='"document" (a passage of my document), "report" (a report\'s cited passage) or '
        '"followup" (a follow-up answer\'s cited passage).'
    )
    label: str
    url: str = Field(description="The page of the passage: the document's, or the report's source.")
    document_id: int | None = None
    topic_id: int | None = None
    citation_id: int | None = None
    followup_id: int | None = None


class NoteOut(Schema):
    id: int
    text: str
    passage: str = Field(description="The passage as it was when the note was made.")
    chunk_id: int | None = Field(description="The passage's chunk; null once the document is indexed again.")
    page: int | None
    where: NoteWhereOut
    created_at: datetime
    updated_at: datetime


class NoteIn(Schema):
    text: Text = Field(max_length=2000)
    chunk_id: int | None = Field(None, description="A passage of my document (a search result's chunk_id).")
    citation_id: int | None = Field(
        None, description="A citation of my report (`GET /api/topics/{id}/report`'s citations)."
    )
    followup_id: int | None = Field(
        None, description="A follow-up of my topic whose answer's citation to note (with citation_index)."
    )
    citation_index: int | None = Field(
        None,
        ge=0,
        description="With followup_id: the citation's place in the follow-up's `citations`, from 0.",
    )


class NoteEdit(Schema):
    # Checked after the note is found (another user's is a 404 whatever the body): not blank.
    text: str = Field("", max_length=2000)


class SearchOut(Schema):
    query: str
    results: list[PassageOut]
    notes: list[NoteOut] = Field(
        default_factory=list,
        description="My notes whose words or passage match the query (on documents and on reports).",
    )
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
@needs(TokenScope.DOCUMENTS)
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
@needs(TokenScope.DOCUMENTS)
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
    found_notes = [notes.as_dict(note) for note in notes.search(request.auth, query)] if query else []
    if not query or not Chunk.objects.for_user(request.auth).exists():
        message = NOTHING_INDEXED if query else ""
        return {"query": query, "results": [], "message": message, "notes": found_notes}
    try:
        passages = hybrid_search(request.auth, query, k=k)
    except EmbeddingError as error:
        raise HttpError(503, f"Search over documents is unavailable: {error}") from None
    noted = notes.by_chunk(request.auth, [passage.chunk_id for passage in passages])
    results = [
        {**vars(passage), "notes": [notes.as_dict(note) for note in noted.get(passage.chunk_id, [])]}
        for passage in passages
    ]
    message = "" if passages else NOTHING_MATCHES
    return {"query": query, "results": results, "message": message, "notes": found_notes}


# --- Notes on passages (retrieval/notes.py) ---------------------------------------------------------


@router.get("/notes", response=list[NoteOut], tags=["notes"])
def list_notes(request: HttpRequest) -> list[dict[str, Any]]:
    """My notes on passages, the latest changed first."""
    return [notes.as_dict(note) for note in notes.notes_of(request.auth)[: notes.MAX_NOTES]]


@router.post("/notes", response={201: NoteOut, **errors(404)}, tags=["notes"])
@needs(TokenScope.DOCUMENTS)
def add_note(request: HttpRequest, body: NoteIn) -> Status:
    """A note on a passage of my document (`chunk_id`), on the passage a citation of my report
    rests on (`citation_id`), or on the passage a citation of a follow-up's answer rests on
    (`followup_id` with `citation_index`): exactly one of them."""
    named = [body.chunk_id, body.citation_id, body.followup_id]
    if sum(value is not None for value in named) != 1:
        raise invalid(("body",), ["Give one of chunk_id, citation_id or followup_id."])
    if (body.followup_id is None) != (body.citation_index is None):
        raise invalid(("body", "citation_index"), ["citation_index goes with followup_id, and only with it."])
    try:
        if body.chunk_id is not None:
            chunk = Chunk.objects.for_user(request.auth).filter(pk=body.chunk_id).first()
            if chunk is None:
                raise Http404(f"Passage {body.chunk_id} not found.")
            note = notes.add_to_chunk(request.auth, chunk, body.text)
        elif body.citation_id is not None:
            note = notes.add_to_citation(request.auth, _citation(request, body.citation_id), body.text)
        else:
            followup, row = _followup_citation(request, body.followup_id, body.citation_index)
            note = notes.add_to_followup(request.auth, followup, row, body.text)
    except notes.NoteRejected as rejected:
        raise invalid(("body", "text"), [rejected.message]) from None
    return Status(201, notes.as_dict(notes.notes_of(request.auth).get(pk=note.pk)))


def _citation(request: HttpRequest, citation_id: int | None) -> Any:
    from django.apps import apps

    citation = (
        apps.get_model("research", "Citation")
        .objects.filter(pk=citation_id, report__topic__owner=request.auth)
        .select_related("report__topic")
        .first()
    )
    if citation is None:
        raise Http404(f"Citation {citation_id} not found.")
    return citation


def _followup_citation(
    request: HttpRequest, followup_id: int | None, index: int | None
) -> tuple[Any, dict[str, Any]]:
    """My answered follow-up and the `index`-th of its `citations`; 404 for anything else."""
    from django.apps import apps

    followup = (
        apps.get_model("research", "FollowUp")
        .objects.filter(pk=followup_id, topic__owner=request.auth, status="completed")
        .select_related("topic")
        .first()
    )
    if followup is None:
        raise Http404(f"Follow-up {followup_id} not found.")
    rows = followup.citations if isinstance(followup.citations, list) else []
    if index is None or not 0 <= index < len(rows) or not isinstance(rows[index], dict):
        raise Http404(f"Follow-up {followup_id} has no citation {index}.")
    return followup, rows[index]


def _note(request: HttpRequest, note_id: int) -> Any:
    note = notes.notes_of(request.auth).filter(pk=note_id).first()
    if note is None:
        raise Http404(f"Note {note_id} not found.")
    return note


@router.patch("/notes/{note_id}", response={200: NoteOut, **errors(404)}, tags=["notes"])
@needs(TokenScope.DOCUMENTS)
def edit_note(request: HttpRequest, note_id: int, body: NoteEdit) -> dict[str, Any]:
    """Change the text of my note."""
    try:
        return notes.as_dict(notes.update(_note(request, note_id), body.text))
    except notes.NoteRejected as rejected:
        raise invalid(("body", "text"), [rejected.message]) from None


@router.delete("/notes/{note_id}", response={204: None, **errors(404)}, tags=["notes"])
@needs(TokenScope.DOCUMENTS)
def delete_note(request: HttpRequest, note_id: int) -> Status:
    _note(request, note_id).delete()
    return Status(204, None)
