"""Notes on passages: a user's own words on a passage of one of their documents, or on the passage
a citation of one of their reports rests on, or of a follow-up's answer (issue 31).

A note quotes its passage as it was when made, so it stays findable when the document is indexed
again (its chunk link is cleared) and readable whatever becomes of the page. Document search
finds notes by their words and their passage's, stemmed in English and Russian like passages
are (`search`), and shows each passage's notes beside it. Only the owner sees, edits or deletes
a note; an account keeps at most MAX_NOTES.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

from django.contrib.auth.models import User
from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector
from django.db.models import QuerySet
from django.urls import reverse
from django.utils.text import Truncator
from django.utils.translation import gettext as _

from retrieval.models import KEYWORD_CONFIG, Chunk, PassageNote

MAX_NOTE_CHARS = 2_000
MAX_PASSAGE_CHARS = 4_000
MAX_NOTES = 2_000
MAX_QUERY_WORDS = 30
FOUND = 20


class NoteRejected(Exception):
    """A note that cannot be saved; the message is for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def notes_of(owner: User) -> QuerySet[PassageNote]:
    notes = PassageNote.objects.filter(owner=owner).select_related(
        "document", "chunk", "citation__report__topic", "followup__topic"
    )
    return notes.defer(
        "chunk__embedding",
        "chunk__stemmed_vector",
        "citation__report__rendering",
        "followup__rendering",
        "followup__draft",
    )


def clean_text(text: Any) -> str:
    text = str(text or "").strip()
    if not text:
        raise NoteRejected(_("Write something in the note."))
    if len(text) > MAX_NOTE_CHARS:
        message = _("A note is at most %(n)d characters; this one has %(count)d.")
        raise NoteRejected(message % {"n": MAX_NOTE_CHARS, "count": len(text)})
    if "\x00" in text:
        raise NoteRejected(_("The note holds characters that cannot be stored."))
    return text


def _check_room(owner: User) -> None:
    if PassageNote.objects.filter(owner=owner).count() >= MAX_NOTES:
        raise NoteRejected(_("You have %(n)d notes, the most one account may keep.") % {"n": MAX_NOTES})


def add_to_chunk(owner: User, chunk: Chunk, text: Any) -> PassageNote:
    """A note on a passage of the owner's document (the caller has checked it is theirs)."""
    if chunk.owner_id != owner.pk:
        raise NoteRejected(_("That passage is not one of your documents'."))
    text = clean_text(text)
    _check_room(owner)
    return PassageNote.objects.create(
        owner=owner,
        text=text,
        passage=chunk.text[:MAX_PASSAGE_CHARS],
        document_id=chunk.document_id,
        chunk=chunk,
        page=chunk.page,
    )


def add_to_citation(owner: User, citation: Any, text: Any) -> PassageNote:
    """A note on the passage a citation of the owner's report rests on (research/views_notes.py)."""
    if citation.report.topic.owner_id != owner.pk:
        raise NoteRejected(_("That passage is not one of your reports'."))
    text = clean_text(text)
    _check_room(owner)
    passage = citation.passage or citation.sentence
    return PassageNote.objects.create(
        owner=owner, text=text, passage=passage[:MAX_PASSAGE_CHARS], citation=citation
    )


def add_to_followup(owner: User, followup: Any, row: dict[str, Any], text: Any) -> PassageNote:
    """A note on the passage a citation of a follow-up's answer rests on: `row`, one of the
    follow-up's `citations` (research/views_notes.py)."""
    if followup.topic.owner_id != owner.pk:
        raise NoteRejected(_("That passage is not one of your reports'."))
    text = clean_text(text)
    _check_room(owner)
    passage = str(row.get("passage") or row.get("sentence") or "")
    return PassageNote.objects.create(
        owner=owner,
        text=text,
        passage=passage[:MAX_PASSAGE_CHARS],
        followup=followup,
        sentence_index=int(row["sentence_index"]),
        n=int(row["n"]),
    )


def on_followup(owner: User, followup: Any, sentence_index: int, n: int) -> list[PassageNote]:
    """The owner's notes on one citation of a follow-up's answer, oldest first."""
    found = notes_of(owner).filter(followup=followup, sentence_index=sentence_index, n=n)
    return list(found.order_by("created_at"))


def update(note: PassageNote, text: Any) -> PassageNote:
    note.text = clean_text(text)
    note.save(update_fields=["text", "updated_at"])
    return note


def search(owner: User, query: str, limit: int = FOUND) -> list[PassageNote]:
    """The owner's notes whose words or passage share a word (stemmed) with the query, the
    closest first."""
    words = [word for word in query.split() if any(char.isalnum() for char in word)][:MAX_QUERY_WORDS]
    if not words:
        return []
    asked = reduce(
        lambda left, right: left | right,
        (SearchQuery(word, config=KEYWORD_CONFIG, search_type="plain") for word in words),
    )
    vector = SearchVector("text", weight="A", config=KEYWORD_CONFIG) + SearchVector(
        "passage", weight="B", config=KEYWORD_CONFIG
    )
    found = (
        notes_of(owner)
        .annotate(found=vector, rank=SearchRank(vector, asked))
        .filter(found=asked)
        .order_by("-rank", "-updated_at")
    )
    return list(found[:limit])


def by_chunk(owner: User, chunk_ids: list[int]) -> dict[int, list[PassageNote]]:
    """The owner's notes on these passages, by chunk id (for search results)."""
    found: dict[int, list[PassageNote]] = {}
    for note in notes_of(owner).filter(chunk_id__in=chunk_ids).order_by("created_at"):
        assert note.chunk_id is not None
        found.setdefault(note.chunk_id, []).append(note)
    return found


def where(note: PassageNote) -> dict[str, Any]:
    """Where the passage is, for a page or the API: a label and a link to it."""
    if note.document is not None:
        label = note.document.original_name
        if note.page:
            label += " · " + _("page %(page)s") % {"page": note.page}
        url = reverse("document_detail", args=[note.document_id])
        if note.chunk is not None:
            url += f"?from={note.chunk.position}"
        return {"kind": "document", "label": label, "url": url, "document_id": note.document_id}
    if note.followup is not None:
        followup = note.followup
        label = " · ".join(
            (
                Truncator(followup.topic.question).chars(80),
                Truncator(followup.section or followup.question).chars(80),
                f"[{note.n}]",
            )
        )
        url = reverse("topic_detail", args=[followup.topic_id]) + f"#followup-{followup.pk}"
        return {
            "kind": "followup",
            "label": label,
            "url": url,
            "topic_id": followup.topic_id,
            "followup_id": followup.pk,
        }
    citation = note.citation
    assert citation is not None
    topic = citation.report.topic
    label = f"{Truncator(topic.question).chars(120)} · [{citation.n}]"
    url = reverse("topic_detail", args=[topic.pk]) + f"#source-{citation.n}"
    return {"kind": "report", "label": label, "url": url, "topic_id": topic.pk, "citation_id": citation.pk}


def as_dict(note: PassageNote) -> dict[str, Any]:
    return {
        "id": note.pk,
        "text": note.text,
        "passage": note.passage,
        "chunk_id": note.chunk_id,
        "page": note.page,
        "where": where(note),
        "created_at": note.created_at,
        "updated_at": note.updated_at,
    }
