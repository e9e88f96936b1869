"""Whether extracted text is text: the check that keeps garbage out of the index.

A PDF's text layer can be glyph codes rather than letters ("/g18/g152", "(cid:18)" when a font
has no Unicode map), private-use or control characters, or mojibake (a legacy encoding read as
another). Each of these is measured on the extracted text; a page that fails is read by the next
engine, then by OCR, and a document whose text stays garbage is refused, never indexed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from charset_normalizer.md import mess_ratio

GLYPH_CODES = re.compile(r"\(cid:\d+\)|/(?:g|G|gid|glyph|uni|c|index)\d+[A-Fa-f0-9]*|\bgid\d+\b")
# Below this many visible characters a page is too short to judge (a title page, a page number).
MIN_CHARS = 40
MAX_GLYPH_CODE_SHARE = 0.05
MAX_PRIVATE_USE_SHARE = 0.05
MAX_CONTROL_SHARE = 0.01
MAX_REPLACEMENT_SHARE = 0.02
# Letters and digits among visible characters: prose, tables and formulas all stay well above.
MIN_ALNUM_SHARE = 0.5
# charset-normalizer's mess ratio: mojibake scores above 1, prose 0, dense formulas about 0.5.
MAX_MESS = 0.8
MESS_SAMPLE_CHARS = 4000


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""


GOOD = Verdict(True)


def judge(text: str) -> Verdict:
    """GOOD, or what is wrong with the text (for the log and for a refusal's message)."""
    visible = "".join(text.split())
    if len(visible) < MIN_CHARS:
        return GOOD
    # Each glyph code stands for one character: a formula's few unmapped symbols in a page of
    # prose are a small share, a text layer made of codes nearly all of it.
    codes = GLYPH_CODES.findall(visible)
    code_chars = sum(map(len, codes))
    if len(codes) / (len(visible) - code_chars + len(codes)) > MAX_GLYPH_CODE_SHARE:
        return Verdict(False, "glyph codes instead of letters")
    total = len(visible)
    if sum(1 for char in visible if _private_use(char)) / total > MAX_PRIVATE_USE_SHARE:
        return Verdict(False, "private-use characters instead of letters")
    if sum(1 for char in visible if char < " " or "\x7f" <= char < "\xa0") / total > MAX_CONTROL_SHARE:
        return Verdict(False, "control characters")
    if visible.count("\ufffd") / total > MAX_REPLACEMENT_SHARE:
        return Verdict(False, "characters that could not be decoded")
    if sum(1 for char in visible if char.isalnum()) / total < MIN_ALNUM_SHARE:
        return Verdict(False, "too few letters")
    if mess_ratio(text[:MESS_SAMPLE_CHARS], maximum_threshold=1.0) > MAX_MESS:
        return Verdict(False, "mojibake (text in one encoding read as another)")
    return GOOD


def _private_use(char: str) -> bool:
    code = ord(char)
    return 0xE000 <= code <= 0xF8FF or code >= 0xF0000
