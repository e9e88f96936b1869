"""Why a file could not be indexed, in the reader's language.

The worker records a failure as English text (it has no reader, so no language): the messages
here, with their parts filled in. They are translated when shown — on the documents pages, in the
API, at upload — by matching the stored text against these messages and translating each part
that is itself one of them (a reason, a page range's phrase). A message that matches none (a
library's own words about a damaged file) is shown as it is.
"""

from __future__ import annotations

import re
from functools import cache

from django.utils.translation import gettext


def gettext_noop(message: str) -> str:
    """Marks a message for translation (makemessages finds it by this name) and returns it as
    is: the parser's child process, which builds these messages, runs without Django settings."""
    return message


# Whole messages, with their parts in %(name)s.
TOOK_TOO_LONG = gettext_noop("%(what)s took longer than %(seconds)s s")
CRASHED = gettext_noop("the file could not be read (the parser ran out of memory or crashed)")
OUT_OF_MEMORY = gettext_noop("the file could not be read (the parser ran out of memory)")
COMPRESSION_BOMB = gettext_noop("%(error)s (a compression bomb?)")
ZIP_BOMB = gettext_noop("%(error)s (a zip bomb?)")
PDF_PASSWORD = gettext_noop("the PDF is password-protected")
PDF_DAMAGED = gettext_noop("the PDF is damaged: %(error)s")
TOO_MANY_SCANS = gettext_noop("the PDF has %(pages)s scanned pages; OCR reads at most %(limit)s per file")
LAYER_UNREADABLE = gettext_noop("the PDF's text layer is unreadable (%(reason)s) %(where)s")
LAYER_UNREADABLE_HINT = gettext_noop("the PDF's text layer is unreadable (%(reason)s) %(where)s; %(hint)s")
PAGES_UNREADABLE = gettext_noop("the PDF could not be read (%(reason)s) %(where)s")
NOTHING_EVEN_BY_OCR = gettext_noop("no text found in the PDF, not even by OCR")
NOTHING_SCAN = gettext_noop("no text found in the PDF (a scan?)")
NOTHING_SCAN_HINT = gettext_noop("no text found in the PDF (a scan?); %(hint)s")
NOTHING_IN = gettext_noop("no text found in the %(kind)s")
OLD_OFFICE = gettext_noop(
    "it is an old Microsoft Office file (.doc, .xls or .ppt); save it as DOCX or PDF and upload that"
)
ENCRYPTED_OFFICE = gettext_noop(
    "the document is password-protected (encrypted); open it in Word, remove the password"
    " (File → Info → Protect Document) and upload it again"
)
OPENDOCUMENT = gettext_noop(
    "it is an OpenDocument file (.odt, .ods or .odp); save it as DOCX or PDF and upload that"
)
UNSUPPORTED = gettext_noop("not a PDF, DOCX, RTF, HTML, Markdown or text file")
TRUNCATED_DOCX = gettext_noop(
    "the DOCX file is incomplete (cut short while it was copied or uploaded); upload the whole file again"
)
DOCX_DAMAGED = gettext_noop("the DOCX file is damaged: %(error)s")
DOCX_ENCRYPTED_PARTS = gettext_noop("the DOCX is encrypted or compressed in a way MindSearch does not read")
UNPACKS_TO_MB = gettext_noop("the file unpacks to more than %(megabytes)s MB")
UNPACKS_TO_RATIO = gettext_noop("the file unpacks to more than %(ratio)s times its size")
PART_UNPACKS_TO = gettext_noop("a part of the file unpacks to more than %(size)s")
RTF_UNREADABLE = gettext_noop(
    "the RTF document could not be converted to text (%(reason)s); save it as DOCX or PDF"
)
OCR_FAILED = gettext_noop("OCR failed: %(error)s")
KIND_DAMAGED = gettext_noop("the %(kind)s is damaged: %(error)s")
OCR_MISSING = gettext_noop(
    "OCR is not installed on this server: its administrator can add it with"
    " scripts/ensure-tesseract (Debian packages tesseract-ocr, tesseract-ocr-rus and"
    " tesseract-ocr-eng), then index the file again"
)
STOPPED = gettext_noop(
    "indexing was stopped before it finished (it ran past the worker's time limit);"
    " index it again to continue where it stopped"
)
UNEXPECTED = gettext_noop("indexing failed unexpectedly: %(error)s")

# Parts: phrases that fill the messages' %(...)s.
PARTS = (
    gettext_noop("reading the file"),
    gettext_noop("OCR of the scanned pages"),
    gettext_noop("on every page"),
    gettext_noop("on page %(pages)s"),
    gettext_noop("on pages %(pages)s"),
    gettext_noop("PDF"),
    gettext_noop("DOCX"),
    gettext_noop("HTML page"),
    gettext_noop("RTF document"),
    gettext_noop("text file"),
    gettext_noop("Markdown file"),
    gettext_noop("OCR"),
    # retrieval.readers.quality's reasons
    gettext_noop("glyph codes instead of letters"),
    gettext_noop("private-use characters instead of letters"),
    gettext_noop("control characters"),
    gettext_noop("characters that could not be decoded"),
    gettext_noop("too few letters"),
    gettext_noop("mojibake (text in one encoding read as another)"),
    gettext_noop("not words in any language (OCR noise, a scan read sideways, or a wrong encoding)"),
)
MESSAGES = tuple(
    value for name, value in list(globals().items()) if name.isupper() and isinstance(value, str)
)
PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def translate(stored: str) -> str:
    """The stored English failure in the active language (as it is when it matches nothing)."""
    return _translate(stored, depth=0)


def _translate(text: str, depth: int) -> str:
    for message, pattern in _patterns():
        match = pattern.fullmatch(text)
        if match is None:
            continue
        translated = gettext(message)
        if not match.groupdict():
            return translated
        parts = {
            name: _translate(value, depth + 1) if depth < 3 else value
            for name, value in match.groupdict().items()
        }
        try:
            return translated % parts
        except (KeyError, ValueError, TypeError):  # a translation that names its parts wrongly
            return message % parts
    return text


@cache
def _patterns() -> list[tuple[str, re.Pattern[str]]]:
    """Each message as a pattern, the most literal text first (so "unreadable (…) on page 3; hint"
    is not taken for "unreadable (…) on page 3" with the hint inside a part)."""
    patterns = []
    for message in set(MESSAGES + PARTS):
        pieces = PLACEHOLDER.split(message)
        regex = "".join(
            re.escape(piece) if index % 2 == 0 else f"(?P<{piece}>.+?)" for index, piece in enumerate(pieces)
        )
        literal = sum(len(piece) for piece in pieces[::2])
        patterns.append((literal, message, re.compile(regex, re.DOTALL)))
    patterns.sort(key=lambda item: -item[0])
    return [(message, pattern) for _literal, message, pattern in patterns]
