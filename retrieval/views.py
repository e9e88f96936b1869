"""My documents: upload, the list with live indexing status, one document, delete, and search.

Every lookup starts from the signed-in user; another user's document ids are a 404.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.text import Truncator
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from mindsearch.requests import HtmxHttpRequest, signed_in
from mindsearch.status import ERROR, check_embeddings, check_worker
from retrieval import notes, uploads
from retrieval.embeddings import EmbeddingError
from retrieval.highlight import highlight_all, mark_words
from retrieval.models import UploadedDocument
from retrieval.search import Passage, hybrid_search, keyword_search

SEARCH_RESULTS = 10
PREVIEW_CHUNKS = 5
PREVIEW_CHARS = 600
# Fused scores are min-max normalised per leg, so among a handful of passages the last ones score
# near 0 whatever they say; a reader is shown only those within this fraction of the best.
MIN_RELATIVE_SCORE = 0.1


@dataclass(frozen=True)
class UploadOutcome:
    level: str  # a message level: success, info or error
    text: str
    document: UploadedDocument | None = None


def _document(request: HttpRequest, document_id: int) -> UploadedDocument:
    return get_object_or_404(UploadedDocument.objects.for_user(request.user), pk=document_id)


# --- The list ----------------------------------------------------------------------------------------


def list_context(user: User) -> dict[str, Any]:
    """What the documents card shows, and the version the live refresh compares against."""
    documents = list(UploadedDocument.objects.for_user(user))
    # Translated once, not once per row: get_status_display translates every choice per call.
    labels = {value: str(label) for value, label in UploadedDocument.Status.choices}
    for document in documents:
        document.status_label = labels[document.status]
    in_progress = any(not document.is_settled for document in documents)
    worker_missing = in_progress and check_worker().state == ERROR
    rows = [(d.pk, d.status, d.chunk_count, d.updated_at.isoformat()) for d in documents]
    version = hashlib.sha256(repr((rows, worker_missing)).encode()).hexdigest()[:16]
    return {
        "documents": documents,
        "in_progress": in_progress,
        "worker_missing": worker_missing,
        "version": version,
    }


@require_GET
def document_list(request: HttpRequest) -> HttpResponse:
    context = list_context(signed_in(request))
    context.update(
        embeddings=_embedding_problem(),
        upload_max_bytes=settings.UPLOAD_MAX_BYTES,
        upload_max_files=settings.UPLOAD_MAX_FILES,
        quota=uploads.quota(signed_in(request)),
    )
    return render(request, "retrieval/document_list.html", context)


@require_GET
def document_rows(request: HttpRequest) -> HttpResponse:
    """The documents card, polled while something is being indexed; 204 while nothing changed.

    `announced` names the documents whose upload message says "indexing has started": once one
    is indexed (or has failed) its message is replaced to say so, and it is announced no more."""
    user = signed_in(request)
    context = list_context(user)
    if request.GET.get("version") == context["version"]:
        return HttpResponse(status=204)
    announced = _announced(request.GET.get("announced", ""))
    settled = [d for d in context["documents"] if d.pk in announced and d.is_settled]
    context.update(settled=settled, announced=[pk for pk in announced if pk not in {d.pk for d in settled}])
    return render(request, "retrieval/_document_rows.html", context)


def _announced(value: str) -> list[int]:
    """The document ids of a poll's `announced` (a few, comma-separated; anything else ignored)."""
    return [
        int(part)
        for part in value.split(",")[: settings.UPLOAD_MAX_FILES]
        if part.isdigit() and len(part) < 10
    ]


def _embedding_problem() -> Any:
    check = check_embeddings()
    return check if check.state == ERROR else None


# --- Upload ------------------------------------------------------------------------------------------


@require_POST
def document_upload(request: HtmxHttpRequest) -> HttpResponse:
    user = signed_in(request)
    outcomes = upload_files(user, request.FILES.getlist("files"))
    if request.htmx:
        context = list_context(user)
        context.update(outcomes=outcomes, quota=uploads.quota(user))  # the quota line, updated
        # The live list tells these messages when their documents are indexed (document_rows).
        context["announced"] = [o.document.pk for o in outcomes if o.document and not o.document.is_settled]
        return render(request, "retrieval/_upload_results.html", context)
    for outcome in outcomes:
        messages.add_message(request, getattr(messages, outcome.level.upper()), outcome.text)
    return redirect("document_list")


def upload_files(user: User, files: list[Any]) -> list[UploadOutcome]:
    if not files:
        return [UploadOutcome("error", _("Choose at least one file to upload."))]
    try:
        uploads.check_file_count(len(files))
    except uploads.UploadRejected as rejected:
        return [UploadOutcome("error", rejected.message)]
    return [upload_one(user, uploaded_file) for uploaded_file in files]


def upload_one(user: User, uploaded_file: Any) -> UploadOutcome:
    try:
        document, created = uploads.accept_upload(user, uploaded_file)
    except uploads.UploadRejected as rejected:
        return UploadOutcome("error", rejected.message)
    if created:
        text = _("%(name)s was uploaded; indexing has started.") % {"name": document.original_name}
        return UploadOutcome("success", text, document)
    names = {"name": uploads.display_name(uploaded_file.name or ""), "existing": document.original_name}
    if names["name"] == names["existing"]:
        text = _("%(name)s was already uploaded; it was not added again.") % names
    else:
        text = _("%(name)s was already uploaded as %(existing)s; it was not added again.") % names
    return UploadOutcome("info", text, document)


# --- One document ------------------------------------------------------------------------------------


@require_GET
def document_detail(request: HttpRequest, document_id: int) -> HttpResponse:
    """The document's facts and first passages; `?from=N` (a report's citation preview links
    here) shows the passages from the N-th on, whole, with the first of them marked."""
    document = _document(request, document_id)
    start = _position(request.GET.get("from"))
    chunks = document.chunks.defer("embedding", "stemmed_vector")
    if start is not None:
        chunks = chunks.filter(position__gte=start)
    limit = PREVIEW_CHARS if start is None else None
    shown = list(chunks.order_by("position")[:PREVIEW_CHUNKS])
    noted = notes.by_chunk(signed_in(request), [chunk.pk for chunk in shown])
    previews = [
        (
            chunk,
            mark_words(Truncator(chunk.text).chars(limit) if limit else chunk.text, _no_word),
            noted.get(chunk.pk, []),
        )
        for chunk in shown
    ]
    context = {
        "document": document,
        "previews": previews,
        "cited_from": start,
        "embeddings": _embedding_problem(),
    }
    return render(request, "retrieval/document_detail.html", context)


def _position(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and len(value) < 10 else None


def _no_word(_word: str) -> bool:
    return False


@require_GET
def document_status(request: HttpRequest, document_id: int) -> HttpResponse:
    """The detail page's status block, polled until the document is ready or failed."""
    document = _document(request, document_id)
    return render(request, "retrieval/_document_status.html", {"document": document})


@require_GET
def document_file(request: HttpRequest, document_id: int) -> FileResponse:
    """The original file, for its owner only and always as a download (an uploaded HTML page
    must never render on this site)."""
    document = _document(request, document_id)
    try:
        handle = document.file.open("rb")
    except OSError:
        raise Http404(_("The stored file of this document is missing.")) from None
    return FileResponse(
        handle,
        as_attachment=True,
        filename=document.original_name,
        content_type=document.content_type or "application/octet-stream",
    )


@require_http_methods(["GET", "POST"])
def document_delete(request: HttpRequest, document_id: int) -> HttpResponse:
    """GET asks for confirmation (a page of its own, so it works without JavaScript); POST deletes."""
    document = _document(request, document_id)
    if request.method == "GET":
        return render(request, "retrieval/document_confirm_delete.html", {"document": document})
    name = document.original_name
    uploads.delete_document(document)
    messages.success(request, _("%(name)s was deleted, with its file and its passages.") % {"name": name})
    return redirect("document_list")


@require_POST
def document_retry(request: HttpRequest, document_id: int) -> HttpResponse:
    document = _document(request, document_id)
    if document.status == UploadedDocument.Status.FAILED or document.is_stalled:
        try:
            uploads.index_again(document)
        except uploads.UploadRejected as refused:
            messages.error(request, refused.message)
        else:
            messages.info(
                request, _("%(name)s is queued for indexing again.") % {"name": document.original_name}
            )
    return redirect("document_detail", document_id=document.pk)


# --- Search ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    passage: Passage
    html: str
    notes: list[Any] = field(default_factory=list)  # the user's notes on the passage


@require_GET
def document_search(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()[:500]
    ready = UploadedDocument.objects.for_user(request.user).ready()
    context: dict[str, Any] = {"query": query, "has_ready": ready.exists(), "results": [], "notice": ""}
    context["has_any"] = context["has_ready"] or UploadedDocument.objects.for_user(request.user).exists()
    if query and context["has_ready"]:
        passages, context["notice"] = search_passages(signed_in(request), query)
        passages = worth_showing(passages)
        texts = highlight_all(query, [passage.text for passage in passages])
        noted = notes.by_chunk(signed_in(request), [passage.chunk_id for passage in passages])
        context["results"] = [
            Result(passage, html, noted.get(passage.chunk_id, []))
            for passage, html in zip(passages, texts, strict=True)
        ]
    if query:  # notes on reports' passages too, with or without documents
        context["found_notes"] = [
            (note, notes.where(note)) for note in notes.search(signed_in(request), query)
        ]
    return render(request, "retrieval/document_search.html", context)


def worth_showing(passages: list[Passage]) -> list[Passage]:
    best = max((passage.score for passage in passages), default=0.0)
    return [passage for passage in passages if passage.score >= MIN_RELATIVE_SCORE * best]


def search_passages(user: User, query: str) -> tuple[list[Passage], str]:
    """Hybrid search, or keyword search alone (and why) when the embedding model is unavailable."""
    problem = _embedding_problem()
    if problem is None:
        try:
            return hybrid_search(user, query, k=SEARCH_RESULTS), ""
        except EmbeddingError as error:
            reason = str(error)
    else:
        reason = problem.summary
    notice = _("Matching by meaning is unavailable (%(reason)s); these results match your words only.") % {
        "reason": reason
    }
    return keyword_search(user, query, k=SEARCH_RESULTS), notice
