"""Turn an uploaded file into plain text with page offsets, safely.

The type comes from the content (magic bytes; HTML told from text by its tags), never from the
name. The readers themselves live in `retrieval.readers`; every text is NFKC-normalised, and a
text that fails the quality check (glyph codes, private-use or control characters, mojibake) is
read again another way or refused, never indexed. The parsers run in a child process with a
wall-clock timeout and a memory cap, so a malformed or hostile file fails with a clear
`ParseError` and takes nothing else down. The child is a fresh interpreter
(`python -m retrieval.parsing`) rather than a multiprocessing fork: django-q2 runs tasks in
daemonic processes, which multiprocessing forbids to have children, and forking a process that
holds torch's thread pool is unsafe anyway.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import re
import resource
import signal
import subprocess
import sys
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from retrieval import failures
from retrieval.readers.text import NotText, decode, looks_like_html, normalise

# A child's time: this many seconds of its own CPU (RLIMIT_CPU), and WALL_FACTOR times as many on
# the clock. CPU, because wall time is the machine's load: a 600-page PDF's parse took 11.6 s of
# CPU and 37 s on the clock at a load average of 7.6, and ran past 60 s at 17.
DEFAULT_TIMEOUT_SECONDS = 60.0
WALL_FACTOR = 3.0
CPU_SECONDS_VARIABLE = "MINDSEARCH_PARSE_CPU_SECONDS"
CHILD_MEMORY_BYTES = 2 * 1024 * 1024 * 1024
SNIFF_BYTES = 2048
TITLE_MAX_CHARS = 200
# OCR runs in a child of its own with this much time per scanned page, for at most so many pages.
OCR_SECONDS_PER_PAGE = 30.0
OCR_MAX_PAGES = 100
# ...and at most this much for one file: reading it (DEFAULT_TIMEOUT_SECONDS), its OCR and its
# embedding must end inside the worker's task timeout (Q_CLUSTER["timeout"], 1,800 s), or the
# task is killed and handed out again; 100 pages at 30 s each (3,000 s) never could.
OCR_MAX_SECONDS_PER_FILE = 1200.0
OCR_HINT = failures.OCR_MISSING

# A tracked deletion in RTF is a group flagged \deleted (with no groups inside, as writers make it);
# a footnote or endnote is a {\footnote ...} group (Word) or a {\*\footnote ...} destination.
RTF_DELETED = re.compile(r"\{\\deleted\b[^{}]*\}")
RTF_NOTE = re.compile(r"\{(?:\\\*)?\\footnote\b")
# Inline tags trafilatura's Markdown keeps (underline, super- and subscripts…): their text stays,
# the tags go ("раз<u>ных</u>" is "разных", "mc<sup>2</sup>" "mc2").
INLINE_TAG = re.compile(
    r"</?(?:u|sup|sub|span|small|big|mark|ins|s|strike|font|abbr|cite|q|kbd|var|samp|tt|em|strong|b|i|a)"
    r"(?:\s[^<>]*)?/?>",
    re.IGNORECASE,
)

# Formats that are documents but not ones we read: the refusal says what would help.
OLE2_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
OLD_OFFICE = failures.OLD_OFFICE
OPENDOCUMENT = failures.OPENDOCUMENT
# An encrypted Word (or Excel, PowerPoint) file is an OLE2 container holding the encrypted
# package under this stream name (MS-OFFCRYPTO), not an old Office file.
ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
# A zip cut short keeps its first members' local headers; these names say it was a DOCX.
DOCX_MEMBER_NAMES = (b"[Content_Types].xml", b"word/document.xml", b"word/_rels/")

UNSUPPORTED = failures.UNSUPPORTED
KIND_LABELS = {
    "pdf": "PDF",
    "docx": "DOCX",
    "html": "HTML page",
    "rtf": "RTF document",
    "text": "text file",
    "markdown": "Markdown file",
}
MARKDOWN_SUFFIXES = {".md", ".markdown", ".mdown", ".mkd"}
PROJECT_ROOT = Path(__file__).resolve().parents[1]

log = logging.getLogger(__name__)


class ParseError(Exception):
    """The file could not be read; the message is shown to the user."""


@dataclass(frozen=True)
class ParsedDocument:
    text: str
    # (page number, start char, end char) for formats with pages (PDF); empty otherwise.
    pages: list[tuple[int, int, int]] = field(default_factory=list)
    title: str = ""
    # Pages (1-based) whose text could not be read, left out of the text (PDF only).
    unreadable_pages: list[int] = field(default_factory=list)


def parse(
    source: str | Path | bytes, *, filename: str, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> ParsedDocument:
    """Parse a file (a path or its bytes) in a child process; raise ParseError on any failure.

    A PDF with scanned pages takes a second child for their OCR, with a time budget per page.
    """
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    kind = signature_kind(data)
    if kind == "text" and Path(filename).suffix.lower() in MARKDOWN_SUFFIXES:
        kind = "markdown"  # Markdown may start with HTML (a centred logo); it is still Markdown
    answer = _run_child([kind], data, timeout)
    if "ocr" in answer:
        pages: list[int] = answer["ocr"]
        # OCR's work is tesseract's, in processes of its own: its budget is on the clock alone.
        ocr_answer = _run_child(
            ["ocr", json.dumps(pages)],
            data,
            ocr_timeout(len(pages)),
            what="OCR of the scanned pages",
            wall_factor=1.0,
        )
        answer = _pdf_answer(answer["texts"], dict(zip(pages, ocr_answer["texts"], strict=True)), answer)
    title = answer["title"] or _title_from_name(filename)
    return ParsedDocument(answer["text"], _pages(answer), title, answer.get("unreadable_pages", []))


def ocr_timeout(pages: int) -> float:
    """The OCR child's time for so many scanned pages: per page, within the file's budget."""
    return min(OCR_SECONDS_PER_PAGE * pages, OCR_MAX_SECONDS_PER_FILE)


def signature_kind(data: bytes) -> str:
    """'pdf', 'docx', 'rtf' or 'text' from the first bytes alone (text may turn out HTML)."""
    head = data[:SNIFF_BYTES]
    if head.lstrip(b"\x00\t\r\n \xef\xbb\xbf").startswith(b"%PDF-"):
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        return "docx"
    if head.startswith(b"{\\rtf"):
        return "rtf"
    return "text"


def detect_kind(data: bytes) -> str:
    """'pdf', 'docx', 'rtf', 'html' or 'text', from the bytes themselves (the whole of them for
    text, whose encoding and tags decide)."""
    kind = signature_kind(data)
    if kind != "text":
        return kind
    try:
        text = decode(data)
    except NotText:
        return "text"
    return "html" if looks_like_html(text) else "text"


def sniff_kind(file: IO[bytes]) -> str:
    """The kind of a supported file, from its content, or ParseError(UNSUPPORTED).

    Cheap enough for the web process: a PDF or RTF by its first bytes, a DOCX by its zip directory
    and package relationships; anything else is decoded whole (once), as the worker will, so a
    file this lets through is one the worker can read. An RTF is stored as text.
    """
    file.seek(0)
    head = file.read(SNIFF_BYTES)
    kind = signature_kind(head)
    if head.startswith(OLE2_SIGNATURE):
        file.seek(0)
        raise ParseError(_ole2_reason(file.read()))
    if kind == "docx":
        file.seek(0)
        _check_docx_archive(file)
    elif kind == "rtf":
        kind = "text"
    elif kind == "text":
        file.seek(0)
        try:
            text = decode(file.read())
        except NotText:
            raise ParseError(UNSUPPORTED) from None
        kind = "html" if looks_like_html(text) else "text"
    file.seek(0)
    return kind


def _run_child(
    arguments: list[str],
    data: bytes,
    timeout: float,
    *,
    what: str = "reading the file",
    wall_factor: float = WALL_FACTOR,
) -> dict[str, Any]:
    """The child's answer; `timeout` seconds of its CPU and `wall_factor` times as many on the clock."""
    too_long = failures.TOOK_TOO_LONG % {"what": what, "seconds": f"{timeout:g}"}
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "retrieval.parsing", *arguments],
            input=data,
            capture_output=True,
            timeout=timeout * wall_factor,
            cwd=PROJECT_ROOT,
            check=False,
            env={**os.environ, CPU_SECONDS_VARIABLE: f"{timeout:g}"},
        )
    except subprocess.TimeoutExpired:
        raise ParseError(too_long) from None
    if completed.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and not completed.stdout:
        raise ParseError(too_long)  # its CPU time ran out (RLIMIT_CPU)
    return _read_child_answer(completed)


def _read_child_answer(completed: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    try:
        answer = json.loads(completed.stdout)
    except ValueError:
        # Killed by the memory cap, or crashed in native code: nothing useful on stdout.
        log.warning("parser exited with %s: %s", completed.returncode, completed.stderr[-2000:])
        raise ParseError(failures.CRASHED) from None
    if "error" in answer:
        raise ParseError(answer["error"])
    return answer


def _title_from_name(filename: str) -> str:
    return Path(filename).stem[:TITLE_MAX_CHARS]


# --- Inside the child process -----------------------------------------------------------------


def parse_bytes(data: bytes, kind: str) -> ParsedDocument:
    """Parse in this process (no timeout here; OCR, if a PDF needs it, is done right away)."""
    if kind == "pdf":
        answer = _read_pdf(data, ocr=True)
        return ParsedDocument(answer["text"], _pages(answer), answer["title"], answer["unreadable_pages"])
    parsers = {"docx": _parse_docx, "rtf": _parse_rtf, "text": _parse_text, "markdown": _parse_markdown}
    parsed = parsers[kind](data)
    if not parsed.text.strip():
        raise ParseError(failures.NOTHING_IN % {"kind": KIND_LABELS[kind]})
    return parsed


def _child_answer(data: bytes, kind: str) -> dict[str, Any]:
    if kind == "pdf":
        return _read_pdf(data, ocr=False)
    parsed = parse_bytes(data, kind)
    return {"text": parsed.text, "pages": parsed.pages, "title": parsed.title}


def _pages(answer: dict[str, Any]) -> list[tuple[int, int, int]]:
    """The (page, start, end) spans of a PDF reader's answer, which JSON gave as lists."""
    return [(int(page), int(start), int(end)) for page, start, end in answer["pages"]]


def _read_pdf(data: bytes, *, ocr: bool) -> dict[str, Any]:
    """The PDF's answer; with scanned or unreadable pages and OCR installed, either their OCR
    done here (`ocr`) or a request for it ("ocr": page indices) that the parent runs apart."""
    from retrieval.readers import pdf, pdfstreams

    try:
        read = pdf.read(data)
    except pdfstreams.StreamTooLarge as error:
        raise ParseError(failures.COMPRESSION_BOMB % {"error": error}) from None
    except pdf.PdfUnreadable as error:
        if error.password:
            raise ParseError(failures.PDF_PASSWORD) from None
        raise ParseError(failures.PDF_DAMAGED % {"error": error}) from None
    answer: dict[str, Any] = {
        "texts": read.pages,
        "unreadable": {str(index): reason for index, reason in read.unreadable.items()},
        "title": read.title,
        "ocr_available": False,
        "scanned": bool(read.needs_ocr),
    }
    if read.needs_ocr and pdf.ocr_available():
        answer["ocr_available"] = True
        if len(read.needs_ocr) > OCR_MAX_PAGES:
            raise ParseError(failures.TOO_MANY_SCANS % {"pages": len(read.needs_ocr), "limit": OCR_MAX_PAGES})
        if not ocr:
            return {**answer, "ocr": read.needs_ocr}
        return _pdf_answer(read.pages, _ocr(data, read.needs_ocr), answer)
    return _pdf_answer(read.pages, {}, answer)


def _ocr(data: bytes, indices: list[int]) -> dict[int, str]:
    from retrieval.readers import pdf

    return dict(zip(indices, pdf.ocr_pages(data, indices), strict=True))


def _pdf_answer(texts: list[str], ocr_texts: dict[int, str], answer: dict[str, Any]) -> dict[str, Any]:
    """Join the pages, OCR's text in place of the pages it read; refuse garbage or nothing.

    A page whose OCR is still not text (handwriting, noise) is left out and named in
    "unreadable_pages"; without OCR, a file with more than a few unreadable pages is refused
    (installing OCR would read them)."""
    from retrieval.readers import quality

    unreadable = {int(index): reason for index, reason in answer["unreadable"].items()}
    texts = list(texts)
    for index, text in ocr_texts.items():
        verdict = quality.judge(text)
        if verdict.ok and text.strip():
            texts[index] = text
            unreadable.pop(index, None)
        elif not verdict.ok:
            texts[index] = ""
            unreadable[index] = verdict.reason
    readable = sum(1 for text in texts if text.strip())
    hint = "" if answer["ocr_available"] or not answer["scanned"] else OCR_HINT
    if unreadable and (
        not readable
        or (
            not answer["ocr_available"]
            and len(unreadable) / (len(unreadable) + readable) > pdf_unreadable_share()
        )
    ):
        reason = next(iter(unreadable.values()))
        if not readable:
            where = "on every page"
        else:
            where = ("on page %(pages)s" if len(unreadable) == 1 else "on pages %(pages)s") % {
                "pages": _page_ranges(sorted(unreadable))
            }
        parts = {"reason": reason, "where": where, "hint": hint}
        if any(index in ocr_texts for index in unreadable):
            raise ParseError(failures.PAGES_UNREADABLE % parts)  # OCR read them, and found noise
        raise ParseError((failures.LAYER_UNREADABLE_HINT if hint else failures.LAYER_UNREADABLE) % parts)
    if not readable:
        if answer["ocr_available"] and answer["scanned"]:
            raise ParseError(failures.NOTHING_EVEN_BY_OCR)
        if not answer["scanned"]:
            raise ParseError(failures.NOTHING_IN % {"kind": "PDF"})
        raise ParseError(failures.NOTHING_SCAN_HINT % {"hint": hint} if hint else failures.NOTHING_SCAN)
    text, pages = _join_pages(texts)
    title = answer["title"] or _first_line(text)
    return {
        "text": text,
        "pages": pages,
        "title": title,
        "unreadable_pages": [i + 1 for i in sorted(unreadable)],
    }


def pdf_unreadable_share() -> float:
    from retrieval.readers import pdf

    return pdf.MAX_UNREADABLE_SHARE


def page_ranges(numbers: list[int]) -> str:
    """1-based page numbers as ranges: "3, 5–9"."""
    return _page_ranges([number - 1 for number in numbers])


def _page_ranges(indices: list[int]) -> str:
    """0-based indices as 1-based page ranges: "3, 5–9"."""
    ranges: list[list[int]] = []
    for index in indices:
        if ranges and index == ranges[-1][1] + 1:
            ranges[-1][1] = index
        else:
            ranges.append([index, index])
    return ", ".join(f"{a + 1}" if a == b else f"{a + 1}–{b + 1}" for a, b in ranges)


def _join_pages(texts: list[str]) -> tuple[str, list[tuple[int, int, int]]]:
    parts: list[str] = []
    pages: list[tuple[int, int, int]] = []
    offset = 0
    for number, page_text in enumerate(texts, start=1):
        pages.append((number, offset, offset + len(page_text)))
        parts.append(page_text)
        offset += len(page_text) + 2
    return "\n\n".join(parts), pages


def _parse_docx(data: bytes) -> ParsedDocument:
    from retrieval.readers import docx

    _check_docx_archive(io.BytesIO(data))
    text, title = docx.read(io.BytesIO(data))
    text = _clean(text)
    return ParsedDocument(text, [], title or _first_line(text))


def _check_docx_archive(source: IO[bytes]) -> None:
    """A DOCX, checked by inflating every part under caps on the bytes they really unpack to
    (`retrieval.readers.zipped`): cheap in time (200 MB of zeros inflate in under 0.1 s) and in
    memory (one 64 KB chunk at a time), so the web process may run it on an upload."""
    from retrieval.readers import docx, zipped

    try:
        with zipfile.ZipFile(source) as archive:
            _check_unpacked_size(archive.infolist())
            zipped.check(archive, _size_of(source))
            if _opendocument(archive):
                raise ParseError(OPENDOCUMENT)
            docx.main_part(archive)
    except zipped.TooLarge as error:
        raise ParseError(failures.ZIP_BOMB % {"error": error}) from None
    except zipped.Unsupported:
        raise ParseError(failures.DOCX_ENCRYPTED_PARTS) from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as error:
        source.seek(0)
        head = source.read(64 * 1024)
        if any(name in head for name in DOCX_MEMBER_NAMES):
            # A Word package, but its zip is cut short (no central directory) or its data broken.
            if (
                "not a zip file" in str(error).lower()
                or "truncated" in str(error).lower()
                or "ends before" in str(error)
            ):
                raise ParseError(failures.TRUNCATED_DOCX) from None
            raise ParseError(failures.DOCX_DAMAGED % {"error": _describe(error)}) from None
        raise ParseError(UNSUPPORTED) from None
    except docx.NotDocx:
        raise ParseError(UNSUPPORTED) from None


def _size_of(source: IO[bytes]) -> int:
    source.seek(0, io.SEEK_END)
    return source.tell()


def _opendocument(archive: zipfile.ZipFile) -> bool:
    """An OpenDocument package (LibreOffice's .odt and friends) names itself in `mimetype`."""
    from retrieval.readers import zipped

    try:
        mimetype = zipped.read(archive, "mimetype", 200)
    except (KeyError, zipped.TooLarge):
        return False
    return mimetype.startswith(b"application/vnd.oasis.opendocument")


def _check_unpacked_size(members: list[zipfile.ZipInfo]) -> None:
    """The sizes the archive declares, a first cheap look: what it really unpacks to is measured
    by inflating it (`zipped.check`), since a member may declare 1 KB and inflate to 800 MiB."""
    from retrieval.readers import zipped

    unpacked = sum(member.file_size for member in members)
    if unpacked > zipped.TOTAL_MAX_BYTES:
        too_large = failures.UNPACKS_TO_MB % {"megabytes": zipped.TOTAL_MAX_BYTES // 2**20}
        raise ParseError(failures.ZIP_BOMB % {"error": too_large})


def _parse_html(text: str) -> ParsedDocument:
    import trafilatura
    from lxml import html as lxml_html

    text = re.sub(r"\A\s*<\?xml[^>]*>", "", text)
    if not re.search(r"<html[\s>]", text, re.IGNORECASE):
        # A fragment: trafilatura reads only what looks like a page.
        text = f"<html><body>{text}</body></html>"
    markdown = trafilatura.extract(
        text, output_format="markdown", include_tables=True, include_comments=False, favor_recall=True
    )
    # A fragment or a short page may be too little for trafilatura to call it content: then all
    # its visible text, scripts and styles left out.
    everything = trafilatura.html2txt(text, clean=True)
    if not markdown or len(markdown) < 0.5 * len(everything):
        markdown = everything
    try:
        tree = lxml_html.fromstring(text)
        title = " ".join((tree.findtext(".//title") or "").split())
    except (ValueError, lxml_html.etree.ParserError):
        title = ""
    cleaned = _clean(INLINE_TAG.sub("", markdown))
    return ParsedDocument(cleaned, [], title or _first_line(cleaned))


def _parse_rtf(data: bytes) -> ParsedDocument:
    from striprtf.striprtf import rtf_to_text

    from retrieval.readers import quality

    # RTF is 7-bit with escapes; its own \ansicpg and font charsets name the code page.
    rtf = data.decode("latin-1")
    # striprtf keeps tracked deletions and drops notes: deleted runs go, notes become paragraphs.
    rtf = RTF_NOTE.sub(r"{\\par ", RTF_DELETED.sub("", rtf))
    text = _clean(rtf_to_text(rtf, errors="replace"))
    verdict = quality.judge(text)
    if not verdict.ok:
        raise ParseError(failures.RTF_UNREADABLE % {"reason": verdict.reason})
    return ParsedDocument(text, [], _first_line(text))


def _parse_text(data: bytes) -> ParsedDocument:
    text = _decode(data)
    if looks_like_html(text):
        return _parse_html(text)
    return _plain(text)


def _parse_markdown(data: bytes) -> ParsedDocument:
    return _plain(_decode(data))


def _decode(data: bytes) -> str:
    if data.startswith(OLE2_SIGNATURE):
        raise ParseError(_ole2_reason(data))
    try:
        return decode(data)
    except NotText:
        raise ParseError(UNSUPPORTED) from None


def _ole2_reason(data: bytes) -> str:
    """An OLE2 file is an old Office document, or a new one encrypted with a password."""
    return failures.ENCRYPTED_OFFICE if ENCRYPTED_PACKAGE in data else OLD_OFFICE


def _plain(text: str) -> ParsedDocument:
    text = _clean(text)
    return ParsedDocument(text, [], _markdown_title(text) or _first_line(text))


def _clean(text: str) -> str:
    return normalise(text).strip("\n")


def _markdown_title(text: str) -> str:
    match = re.search(r"^#{1,6}[ \t]+(.+)$", text, re.MULTILINE)
    return match.group(1).strip()[:TITLE_MAX_CHARS] if match else ""


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:TITLE_MAX_CHARS]
    return ""


def _child_main(arguments: list[str]) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))
    cpu_seconds = os.environ.get(CPU_SECONDS_VARIABLE)
    if cpu_seconds:
        limit = max(1, math.ceil(float(cpu_seconds)))
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
    data = sys.stdin.buffer.read()
    kind = arguments[0]
    try:
        if kind == "ocr":
            answer: dict[str, Any] = {"texts": list(_ocr(data, json.loads(arguments[1])).values())}
        else:
            answer = _child_answer(data, kind)
    except ParseError as error:
        answer = {"error": str(error)}
    except MemoryError:
        answer = {"error": failures.OUT_OF_MEMORY}
    except Exception as error:  # a broken file makes parsers raise anything at all
        if kind == "ocr":
            answer = {"error": failures.OCR_FAILED % {"error": _describe(error)}}
        else:
            answer = {"error": failures.KIND_DAMAGED % {"kind": KIND_LABELS[kind], "error": _describe(error)}}
    sys.stdout.write(json.dumps(answer))


def _describe(error: Exception) -> str:
    return str(error).strip()[:300] or type(error).__name__


if __name__ == "__main__":
    _child_main(sys.argv[1:])
