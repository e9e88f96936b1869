"""The one place uploads are accepted (the documents page and the API both come here).

A file is checked before anything is stored: its size, the owner's document count, and its
type, which comes from the content; the name only serves to catch a file that is not what it
says it is. The same bytes uploaded again by the same owner are the document already there.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import PurePath
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import UploadedFile
from django.db import connection, transaction
from django.db.models import Count, Sum
from django.utils.translation import gettext as _

from retrieval import checkpoints, failures, tasks
from retrieval.models import CONTENT_TYPES, TYPE_LABELS, UploadedDocument
from retrieval.parsing import MARKDOWN_SUFFIXES, UNSUPPORTED, ParseError, sniff_kind
from retrieval.sizes import sizes_that_differ

log = logging.getLogger(__name__)

NAME_MAX_CHARS = 255
# Names that promise a format with a signature of its own: content of another kind under such a
# name is most likely not the document the user meant (a login page saved as paper.pdf).
CLAIMED_BY_SUFFIX = {".pdf": "pdf", ".docx": "docx"}


class UploadRejected(Exception):
    """A file was refused; `message` (translated, naming the file) is shown to the user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def accept_upload(owner: User, uploaded_file: UploadedFile) -> tuple[UploadedDocument, bool]:
    """Store a new document and queue its indexing, or return the owner's copy of the same bytes.

    Returns (document, created). Raises UploadRejected with a message for the user.
    """
    name = display_name(uploaded_file.name or "")
    check_size(name, uploaded_file.size or 0)
    sha256 = _sha256(uploaded_file)
    existing = UploadedDocument.objects.for_user(owner).filter(sha256=sha256).first()
    if existing is not None:
        return existing, False
    kind = check_type(name, uploaded_file)
    with transaction.atomic():
        _lock_owner_uploads(owner.pk)
        # Checked again under the lock: a second request with the same file may have won.
        existing = UploadedDocument.objects.for_user(owner).filter(sha256=sha256).first()
        if existing is not None:
            return existing, False
        check_document_count(owner)
        check_storage(owner, uploaded_file.size or 0)
        document = _store(owner, uploaded_file, name, kind, sha256)
        tasks.enqueue_ingest(document)
    return document, True


def delete_document(document: UploadedDocument) -> None:
    """Delete the document and its chunks; the stored file goes once the deletion is committed.

    The keyword statistics follow by themselves (database triggers on the chunk table), and an
    indexing run still under way for it finds it gone and stores nothing.
    """
    storage, path = document.file.storage, document.file.name
    checkpoint = checkpoints.paths(document)
    with transaction.atomic():
        document.delete()
        if path:
            transaction.on_commit(lambda: _remove_file(storage, path))
        transaction.on_commit(lambda: checkpoints.remove_paths(checkpoint))


def index_again(document: UploadedDocument) -> None:
    """Queue another indexing attempt for a document that failed (e.g. the model was missing);
    UploadRejected once it was indexed UPLOAD_MAX_INDEX_ATTEMPTS times (a file that fails the
    same way each time would cost a worker its parse budget again and again)."""
    if document.index_attempts >= settings.UPLOAD_MAX_INDEX_ATTEMPTS:
        raise UploadRejected(
            _("%(name)s was indexed %(n)d times without success; upload a different file.")
            % {"name": document.original_name, "n": document.index_attempts}
        )
    with transaction.atomic():
        document.queue_again()
        tasks.enqueue_ingest(document)


# --- Checks ----------------------------------------------------------------------------------------


def display_name(raw: str) -> str:
    """The file's own name, without any folder a browser sent along, never empty."""
    name = PurePath(raw.replace("\\", "/")).name.strip()
    name = "".join(char for char in name if char.isprintable())
    return name[:NAME_MAX_CHARS] or _("unnamed file")


def check_size(name: str, size: int) -> None:
    if size <= 0:
        raise UploadRejected(_("%(name)s is empty.") % {"name": name})
    if size > settings.UPLOAD_MAX_BYTES:
        # Precise enough to differ: a file 1 byte over 20 MB is not "20.0 MB; at most 20.0 MB".
        shown, limit = sizes_that_differ(size, settings.UPLOAD_MAX_BYTES)
        raise UploadRejected(
            _("%(name)s is %(size)s; files may be at most %(limit)s.")
            % {"name": name, "size": shown, "limit": limit}
        )


def check_type(name: str, uploaded_file: UploadedFile) -> str:
    """The content's kind ('pdf', 'docx', 'html', 'markdown' or 'text'), or UploadRejected."""
    content = uploaded_file.file  # the upload's bytes, in memory or in a temporary file
    if content is None:
        raise UploadRejected(_unsupported_message(name, UNSUPPORTED))
    try:
        kind = sniff_kind(content)
    except ParseError as error:
        raise UploadRejected(_unsupported_message(name, str(error))) from None
    suffix = PurePath(name).suffix.lower()
    claimed = CLAIMED_BY_SUFFIX.get(suffix)
    if claimed is not None and claimed != kind:
        raise UploadRejected(
            _("%(name)s is named like a %(claimed)s file, but its content is %(actual)s.")
            % {"name": name, "claimed": TYPE_LABELS[CONTENT_TYPES[claimed]], "actual": _content_phrase(kind)}
        )
    # Markdown may hold HTML (a centred logo at the top); named so, it is Markdown all the same.
    if kind in ("text", "html") and suffix in MARKDOWN_SUFFIXES:
        return "markdown"
    return kind


def check_document_count(owner: User) -> None:
    if UploadedDocument.objects.for_user(owner).count() >= settings.UPLOAD_MAX_DOCUMENTS:
        raise UploadRejected(
            _(
                "You already have %(limit)d documents, the most one account may keep."
                " Delete some to upload more."
            )
            % {"limit": settings.UPLOAD_MAX_DOCUMENTS}
        )


def check_storage(owner: User, size: int) -> None:
    """The owner's files together stay within UPLOAD_MAX_STORAGE_BYTES (0 = no limit)."""
    limit = settings.UPLOAD_MAX_STORAGE_BYTES
    if not limit:
        return
    from django.template.defaultfilters import filesizeformat

    used = quota(owner)["bytes"]
    if used + size > limit:
        raise UploadRejected(
            _(
                "Your documents take %(used)s of the %(limit)s one account may store."
                " Delete some to upload more."
            )
            % {"used": filesizeformat(used), "limit": filesizeformat(limit)}
        )


def quota(owner: User) -> dict[str, int]:
    """What the owner keeps against the account's limits (the documents page shows it)."""
    totals = UploadedDocument.objects.for_user(owner).aggregate(count=Count("id"), size=Sum("size_bytes"))
    return {
        "documents": totals["count"] or 0,
        "max_documents": settings.UPLOAD_MAX_DOCUMENTS,
        "bytes": totals["size"] or 0,
        "max_bytes": settings.UPLOAD_MAX_STORAGE_BYTES,
    }


def check_file_count(count: int) -> None:
    """One upload request may carry at most UPLOAD_MAX_FILES files."""
    if count > settings.UPLOAD_MAX_FILES:
        raise UploadRejected(
            _("%(count)d files were sent at once; upload at most %(limit)d at a time.")
            % {"count": count, "limit": settings.UPLOAD_MAX_FILES}
        )


def _unsupported_message(name: str, reason: str) -> str:
    if reason == UNSUPPORTED:
        return _("%(name)s is not a PDF, DOCX, RTF, Markdown, text or HTML file.") % {"name": name}
    # A DOCX refused before reading (a zip bomb, say): the parser's own words are the detail.
    return _("%(name)s cannot be read: %(reason)s.") % {"name": name, "reason": failures.translate(reason)}


def _content_phrase(kind: str) -> str:
    phrases = {
        "pdf": _("a PDF"),
        "docx": _("a DOCX document"),
        "html": _("an HTML page"),
        "text": _("plain text"),
    }
    return phrases[kind]


# --- Storing ---------------------------------------------------------------------------------------


def _sha256(uploaded_file: UploadedFile) -> str:
    digest = hashlib.sha256()
    uploaded_file.seek(0)
    for block in uploaded_file.chunks():
        digest.update(block)
    uploaded_file.seek(0)
    return digest.hexdigest()


def _lock_owner_uploads(owner_id: int) -> None:
    # One upload per owner at a time between the duplicate/count checks and the insert.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext('retrieval.upload'), %s::integer)", [owner_id])


def _store(owner: User, uploaded_file: UploadedFile, name: str, kind: str, sha256: str) -> UploadedDocument:
    document = UploadedDocument(
        owner=owner,
        original_name=name,
        content_type=CONTENT_TYPES[kind],
        size_bytes=uploaded_file.size or 0,
        sha256=sha256,
    )
    storage = document.file.storage
    path = document.file.field.generate_filename(document, name)
    # The path is the owner's and the hash's; with no row for them (checked under the lock), a
    # file already there was left by a transaction that rolled back: the same bytes, replaced.
    if storage.exists(path):
        storage.delete(path)
    document.file.save(name, uploaded_file, save=False)
    try:
        document.save()
    except Exception:
        _remove_file(storage, document.file.name)
        raise
    return document


def _remove_file(storage: Any, path: str) -> None:
    try:
        storage.delete(path)
    except OSError as error:
        log.warning("could not delete the uploaded file %s: %s", path, error)
