"""Plain text: its encoding, whether it is text at all, whether it is HTML, and its cleaning.

The encoding is found by charset-normalizer over the whole file (cp1251, KOI8-R, IBM866, Latin-1
and UTF-16 without a byte-order mark are ordinary for Russian files), first among the encodings
people here write in, then among all it knows. The upload check and the worker both call
`decode`, so a file the check lets through is one the worker can read.
"""

from __future__ import annotations

import re
import unicodedata

import charset_normalizer

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
# Share of control characters (other than tab, newlines and form feed) above which bytes are
# taken for binary data rather than text.
MAX_CONTROL_SHARE = 0.01
KNOWN_TAGS = (
    "html|head|body|title|meta|link|script|style|div|span|p|a|br|hr|img|ul|ol|li|table|thead|tbody"
    "|tr|td|th|h[1-6]|article|section|nav|header|footer|main|aside|form|input|button|strong|em|b|i"
    "|blockquote|pre|code|figure|figcaption|dl|dt|dd|sup|sub|small|label|select|option|iframe"
)
OPENING_TAG = re.compile(rf"<({KNOWN_TAGS})(?=[\s/>])[^<>]*>", re.IGNORECASE)
DOCUMENT_START = re.compile(
    rf"\A(?:\ufeff)?\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*(?:<!doctype\s+html|<(?:{KNOWN_TAGS})[\s/>])",
    re.IGNORECASE | re.DOTALL,
)
ANY_TAG = re.compile(r"<[^<>]{0,2000}>")
# A page of text with a few inline tags is Markdown; with this share of its characters in tags
# (and at least MIN_TAGS known ones), it is HTML whatever its first bytes are.
HTML_MARKUP_SHARE = 0.15
MIN_TAGS = 3
HTML_SNIFF_CHARS = 256 * 1024
# A word broken at the end of a line by a hyphen: letter, hyphen, newline, lower-case letter.
LINE_END_HYPHEN = re.compile(r"(?<=[^\W\d_])[-\u2010\u00ad][ \t]*\n[ \t]*(?=([^\W\d_]))")


class NotText(Exception):
    """The bytes are not text in any encoding we read."""


def decode(data: bytes) -> str:
    """The text of `data` in the encoding charset-normalizer finds over the whole file."""
    if not data:
        return ""
    match = charset_normalizer.from_bytes(data, cp_isolation=USUAL_ENCODINGS).best()
    if match is None:
        match = charset_normalizer.from_bytes(data).best()
    if match is None:
        raise NotText
    try:
        text = data.decode(match.encoding)
    except (UnicodeDecodeError, LookupError):
        raise NotText from None
    text = text.removeprefix("\ufeff")
    if looks_binary(text):
        raise NotText
    return text


def looks_binary(text: str) -> bool:
    """NUL bytes, or more control characters than text ever has."""
    if "\x00" in text:
        return True
    controls = sum(1 for char in text if char < " " and char not in "\t\n\r\f\x0b")
    return controls > len(text) * MAX_CONTROL_SHARE


def looks_like_html(text: str) -> bool:
    """HTML by its tags: a document or fragment that starts with one, or text that is mostly markup."""
    sample = text[:HTML_SNIFF_CHARS]
    if DOCUMENT_START.match(sample):
        return True
    known = OPENING_TAG.findall(sample)
    if len(known) < MIN_TAGS:
        return False
    markup = sum(len(tag) for tag in ANY_TAG.findall(sample))
    visible = len("".join(sample.split())) or 1
    return markup / visible >= HTML_MARKUP_SHARE


def normalise(text: str) -> str:
    """NFKC (ligatures like ﬁ become fi, full-width letters plain), no soft hyphens or NULs,
    Unix line ends."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "").replace("\u00ad", "")
    return unicodedata.normalize("NFKC", text)


def join_hyphenated(text: str) -> str:
    """Words a layout broke at a line end ("diffi-\\ncult") made whole again."""
    return LINE_END_HYPHEN.sub(lambda match: "" if match.group(1).islower() else match.group(), text)
