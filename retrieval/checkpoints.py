"""What an indexing run has done so far, kept on disk so that the next run goes on from there.

A big file (a 600-page book: thousands of passages) is embedded in batches; each batch's vectors
are appended to the document's checkpoint file as soon as they exist, and the parsed text is kept
beside them. A run stopped midway — the worker's task timeout (django-q2 raises SystemExit), a
worker restart, a killed process — leaves both behind, and the next run (queued again by the
stopped one, handed out again by the broker, or *Index again*) reads the text from there instead
of parsing (and OCR-ing) the file again, and embeds only the passages not yet in the file. The
chunks still reach the database in one transaction at the end, so search never sees half a
document. The files go once the document is ready, fails for good, or is deleted.

Vectors are keyed by a digest of the exact text embedded, and the file is tied to the model
that made them: a passage chunked differently, or another model, is embedded afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
from django.conf import settings

from retrieval.models import EMBEDDING_DIMENSIONS, UploadedDocument
from retrieval.parsing import ParsedDocument

MAGIC = b"MSVEC1\n"
DIGEST_BYTES = 20
RECORD_BYTES = DIGEST_BYTES + 4 * EMBEDDING_DIMENSIONS


def folder() -> Path:
    return Path(settings.MEDIA_ROOT) / "indexing"


def _stem(upload: UploadedDocument) -> Path:
    return folder() / f"{upload.pk}-{upload.sha256[:16]}"


def digest(text: str) -> bytes:
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).digest()


def save_parsed(upload: UploadedDocument, parsed: ParsedDocument) -> None:
    path = _stem(upload).with_suffix(".parsed.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "text": parsed.text,
        "pages": parsed.pages,
        "title": parsed.title,
        "unreadable_pages": parsed.unreadable_pages,
    }
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
    os.replace(temporary, path)


def load_parsed(upload: UploadedDocument) -> ParsedDocument | None:
    path = _stem(upload).with_suffix(".parsed.json")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        return ParsedDocument(
            payload["text"],
            [(int(a), int(b), int(c)) for a, b, c in payload["pages"]],
            payload["title"],
            [int(page) for page in payload["unreadable_pages"]],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Vectors:
    """The vectors embedded so far for one document by one model, appended batch by batch."""

    def __init__(self, upload: UploadedDocument, model: str) -> None:
        self.path = _stem(upload).with_suffix(".vectors")
        self.header = MAGIC + model.encode("utf-8") + b"\n"

    def load(self) -> dict[bytes, list[float]]:
        """Digest → vector for every whole record; a file of another model counts as none."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return {}
        if not data.startswith(self.header):
            return {}
        body = data[len(self.header) :]
        whole = len(body) - len(body) % RECORD_BYTES  # a record cut short by a kill is dropped
        found: dict[bytes, list[float]] = {}
        for start in range(0, whole, RECORD_BYTES):
            key = body[start : start + DIGEST_BYTES]
            vector = np.frombuffer(body, dtype="<f4", count=EMBEDDING_DIMENSIONS, offset=start + DIGEST_BYTES)
            found[key] = vector.tolist()
        return found

    def append(self, texts: list[str], vectors: list[list[float]]) -> None:
        """Write a batch and make it durable before the run goes on."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.path.open("rb") as handle:
                fresh = handle.read(len(self.header)) != self.header
            size = self.path.stat().st_size
        except OSError:
            fresh, size = True, 0
        with self.path.open("wb" if fresh else "ab") as handle:
            if fresh:
                handle.write(self.header)
            else:
                # A record a killed run left half-written would shift every later one.
                body = size - len(self.header)
                handle.truncate(len(self.header) + body - body % RECORD_BYTES)
            for text, vector in zip(texts, vectors, strict=True):
                handle.write(digest(text) + np.asarray(vector, dtype="<f4").tobytes())
            handle.flush()
            os.fsync(handle.fileno())


def remove(upload: UploadedDocument) -> None:
    """Forget the document's checkpoint (ready, failed for good, or deleted)."""
    remove_paths(paths(upload))


def paths(upload: UploadedDocument) -> list[Path]:
    """The checkpoint's files (taken before a deletion, which clears the primary key)."""
    stem = _stem(upload)
    return [stem.with_suffix(suffix) for suffix in (".vectors", ".parsed.json", ".tmp")]


def remove_paths(files: list[Path]) -> None:
    for path in files:
        path.unlink(missing_ok=True)


def exists(upload: UploadedDocument) -> bool:
    return _stem(upload).with_suffix(".parsed.json").exists()
