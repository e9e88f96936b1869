"""*Add to my documents*: a web source of a report kept in its owner's library.

When the source is a PDF — its address answers with one, or its page names the PDF it is about
(`citation_pdf_url`, as scholarly pages do) — the PDF itself is stored, fetched again through the
SSRF-safe client (mindsearch/clients/fetch.py) at most UPLOAD_MAX_BYTES, and read like any
uploaded PDF (OCR when it has no text layer), with its address and the date it was fetched.
Otherwise, or when the PDF cannot be had (too large, unreachable, a private address), the page
is stored as the reader got it — the Markdown the report was written from — as an uploaded
Markdown document named after the page's title, headed by its address and the date it was read.
Either is indexed like any upload (the owner's quotas apply; the same file kept twice is the
same document). From then on document search finds it and a topic over the owner's documents
cites it by that name.
"""

from __future__ import annotations

import logging
import re

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from django.utils.translation import gettext as _

from mindsearch.clients import fetch
from research.models import Document
from retrieval.models import UploadedDocument
from retrieval.uploads import NAME_MAX_CHARS, UploadRejected, accept_upload

log = logging.getLogger(__name__)

# A page that names no PDF costs one look at its head; a PDF of UPLOAD_MAX_BYTES has this long.
PDF_SECONDS = 30.0
KEPT = (Document.FetchedVia.READER, Document.FetchedVia.DIRECT)
_UNSAFE_NAME = re.compile(r"[\x00-\x1f/\\*?\"<>|]+")


def can_keep(document: Document) -> bool:
    return document.fetched_via in KEPT and bool(document.url)


def keep(owner: User, document: Document) -> tuple[UploadedDocument, bool]:
    """Store the page as the owner's document (queued for indexing); (document, created).
    UploadRejected with the reason when it cannot be (quota, a source that is not a web page)."""
    if not can_keep(document):
        raise UploadRejected(_("Only a web page a report was written from can be added to your documents."))
    pdf = pdf_behind(document)
    if pdf is not None:
        upload_file = SimpleUploadedFile(
            file_name(document.title or pdf.url, ".pdf"), pdf.body, content_type=fetch.PDF_TYPE
        )
        upload, created = accept_upload(owner, upload_file)
        if created:
            upload.source_url, upload.fetched_at = pdf.url[:2000], timezone.now()
            upload.save(update_fields=["source_url", "fetched_at"])
        return upload, created
    name = file_name(document.title or document.url)
    read_on = document.created_at.date().isoformat()
    read = _("read on %(date)s") % {"date": read_on}
    header = f"# {document.title or document.url}\n\n<{document.url}> — {read}\n\n"
    body = (header + document.text).encode()
    upload, created = accept_upload(owner, SimpleUploadedFile(name, body, content_type="text/markdown"))
    if created:
        upload.source_url, upload.fetched_at = document.url[:2000], document.created_at
        upload.save(update_fields=["source_url", "fetched_at"])
    return upload, created


def file_name(title: str, suffix: str = ".md") -> str:
    """The page's title as a file name the documents page and citations show."""
    cleaned = " ".join(_UNSAFE_NAME.sub(" ", title).split()).strip(". ") or "page"
    return cleaned[: NAME_MAX_CHARS - len(suffix)] + suffix


def pdf_behind(document: Document) -> fetch.FetchedFile | None:
    """The PDF the source is, or the one its page names; None when there is none or it cannot be
    had (the page's text is kept then)."""
    try:
        return async_to_sync(fetch.fetch_pdf)(
            document.url, max_bytes=settings.UPLOAD_MAX_BYTES, timeout=PDF_SECONDS
        )
    except fetch.FetchError as error:
        log.info("kept %s as its text, not its PDF: %s", document.url, error)
        return None
