"""Passages, not pages: the parts of a long page that are about the sub-query.

A long page is cut into passages at headings and paragraphs (a paragraph longer than a passage
at sentence ends), the passages are ranked by BM25 against the sub-query and the question, and
the best ones, up to a character budget, stand for the page in its summary and in the answer.
So one long page no longer fills the context that five sources share, and the report can say
which passage it drew on. Short pages are used whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote as url_quote

from research.pipeline.text import BM25, tokenize

if TYPE_CHECKING:
    from research.models import Document

LONG_PAGE_CHARS = 6_000  # pages up to this long are used whole
PASSAGE_CHARS = 1_200
SUMMARY_BUDGET = 6_000
ANSWER_BUDGET = 5_000
SEPARATOR = "\n\n[…]\n\n"
# The opening passage often defines what the page is about: it gets this share of the best score.
LEAD_BONUS = 0.15

_BLOCK = re.compile(r"\S.*?(?=\n[ \t]*\n|\Z)", re.DOTALL)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+(?=[\"«“(\[]?[A-ZА-ЯЁ0-9])")
_MARKUP = (
    (re.compile(r"!\[[^\]]*\]\([^)]*\)"), " "),
    (re.compile(r"\[([^\]]*)\]\([^)]*\)"), r"\1"),
    (re.compile(r"<[^>]+>"), " "),
    (re.compile(r"^\s{0,3}(?:#{1,6}|>|[-*+]|\d{1,3}[.)])\s+", re.MULTILINE), ""),
    (re.compile(r"[*_`|]+"), ""),
)


@dataclass(frozen=True)
class Passage:
    start: int  # character offsets into the page's Markdown
    end: int
    heading: str  # the heading the passage sits under, "" before the first one
    text: str


def split_passages(markdown: str, size: int = PASSAGE_CHARS) -> list[Passage]:
    """Consecutive passages of about `size` characters; a heading starts a new one."""
    passages: list[Passage] = []
    heading = ""
    current: list[tuple[int, int]] = []
    current_heading = ""
    for start, end in _pieces(markdown, size):
        found = _HEADING.match(markdown, start, end)
        length = current[-1][1] - current[0][0] if current else 0
        if current and ((found and length >= size // 3) or length + (end - start) > size):
            passages.append(_passage(markdown, current, current_heading))
            current = []
        if found:
            heading = found.group(1).strip()
        if not current:
            current_heading = heading
        current.append((start, end))
    if current:
        passages.append(_passage(markdown, current, current_heading))
    return passages


def _passage(markdown: str, spans: list[tuple[int, int]], heading: str) -> Passage:
    start, end = spans[0][0], spans[-1][1]
    return Passage(start, end, heading, markdown[start:end])


def _pieces(markdown: str, size: int) -> list[tuple[int, int]]:
    """Paragraph spans; one longer than a passage is cut at sentence ends (or hard, if it has none)."""
    pieces = []
    for block in _BLOCK.finditer(markdown or ""):
        start, end = block.span()
        while end - start > size:
            cut = _cut(markdown, start, start + size) or start + size
            pieces.append((start, cut))
            start = cut + len(markdown[cut:end]) - len(markdown[cut:end].lstrip())
        if start < end:
            pieces.append((start, end))
    return pieces


def _cut(markdown: str, start: int, limit: int) -> int | None:
    """The last sentence end between the middle of the span and `limit`."""
    ends = [m.start() for m in _SENTENCE_END.finditer(markdown, (start + limit) // 2, limit)]
    return ends[-1] if ends else None


def rank_passages(passages: list[Passage], query: str) -> list[float]:
    """BM25 of each passage (heading included) for the query, plus a bonus for the opening one."""
    documents = [tokenize(f"{passage.heading} {passage.text}") for passage in passages]
    scores = BM25(documents).scores(tokenize(query))
    if scores and max(scores) > 0:
        scores[0] += LEAD_BONUS * max(scores)
    return scores


def choose_passages(markdown: str, query: str, budget: int) -> list[Passage]:
    """The best passages for the query within `budget` characters, in page order.

    A page that fits the budget (or is not long) is one passage. When nothing matches the
    query, the page's opening passages are used.
    """
    return sorted(_best_first(markdown, query, budget), key=lambda passage: passage.start)


def _best_first(markdown: str, query: str, budget: int) -> list[Passage]:
    text = markdown or ""
    if len(text) <= max(budget, LONG_PAGE_CHARS):
        return [Passage(0, len(text), "", text)] if text.strip() else []
    passages = split_passages(text)
    scores = rank_passages(passages, query)
    order = sorted(range(len(passages)), key=lambda i: (-scores[i], i))
    if not any(score > 0 for score in scores):
        order = list(range(len(passages)))
    chosen: list[Passage] = []
    used = 0
    for index in order:
        length = passages[index].end - passages[index].start
        if chosen and used + length > budget:
            continue
        chosen.append(passages[index])
        used += length
    return chosen


def excerpt(passages: list[Passage]) -> str:
    """The passages as one text, each under its heading, gaps marked."""
    parts = []
    for passage in passages:
        starts_with_heading = _HEADING.match(passage.text) is not None
        prefix = f"§ {passage.heading}\n\n" if passage.heading and not starts_with_heading else ""
        parts.append(prefix + passage.text.strip())
    return SEPARATOR.join(parts)


def plain(text: str) -> str:
    for pattern, replacement in _MARKUP:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


def quote(passage: Passage, words: int = 16) -> str:
    """The passage's opening words as plain text, for the sources list (its heading is shown
    on its own)."""
    body = _HEADING.sub("", passage.text)
    found = plain(body).split() or plain(passage.text).split()
    return " ".join(found[:words]) + ("…" if len(found) > words else "")


def text_fragment_url(url: str, text: str) -> str:
    """`url` with a text fragment that makes a browser scroll to and mark where `text` begins.

    Browsers that do not know text fragments, or pages whose text differs from the reader's
    Markdown, simply open the page at the top.
    """
    words = plain(text).rstrip("…").split()
    if not url or "#" in url or len(words) < 2:
        return url
    return f"{url}#:~:text={_fragment_term(words[:6])}"


def _fragment_term(words: list[str]) -> str:
    # "-" and "," separate the parts of a text directive, so inside a term they are escaped.
    return url_quote(" ".join(words), safe="").replace("-", "%2D")


def query_for(document: Document, question: str) -> str:
    """What a document's passages are ranked against: its sub-query and the question."""
    direction = document.hit.subquery.text if document.hit is not None else document.title
    return f"{direction} {question}"


def document_excerpt(document: Document, question: str, budget: int) -> str:
    return excerpt(choose_passages(document.text, query_for(document, question), budget))


def cited_passages(document: Document, question: str, budget: int) -> list[dict]:
    """The passages a long document was cited by (offsets, heading, opening words), the most
    relevant first; [] when the document was used whole."""
    if len(document.text) <= max(budget, LONG_PAGE_CHARS):
        return []
    chosen = _best_first(document.text, query_for(document, question), budget)
    return [{"start": p.start, "end": p.end, "heading": p.heading, "quote": quote(p)} for p in chosen]
