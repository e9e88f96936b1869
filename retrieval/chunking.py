"""Split a document's text into overlapping chunks that each fit the embedding model's window.

Pure: no Django, no model. The text is cut at Markdown headings and page breaks first (a chunk
never spans two sections or two pages, so its page is exact), then at blank-line paragraphs and
sentences; pieces are merged up to about
`target` characters, and each chunk after the first in a section repeats up to `overlap`
characters of whole sentences from the one before. Every chunk is an exact slice of the
text, `text[start:end]`, so citations can point back into the document.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

HEADING = re.compile(r"^#{1,6}[ \t]+\S.*$", re.MULTILINE)
PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
# Tried only where a run of stops begins, and possessive: "....x" is one failed try, not one per
# dot with every shorter run tried again (quadratic on a line of dots).
SENTENCE_END = re.compile(r"(?<![.!?…])[.!?…]++[\"'»”’)\]]*+(?=\s)")
WORD = re.compile(r"\S+")
# A chunk may end early at a paragraph break once it holds this share of the target.
PARAGRAPH_CUT_SHARE = 0.5
# About 250 tokens of multilingual-e5-small's tokenizer in English or Russian prose alike (its
# window is 512): short enough that a passage is about one thing, long enough to say it.
TARGET_CHARS = 1000
OVERLAP_CHARS = 150
# A section (or a whole short document: an abstract, a note) that the model reads whole in one
# window, and that is no longer than this, stays one chunk: cut in two, each half loses what the
# other says, and the second its heading.
WHOLE_SECTION_CHARS = 2500

CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class ChunkSpan:
    text: str
    start: int
    end: int
    page: int | None
    heading: str


@dataclass(frozen=True)
class _Piece:
    start: int
    end: int
    tokens: int  # without the model's fixed overhead ([CLS] and [SEP])
    section: int
    opens_paragraph: bool


@dataclass(frozen=True)
class _Limits:
    target: int
    max_tokens: int  # for the pieces' own tokens, the fixed overhead already taken off
    whole_section: int  # a section up to this many characters, within max_tokens, is one chunk


def chunk(
    text: str,
    pages: list[tuple[int, int, int]] | None = None,
    *,
    target: int = TARGET_CHARS,
    overlap: int = OVERLAP_CHARS,
    max_tokens: int = 256,
    whole_section: int = WHOLE_SECTION_CHARS,
    count_tokens: CountTokens,
) -> list[ChunkSpan]:
    """Chunks of `text`; `pages` are (page number, start, end) and give each chunk its page."""
    overhead = count_tokens("")
    limits = _Limits(target, max_tokens - overhead, whole_section)
    page_starts = [start for _, start, _ in pages or []]
    pieces = list(_pieces(text, page_starts, limits, count_tokens, overhead))
    locate = _Locator(text, pages or [])
    spans = []

    def whole_fits(start: int, end: int) -> bool:
        return count_tokens(text[start:end]) <= max_tokens

    for first, last in _merge(pieces, limits, overlap, whole_fits):
        start, end = _fit(text, pieces, first, last, max_tokens, count_tokens)
        spans.append(ChunkSpan(text[start:end], start, end, locate.page(start), locate.heading(start)))
    return spans


# --- Pieces: headings, paragraphs, sentences, words ---------------------------------------------


def _pieces(
    text: str, page_starts: list[int], limits: _Limits, count_tokens: CountTokens, overhead: int
) -> Iterator[_Piece]:
    section, page = 0, bisect.bisect_right(page_starts, 0)
    section_has_body = False
    for start, end, is_heading in _blocks(text, page_starts):
        block_page = bisect.bisect_right(page_starts, start)
        if block_page != page or (is_heading and section_has_body):
            section, section_has_body, page = section + 1, False, block_page
        section_has_body = section_has_body or not is_heading
        opens = True
        for piece_start, piece_end in _split_block(text, start, end, limits, count_tokens, overhead):
            tokens = count_tokens(text[piece_start:piece_end]) - overhead
            yield _Piece(piece_start, piece_end, tokens, section, opens)
            opens = False


def _blocks(text: str, page_starts: list[int]) -> Iterator[tuple[int, int, bool]]:
    """(start, end, is_heading) of each heading line and each paragraph, whitespace trimmed."""
    pages = {start for start in page_starts if 0 < start < len(text)}
    cuts = sorted({0, len(text)} | pages | _heading_bounds(text) | _paragraph_bounds(text))
    heading_starts = {match.start() for match in HEADING.finditer(text)}
    for start, end in itertools.pairwise(cuts):
        trimmed = _trim(text, start, end)
        if trimmed:
            yield trimmed[0], trimmed[1], start in heading_starts


def _heading_bounds(text: str) -> set[int]:
    return {bound for match in HEADING.finditer(text) for bound in (match.start(), match.end())}


def _paragraph_bounds(text: str) -> set[int]:
    return {match.end() for match in PARAGRAPH_BREAK.finditer(text)}


def _trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _split_block(
    text: str, start: int, end: int, limits: _Limits, count_tokens: CountTokens, overhead: int
) -> Iterator[tuple[int, int]]:
    for sentence_start, sentence_end in _sentences(text, start, end):
        if _fits_alone(text[sentence_start:sentence_end], limits, count_tokens, overhead):
            yield sentence_start, sentence_end
        else:
            yield from _word_windows(text, sentence_start, sentence_end, limits, count_tokens, overhead)


def _sentences(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    position = start
    for match in SENTENCE_END.finditer(text, start, end):
        trimmed = _trim(text, position, match.end())
        if trimmed:
            yield trimmed
        position = match.end()
    trimmed = _trim(text, position, end)
    if trimmed:
        yield trimmed


def _fits_alone(piece: str, limits: _Limits, count_tokens: CountTokens, overhead: int) -> bool:
    return len(piece) <= limits.target and count_tokens(piece) - overhead <= limits.max_tokens


def _word_windows(
    text: str, start: int, end: int, limits: _Limits, count_tokens: CountTokens, overhead: int
) -> Iterator[tuple[int, int]]:
    """A sentence too long for one chunk, cut between words (and inside words that are huge)."""
    window_start: int | None = None
    window_end = window_tokens = 0
    for word_start, word_end in _words(text, start, end, limits, count_tokens, overhead):
        tokens = count_tokens(text[word_start:word_end]) - overhead
        too_big = word_end - (window_start or 0) > limits.target or window_tokens + tokens > limits.max_tokens
        if window_start is not None and too_big:
            yield window_start, window_end
            window_start = None
        if window_start is None:
            window_start, window_tokens = word_start, 0
        window_end, window_tokens = word_end, window_tokens + tokens
    if window_start is not None:
        yield window_start, window_end


def _words(
    text: str, start: int, end: int, limits: _Limits, count_tokens: CountTokens, overhead: int
) -> Iterator[tuple[int, int]]:
    for match in WORD.finditer(text, start, end):
        if _fits_alone(match.group(), limits, count_tokens, overhead):
            yield match.span()
            continue
        # A "word" longer than a chunk (a URL, base64): fixed slices, each surely under the cap.
        step = max(1, min(limits.target, limits.max_tokens // 2))
        for slice_start in range(match.start(), match.end(), step):
            yield slice_start, min(slice_start + step, match.end())


# --- Merging pieces into chunks ----------------------------------------------------------------


def _merge(
    pieces: list[_Piece], limits: _Limits, overlap: int, whole_fits: Callable[[int, int], bool]
) -> Iterator[tuple[int, int]]:
    """(first, last) piece indices of each chunk."""
    first = 0
    while first < len(pieces):
        whole = _whole_section(pieces, first, limits, whole_fits)
        if whole is not None:
            yield first, whole - 1
            first = whole
            continue
        end = _grow(pieces, first, limits)
        if end < len(pieces) and pieces[end].section == pieces[first].section:
            end = _paragraph_cut(pieces, first, end, limits)
        yield first, end - 1
        first = _next_first(pieces, first, end, limits, overlap)


def _whole_section(
    pieces: list[_Piece], first: int, limits: _Limits, whole_fits: Callable[[int, int], bool]
) -> int | None:
    """The end of the section that starts at `first` when it fits one chunk whole, else None
    (`whole_fits` counts the span's tokens exactly: a tokenizer need not be additive)."""
    if first > 0 and pieces[first - 1].section == pieces[first].section:
        return None
    end = first
    while end < len(pieces) and pieces[end].section == pieces[first].section:
        end += 1
    chars = pieces[end - 1].end - pieces[first].start
    tokens = sum(piece.tokens for piece in pieces[first:end])
    if chars > limits.whole_section or tokens > limits.max_tokens:
        return None
    return end if whole_fits(pieces[first].start, pieces[end - 1].end) else None


def _grow(pieces: list[_Piece], first: int, limits: _Limits) -> int:
    end = first + 1
    while (
        end < len(pieces)
        and pieces[end].section == pieces[first].section
        and _fits(pieces, first, end, limits)
    ):
        end += 1
    return end


def _fits(pieces: list[_Piece], first: int, last: int, limits: _Limits) -> bool:
    chars = pieces[last].end - pieces[first].start
    tokens = sum(piece.tokens for piece in pieces[first : last + 1])
    return chars <= limits.target and tokens <= limits.max_tokens


def _paragraph_cut(pieces: list[_Piece], first: int, end: int, limits: _Limits) -> int:
    """End the chunk at its last paragraph break, when that keeps it reasonably full."""
    floor = pieces[first].start + limits.target * PARAGRAPH_CUT_SHARE
    for candidate in range(end - 1, first, -1):
        if pieces[candidate].opens_paragraph and pieces[candidate - 1].end >= floor:
            return candidate
    return end


def _next_first(pieces: list[_Piece], first: int, end: int, limits: _Limits, overlap: int) -> int:
    """Where the next chunk starts: back over whole pieces up to `overlap` chars, same section."""
    if end >= len(pieces) or pieces[end].section != pieces[first].section:
        return end
    start = end
    while (
        start - 1 > first
        and pieces[end - 1].end - pieces[start - 1].start <= overlap
        and _fits(pieces, start - 1, end, limits)
    ):
        start -= 1
    return start


def _fit(
    text: str, pieces: list[_Piece], first: int, last: int, max_tokens: int, count_tokens: CountTokens
) -> tuple[int, int]:
    """The chunk's span, shortened if a tokenizer that is not additive counts it over the cap."""
    while last > first and count_tokens(text[pieces[first].start : pieces[last].end]) > max_tokens:
        last -= 1
    return pieces[first].start, pieces[last].end


# --- Where a chunk is ----------------------------------------------------------------------------


class _Locator:
    """The page and the nearest heading at an offset of the text."""

    def __init__(self, text: str, pages: list[tuple[int, int, int]]) -> None:
        matches = list(HEADING.finditer(text))
        self.heading_starts = [match.start() for match in matches]
        self.headings = [match.group().strip().strip("#").strip() for match in matches]
        self.page_starts = [start for _, start, _ in pages]
        self.pages = [number for number, _, _ in pages]

    def heading(self, offset: int) -> str:
        index = bisect.bisect_right(self.heading_starts, offset) - 1
        return self.headings[index] if index >= 0 else ""

    def page(self, offset: int) -> int | None:
        index = bisect.bisect_right(self.page_starts, offset) - 1
        return self.pages[index] if index >= 0 else None


# --- Language ------------------------------------------------------------------------------------

CYRILLIC = re.compile(r"[\u0400-\u04ff]")
LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")


def language_of(text: str) -> str:
    """ "ru" when most letters are Cyrillic, "en" when most are Latin, "" when there are neither.

    The keyword index stems Russian and English, so these are the languages that matter to it;
    other Latin-script languages count as "en".
    """
    cyrillic = len(CYRILLIC.findall(text))
    latin = len(LATIN.findall(text))
    if not cyrillic and not latin:
        return ""
    return "ru" if cyrillic > latin else "en"
