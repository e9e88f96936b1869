"""Plain text: its encoding, whether it is text at all, whether it is HTML, and its cleaning.

The encoding is found by charset-normalizer over the whole file (cp1251, KOI8-R, IBM866, Latin-1
and UTF-16 without a byte-order mark are ordinary for Russian files), first among the encodings
people here write in, then among all it knows. The upload check and the worker both call
`decode`, so a file the check lets through is one the worker can read.
"""

from __future__ import annotations

import math
import re
import unicodedata
from functools import lru_cache
from typing import Any

import charset_normalizer

from retrieval.readers import quality

# Tried first: the encodings of Russian and Western European files. A short text is ambiguous
# among all the world's code pages (ten bytes of cp1251 decode as Shift-JIS too); among these it
# is not. Anything else is looked for among every encoding only when none of these fits.
USUAL_ENCODINGS = [
    "utf_8",
    "utf_16",
    "utf_16_le",
    "utf_16_be",
    "utf_32",
    "cp1251",
    "koi8_r",
    "koi8_u",
    "cp866",
    "mac_cyrillic",
    "iso8859_5",
    "cp1252",
    "latin_1",
    "iso8859_15",
]
CYRILLIC_ENCODINGS = {"cp1251", "koi8_r", "koi8_u", "cp866", "mac_cyrillic", "iso8859_5"}
# A word: a run of ASCII letters and bytes above 127. Words of high bytes only are a Cyrillic word
# in a one-byte encoding; words with both are an accented Western word. Every pattern here meets
# an uploaded file in the web process, so none may backtrack: one greedy character class, whose
# match ends where the class does, and the rest in plain code (tests/retrieval/test_regex_budgets.py).
WORD = re.compile(rb"[A-Za-z\x80-\xff]+")
HIGH_BYTES = bytes(range(0x80, 0x100))
# How much of a text the word check reads, and how many other readings it weighs.
PLAUSIBLE_SAMPLE_CHARS = 100_000
MAX_OTHER_READINGS = 8
TIE_CHAOS = 0.02
SAMPLE_BYTES = 256 * 1024
# A file no encoding reads whole is still read when at most this share is unreadable.
MAX_REPLACED_SHARE = 0.001
# Share of control characters (other than tab, newlines and form feed) above which bytes are
# taken for binary data rather than text.
MAX_CONTROL_SHARE = 0.01
CONTROL = re.compile(r"[\x01-\x08\x0e-\x1f]")
KNOWN_TAGS = (
    "html|head|body|title|meta|link|script|style|div|span|p|a|br|hr|img|ul|ol|li|table|thead|tbody"
    "|tr|td|th|h[1-6]|article|section|nav|header|footer|main|aside|form|input|button|strong|em|b|i"
    "|blockquote|pre|code|figure|figcaption|dl|dt|dd|sup|sub|small|label|select|option|iframe"
)
# What a document starts with once the byte-order mark, an XML declaration and comments are
# skipped (in plain code: a repeated lazy comment pattern backtracks exponentially).
DOCUMENT_TAG = re.compile(rf"<!doctype\s+html|<(?:{KNOWN_TAGS})[\s/>]", re.IGNORECASE)
# Closing tags of blocks: a fragment of HTML has several, Markdown with a few inline tags none.
BLOCK_CLOSE = re.compile(
    r"</(?:p|div|li|td|tr|th|h[1-6]|table|ul|ol|section|article|body|html)\s*>", re.IGNORECASE
)
MIN_BLOCK_CLOSES = 3
HTML_SNIFF_CHARS = 256 * 1024
# A word broken at the end of a line by a hyphen: letter, hyphen, newline, lower-case letter.
LINE_END_HYPHEN = re.compile(r"(?<=[^\W\d_])[-\u2010\u00ad][ \t]*\n[ \t]*(?=([^\W\d_]))")
CYRILLIC_LETTER = re.compile(r"[\u0400-\u04ff]")
# Zipf units (log10 of a word's frequency per billion words): a line-end hyphen between two words
# each 30 times as frequent as the two written together is a compound's own hyphen.
COMPOUND_MARGIN = 1.5


class NotText(Exception):
    """The bytes are not text in any encoding we read."""


def decode(data: bytes) -> str:
    """The text of `data` in the encoding charset-normalizer finds over the whole file; when that
    reading is not words (`quality.words_plausible`: Arabic bytes read as cp1251 are Cyrillic
    letters but no Russian words), the reading among every encoding's that is most words."""
    text = _decode_usual(data)
    if text.isascii() or quality.words_plausible(text[:PLAUSIBLE_SAMPLE_CHARS]):
        return text
    return _most_plausible(data, text)


def _most_plausible(data: bytes, first: str) -> str:
    best, best_share = first, -1.0
    for match in list(charset_normalizer.from_bytes(_non_ascii_lines(data)))[:MAX_OTHER_READINGS]:
        try:
            text = _checked(data.decode(match.encoding))
        except (UnicodeDecodeError, LookupError, NotText):
            continue
        sample = text[:PLAUSIBLE_SAMPLE_CHARS]
        if quality.words_plausible(sample) and quality.words_known(sample).known_share > best_share:
            best, best_share = text, quality.words_known(sample).known_share
    return best


def _decode_usual(data: bytes) -> str:
    """The text of `data` in the encoding charset-normalizer finds over the whole file.

    Bytes below 128 read the same in every encoding tried (apart from UTF-16 and UTF-32, which
    have NULs), so what decides is every line with a byte above 127, wherever it is in the file;
    charset-normalizer judges those lines (spread evenly over the file when they are many), and
    the whole file is then decoded with the first encoding that takes all of it.
    """
    if not data:
        return ""
    if b"\x00" not in data:
        try:  # valid UTF-8 beyond ASCII is, in practice, never anything else
            return _checked(data.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    # With NULs: UTF-16 or UTF-32 (or binary), told apart by a start of the file at a character
    # boundary; the whole file is still decoded strictly below.
    sample = data[: SAMPLE_BYTES - SAMPLE_BYTES % 4] if b"\x00" in data else _non_ascii_lines(data)
    matches = list(charset_normalizer.from_bytes(sample, cp_isolation=USUAL_ENCODINGS))
    if not matches:
        matches = list(charset_normalizer.from_bytes(sample))
    if not matches:
        raise NotText
    matches = _cyrillic_first_if_words_are(matches, sample)
    for match in matches:
        try:
            return _checked(data.decode(match.encoding))
        except (UnicodeDecodeError, LookupError):
            continue
    # No encoding takes every byte (a stray byte, two encodings in one file): the best one,
    # with what it cannot read marked, if that is little.
    text = data.decode(matches[0].encoding, errors="replace")
    if text.count("\ufffd") > len(text) * MAX_REPLACED_SHARE:
        raise NotText
    return _checked(text)


def _cyrillic_first_if_words_are(matches: list[Any], sample: bytes) -> list[Any]:
    """Among readings as good as the best, a Cyrillic one first when whole words are made of
    bytes above 127: Western languages have a few accented letters in mostly ASCII words, Russian
    has whole words of them (which a short text leaves charset-normalizer unsure of)."""
    words, mixed = _word_bytes(sample)
    if words <= mixed:
        return matches
    best = matches[0].chaos
    tied = [match for match in matches if match.chaos <= best + TIE_CHAOS]
    cyrillic = [match for match in tied if match.encoding in CYRILLIC_ENCODINGS]
    return cyrillic + [match for match in matches if match not in cyrillic]


def _word_bytes(sample: bytes) -> tuple[int, int]:
    """Bytes in words of two or more high bytes only, and in words mixing them with ASCII letters."""
    only_high = mixed = 0
    for word in WORD.findall(sample):
        if word.isascii():
            continue
        if word.translate(None, HIGH_BYTES):
            mixed += len(word)
        elif len(word) >= 2:
            only_high += len(word)
    return only_high, mixed


def _non_ascii_lines(data: bytes) -> bytes:
    """The lines holding bytes above 127, at most SAMPLE_BYTES of them spread over the file."""
    lines = [line for line in data.split(b"\n") if not line.isascii()]
    total = sum(len(line) + 1 for line in lines)
    step = max(1, math.ceil(total / SAMPLE_BYTES))
    return b"\n".join(lines[::step])


def _checked(text: str) -> str:
    text = text.removeprefix("\ufeff")
    if looks_binary(text):
        raise NotText
    return text


def looks_binary(text: str) -> bool:
    """NUL bytes, or more control characters than text ever has."""
    if "\x00" in text:
        return True
    return len(CONTROL.findall(text)) > len(text) * MAX_CONTROL_SHARE


def looks_like_html(text: str) -> bool:
    """HTML by its tags: a document or fragment that starts with one, or text with several
    closed blocks (paragraphs, list items, cells) wherever they are."""
    sample = text[:HTML_SNIFF_CHARS]
    if _starts_like_a_document(sample):
        return True
    return len(BLOCK_CLOSE.findall(sample)) >= MIN_BLOCK_CLOSES


def _starts_like_a_document(text: str) -> bool:
    """A doctype or a known tag first, after a byte-order mark, an XML declaration and comments."""
    text = text.removeprefix("\ufeff").lstrip()
    if text.startswith("<?xml"):
        end = text.find(">")
        text = text[end + 1 :].lstrip() if end >= 0 else ""
    while text.startswith("<!--"):
        end = text.find("-->", 4)
        if end < 0:
            return False
        text = text[end + 3 :].lstrip()
    return DOCUMENT_TAG.match(text) is not None


def normalise(text: str) -> str:
    """NFKC (ligatures like ﬁ become fi, full-width letters plain), no soft hyphens or NULs,
    Unix line ends."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "").replace("\u00ad", "")
    return unicodedata.normalize("NFKC", text)


def join_hyphenated(text: str, hyphen: re.Pattern[str] = LINE_END_HYPHEN) -> str:
    """Words a layout broke at a line end ("diffi-\\ncult") made whole again; a compound broken
    at its own hyphen ("well-\\nknown", "из-\\nза") keeps it. `hyphen` finds the breaks: a hyphen,
    the gap after it, and the next letter as group 1."""

    def joined(match: re.Match[str]) -> str:
        if not match.group(1).islower():
            return match.group()
        start, end = match.start(), match.end()
        while start > 0 and text[start - 1].isalpha():
            start -= 1
        while end < len(text) and text[end].isalpha():
            end += 1
        return "-" if is_compound(text[start : match.start()], text[match.end() : end]) else ""

    return hyphen.sub(joined, text)


def is_compound(first: str, second: str) -> bool:
    """Whether "first-second" is a compound rather than one word hyphenated: both halves are
    words, each far more frequent than the halves written as one (wordfreq's small lists, English
    or Russian by script; a word neither list knows is taken as hyphenated)."""
    language = "ru" if CYRILLIC_LETTER.search(first + second) else "en"
    together = _zipf(first + second, language)
    return min(_zipf(first, language), _zipf(second, language)) - COMPOUND_MARGIN > together


@lru_cache(maxsize=65_536)  # bounded: the words of every file a worker reads pass here
def _zipf(word: str, language: str) -> float:
    import wordfreq  # loaded on the first line-end hyphen only (a fraction of a second)

    return float(wordfreq.zipf_frequency(word, language, wordlist="small"))
