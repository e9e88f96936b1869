"""*Add to my documents*: a web source of a report kept in its owner's library.

The page is stored as the reader got it — the Markdown the report was written from — as an
uploaded Markdown document named after the page's title, headed by its address and the date it
was read, and indexed like any upload (the owner's quotas apply; the same page kept twice is the
same document). From then on document search finds it and a topic over the owner's documents
cites it by that name.
"""

from __future__ import annotations

import re

from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils.translation import gettext as _

from research.models import Document
from retrieval.models import UploadedDocument
from retrieval.uploads import NAME_MAX_CHARS, UploadRejected, accept_upload

KEPT = (Document.FetchedVia.READER, Document.FetchedVia.DIRECT)
_UNSAFE_NAME = re.compile(r"[\x00-\x1f/\\*?\"<>|]+")


def can_keep(document: Document) -> bool:
    return document.fetched_via in KEPT and bool(document.url)


def keep(owner: User, document: Document) -> tuple[UploadedDocument, bool]:
    """Store the page as the owner's document (queued for indexing); (document, created).
    UploadRejected with the reason when it cannot be (quota, a source that is not a web page)."""
    if not can_keep(document):
        raise UploadRejected(_("Only a web page a report was written from can be added to your documents."))
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


def file_name(title: str) -> str:
    """The page's title as a file name the documents page and citations show."""
    cleaned = " ".join(_UNSAFE_NAME.sub(" ", title).split()).strip(". ") or "page"
    return cleaned[: NAME_MAX_CHARS - 3] + ".md"
