"""Move documents to the configured embedding model (`manage.py reembed`).

A document moves whole: its file is parsed again (or, when the file cannot be read, its text is
rebuilt from its stored passages, which are exact slices of it), chunked for the new model's
tokenizer, embedded, and its passages replaced in one transaction by ingest.store. Until that
transaction commits, its old passages are there: search compares the query's vector only with
chunks of the configured model, and finds the others by their words, so no document ever
disappears from search while a library moves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from retrieval.embeddings import EmbeddingError, model_id
from retrieval.ingest import index_documents
from retrieval.models import Chunk, UploadedDocument
from retrieval.parsing import ParsedDocument, ParseError, parse


@dataclass
class Outcome:
    moved: int = 0
    chunks: int = 0
    from_passages: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)


def documents_to_move(*, username: str | None = None, every: bool = False) -> list[UploadedDocument]:
    """Ready documents with at least one passage of another model than the configured one; with
    `every`, all ready documents (chunked and embedded again as a new upload would be)."""
    documents = UploadedDocument.objects.ready().select_related("owner")
    if not every:
        documents = documents.filter(
            pk__in=Chunk.objects.exclude(embedding_model=model_id()).values("document_id")
        )
    if username is not None:
        documents = documents.filter(owner__username=username)
    return list(documents.order_by("pk"))


def reembed_documents(
    documents: list[UploadedDocument],
    *,
    batch: int = 16,
    progress: Callable[[int, int], None] | None = None,
) -> Outcome:
    outcome = Outcome()
    for first in range(0, len(documents), batch):
        items = []
        for upload in documents[first : first + batch]:
            parsed, from_passages = document_text(upload)
            if parsed is None:
                outcome.failed.append((upload.original_name, "neither its file nor its passages can be read"))
                continue
            outcome.from_passages += from_passages
            items.append((upload, parsed))
        try:
            outcome.chunks += index_documents(items)
        except EmbeddingError as error:
            outcome.failed.extend((upload.original_name, str(error)) for upload, _ in items)
            break
        outcome.moved += len(items)
        if progress is not None:
            progress(min(first + batch, len(documents)), len(documents))
    return outcome


def document_text(upload: UploadedDocument) -> tuple[ParsedDocument | None, bool]:
    """The document parsed from its file, else rebuilt from its passages (True when so)."""
    try:
        with upload.file.open("rb") as handle:
            data = handle.read()
        return parse(data, filename=upload.original_name), False
    except (OSError, ValueError, ParseError):
        parsed = text_from_passages(list(upload.chunks.order_by("position")))
        return parsed, parsed is not None


def text_from_passages(chunks: list[Chunk]) -> ParsedDocument | None:
    """The document's text from its passages, each `text[char_start:char_end]` of it; what lay
    between two passages (whitespace only, for the chunker trims nothing else) becomes a blank
    line. Pages are rebuilt from the passages' pages."""
    if not chunks:
        return None
    length = max(chunk.char_end for chunk in chunks)
    characters: list[str | None] = [None] * length
    for chunk in chunks:
        characters[chunk.char_start : chunk.char_end] = list(chunk.text)[: chunk.char_end - chunk.char_start]
    text = "".join(character if character is not None else "\n" for character in characters)
    pages: list[tuple[int, int, int]] = []
    for chunk in sorted(chunks, key=lambda item: item.char_start):
        if chunk.page is None:
            continue
        if pages and pages[-1][0] == chunk.page:
            pages[-1] = (chunk.page, pages[-1][1], max(pages[-1][2], chunk.char_end))
        else:
            start = pages[-1][2] if pages else 0
            pages.append((chunk.page, min(start, chunk.char_start), chunk.char_end))
    if pages:
        pages[-1] = (pages[-1][0], pages[-1][1], length)
    return ParsedDocument(text, pages)
