"""Whether extracted text is text: the check that keeps garbage out of the index.

A PDF's text layer can be glyph codes rather than letters ("/g18/g152", "(cid:18)" when a font
has no Unicode map), private-use or control characters, or mojibake (a legacy encoding read as
another). Each of these is measured on the extracted text; a page that fails is read by the next
engine, then by OCR, and a document whose text stays garbage is refused, never indexed.

Text made of the right characters can still be noise: OCR of a page scanned sideways ("ЯП ММТ
67686С#"), of handwriting, a scanner's bad text layer, Arabic bytes read as cp1251. Such text is
letters but not words: `words_known` looks its words up in word lists of the languages in the
same script (wordfreq's, shipped in the package), and too few known words, or most letters in
one- and two-letter scraps, fail the page. Dot leaders and numbering (a table of contents) are
left out before letters are counted.

Every check costs the same whatever the text's size: past `SAMPLE_CHARS` a text is judged by
evenly spaced windows of it (`sample`), so a 20 MB upload of one repeated word, or of one
"word" without spaces, costs no more CPU than a long page (issue 26).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
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
# Leaders between a table-of-contents entry and its page number ("Введение ........ 5", "· · ·",
# "____"): layout, not letters, so not counted against a page.
LEADERS = re.compile(r"(?:[.·…_\-‐–—] ?){3,}")
# Words: runs of letters and digits.
WORD = re.compile(r"[^\W_]+")
# The word lists (wordfreq's "small": the ~30–60 thousand most frequent words of a language) of
# each script's languages: Russian and English first, the common neighbours so that a German or
# Ukrainian page is not taken for noise. Scripts without lists here (Arabic, CJK…) are not judged.
LANGUAGES = {
    "cyrillic": ("ru", "uk", "bg"),
    "latin": ("en", "de", "fr", "es", "it", "pt", "nl", "pl", "cs", "sv", "fi", "tr", "id"),
    "arabic": ("ar", "fa"),
    "greek": ("el",),
}
# Below this many letters in words a page is too short to judge by its words; below
# MIN_LOOKED_UP letters in words of 3+ letters, by its known words.
MIN_WORD_LETTERS = 60
MIN_LOOKED_UP = 30
# Share of letters (in 3+-letter words) in known words: prose measured 0.53–0.61 at its lowest
# (1,000 SciFact abstracts, 1,000 XQuAD-ru paragraphs; medians 0.80 and 0.88); OCR noise of a
# sideways scan 0.0, Arabic read as cp1251 0.03.
MIN_KNOWN_SHARE = 0.3
# Share of letters in two-letter words: prose 0.14 at most (the same corpora), OCR noise of
# handwriting and of a sideways table about 0.4–0.5.
MAX_SCRAP_SHARE = 0.35
# A longer text is judged by SAMPLE_WINDOWS windows of SAMPLE_WINDOW_CHARS spread evenly over it
# (shares of characters and words are estimated from them): ~30 ms of CPU whatever the size.
SAMPLE_WINDOWS = 16
SAMPLE_WINDOW_CHARS = 4096
SAMPLE_CHARS = SAMPLE_WINDOWS * SAMPLE_WINDOW_CHARS
# How far a window's edge moves to the nearest whitespace so as not to cut a word in two.
WORD_EDGE_CHARS = 64
NOISE = "not words in any language (OCR noise, a scan read sideways, or a wrong encoding)"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""


GOOD = Verdict(True)


def sample(text: str) -> str:
    """The text itself up to SAMPLE_CHARS; past that, SAMPLE_WINDOWS windows spread evenly from
    its start to its end, each cut at whitespace near its edges, joined by newlines."""
    if len(text) <= SAMPLE_CHARS:
        return text
    step = (len(text) - SAMPLE_WINDOW_CHARS) // (SAMPLE_WINDOWS - 1)
    windows = []
    for index in range(SAMPLE_WINDOWS):
        start = index * step
        end = start + SAMPLE_WINDOW_CHARS
        if start and not text[start - 1].isspace():
            start = _next_space(text, start, min(start + WORD_EDGE_CHARS, end))
        if end < len(text) and not text[end].isspace():
            end = _previous_space(text, max(end - WORD_EDGE_CHARS, start), end)
        windows.append(text[start:end])
    return "\n".join(windows)


def _next_space(text: str, start: int, limit: int) -> int:
    for position in range(start, limit):
        if text[position].isspace():
            return position
    return start  # a word longer than the margin: cut it


def _previous_space(text: str, limit: int, end: int) -> int:
    for position in range(end - 1, limit - 1, -1):
        if text[position].isspace():
            return position
    return end


def judge(text: str) -> Verdict:
    """GOOD, or what is wrong with the text (for the log and for a refusal's message); a long
    text is judged by its `sample`."""
    text = sample(text)
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
    unleadered = "".join(LEADERS.sub(" ", text).split())
    if len(unleadered) >= MIN_CHARS and (
        sum(1 for char in unleadered if char.isalnum()) / len(unleadered) < MIN_ALNUM_SHARE
    ):
        return Verdict(False, "too few letters")
    if mess_ratio(text[:MESS_SAMPLE_CHARS], maximum_threshold=1.0) > MAX_MESS:
        return Verdict(False, "mojibake (text in one encoding read as another)")
    if not words_plausible(text):
        return Verdict(False, NOISE)
    return GOOD


@dataclass(frozen=True)
class Words:
    """Letters in words of 3+ letters, how many of them in known words, and letters in scraps:
    two-letter words (one-letter ones say nothing: variables, initials, list letters)."""

    letters: int
    known: int
    scraps: int

    @property
    def known_share(self) -> float:
        return self.known / self.letters if self.letters else 1.0

    @property
    def scrap_share(self) -> float:
        return self.scraps / (self.scraps + self.letters) if self.letters + self.scraps else 0.0


def words_known(text: str) -> Words:
    """How much of the text (its `sample`, when long) is words of a language whose word list we
    have (see LANGUAGES)."""
    letters = known = scraps = 0
    # Each distinct word is looked at once, however often it occurs.
    for word, count in Counter(WORD.findall(sample(text).lower())).items():
        if word.isdigit() or len(word) == 1:
            continue  # a number; a variable, an initial, a list's letter: too short to tell anything
        script = _script(word)
        if script is None:
            continue  # a script without word lists, or letters mixed with digits of a code
        if len(word) == 2:
            scraps += 2 * count
            continue
        letters += len(word) * count
        if script != "mixed" and any(word in words for words in _word_lists(script)):
            known += len(word) * count
    return Words(letters, known, scraps)


def words_plausible(text: str) -> bool:
    """Whether the text is words rather than noise (too little to judge counts as words)."""
    words = words_known(text)
    if words.letters + words.scraps < MIN_WORD_LETTERS:
        return True
    if words.scrap_share > MAX_SCRAP_SHARE:
        return False
    return words.letters < MIN_LOOKED_UP or words.known_share >= MIN_KNOWN_SHARE


def _script(word: str) -> str | None:
    """ "cyrillic", "latin", "arabic" or "greek" for a word in one of them; "mixed" for letters of
    one with digits or another script's letters (noise, or a code: never a known word); None for
    other scripts."""
    scripts = set()
    digits = False
    for char in word:
        if char.isdigit():
            digits = True
        elif "\u0400" <= char <= "\u052f":
            scripts.add("cyrillic")
        elif char.isascii() or "\u00c0" <= char <= "\u024f":
            scripts.add("latin")
        elif "\u0600" <= char <= "\u06ff":
            scripts.add("arabic")
        elif "\u0370" <= char <= "\u03ff":
            scripts.add("greek")
        else:
            return None
    if len(scripts) != 1 or digits:
        return "mixed" if scripts else None
    return scripts.pop()


_lists_lock = threading.Lock()
_lists: dict[str, list[frozenset[str]]] = {}


def _word_lists(script: str) -> list[frozenset[str]]:
    with _lists_lock:
        if script not in _lists:
            import wordfreq

            _lists[script] = [
                frozenset(wordfreq.get_frequency_dict(language, "small")) for language in LANGUAGES[script]
            ]
        return _lists[script]


def _private_use(char: str) -> bool:
    code = ord(char)
    return 0xE000 <= code <= 0xF8FF or code >= 0xF0000
