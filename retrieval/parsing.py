"""Turn an uploaded file into plain text with page offsets, safely.

The type comes from the content (magic bytes, a sniffed `<html`), never from the name. The
parsers run in a child process with a wall-clock timeout and a memory cap, so a malformed or
hostile file fails with a clear `ParseError` and takes nothing else down. The child is a fresh
interpreter (`python -m retrieval.parsing`) rather than a multiprocessing fork: django-q2 runs
tasks in daemonic processes, which multiprocessing forbids to have children, and forking a
process that holds torch's thread pool is unsafe anyway.
"""

from __future__ import annotations

import codecs
import io
import json
import logging
import re
import resource
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

DEFAULT_TIMEOUT_SECONDS = 60.0
MAX_UNPACKED_BYTES = 200 * 1024 * 1024
MAX_COMPRESSION_RATIO = 100
# Small archives can compress very well without being bombs; only judge the ratio above this.
RATIO_CHECK_FROM_BYTES = 10 * 1024 * 1024
CHILD_MEMORY_BYTES = 2 * 1024 * 1024 * 1024
SNIFF_BYTES = 2048
TITLE_MAX_CHARS = 200

UNSUPPORTED = "not a PDF, DOCX, HTML, Markdown or text file"
KIND_LABELS = {"pdf": "PDF", "docx": "DOCX", "html": "HTML page", "text": "text file"}
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


def parse(
    source: str | Path | bytes, *, filename: str, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> ParsedDocument:
    """Parse a file (a path or its bytes) in a child process; raise ParseError on any failure."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    kind = detect_kind(data)
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "retrieval.parsing", kind],
            input=data,
            capture_output=True,
            timeout=timeout,
            cwd=PROJECT_ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ParseError(f"reading the file took longer than {timeout:g} s") from None
    parsed = _read_child_answer(completed)
    return ParsedDocument(parsed.text, parsed.pages, parsed.title or _title_from_name(filename))


def detect_kind(data: bytes) -> str:
    """'pdf', 'docx', 'html' or 'text', from the bytes themselves."""
    head = data[:SNIFF_BYTES]
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        return "docx"
    sniffed = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if sniffed.startswith(b"<!doctype html") or b"<html" in sniffed:
        return "html"
    return "text"


def sniff_kind(file: BinaryIO) -> str:
    """The kind of a supported file, from its content, or ParseError(UNSUPPORTED).

    Cheap enough for the web process: it reads the first bytes (and a DOCX's zip directory),
    so an upload is refused at once rather than failing later in the worker.
    """
    file.seek(0)
    head = file.read(SNIFF_BYTES)
    kind = detect_kind(head)
    if kind == "docx":
        file.seek(0)
        _check_docx_archive(file)
    elif kind == "text" and not _looks_like_text(head, whole=len(head) < SNIFF_BYTES):
        raise ParseError(UNSUPPORTED)
    file.seek(0)
    return kind


def _read_child_answer(completed: subprocess.CompletedProcess[bytes]) -> ParsedDocument:
    try:
        answer = json.loads(completed.stdout)
    except ValueError:
        # Killed by the memory cap, or crashed in native code: nothing useful on stdout.
        log.warning("parser exited with %s: %s", completed.returncode, completed.stderr[-2000:])
        raise ParseError("the file could not be read (the parser ran out of memory or crashed)") from None
    if "error" in answer:
        raise ParseError(answer["error"])
    pages = [tuple(page) for page in answer["pages"]]
    return ParsedDocument(answer["text"], pages, answer["title"])


def _title_from_name(filename: str) -> str:
    return Path(filename).stem[:TITLE_MAX_CHARS]


# --- Inside the child process -----------------------------------------------------------------


def parse_bytes(data: bytes, kind: str) -> ParsedDocument:
    """Parse in this process (the child's entry point; no timeout here)."""
    parsers = {"pdf": _parse_pdf, "docx": _parse_docx, "html": _parse_html, "text": _parse_text}
    parsed = parsers[kind](data)
    if not parsed.text.strip():
        hint = " (a scanned PDF needs OCR first)" if kind == "pdf" else ""
        raise ParseError(f"no text found in the {KIND_LABELS[kind]}{hint}")
    return parsed


def _parse_pdf(data: bytes) -> ParsedDocument:
    import pypdf

    reader = pypdf.PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise ParseError("the PDF is password-protected")
    texts = [_clean(page.extract_text() or "") for page in reader.pages]
    metadata_title = (reader.metadata or {}).get("/Title") or ""
    text, pages = _join_pages(texts)
    return ParsedDocument(text, pages, str(metadata_title).strip() or _first_line(text))


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
    _check_docx_archive(io.BytesIO(data))
    import docx

    document = docx.Document(io.BytesIO(data))
    blocks = [_docx_block(item) for item in document.iter_inner_content()]
    text = "\n\n".join(block for block in blocks if block)
    title = (document.core_properties.title or "").strip()
    return ParsedDocument(_clean(text), [], title or _first_line(text))


def _check_docx_archive(source: BinaryIO) -> None:
    try:
        with zipfile.ZipFile(source) as archive:
            members = archive.infolist()
    except zipfile.BadZipFile:
        raise ParseError(UNSUPPORTED) from None
    if "word/document.xml" not in {member.filename for member in members}:
        raise ParseError(UNSUPPORTED)
    # zipfile never inflates a member past its declared size, so the declared sizes bound the work.
    unpacked = sum(member.file_size for member in members)
    packed = sum(member.compress_size for member in members) or 1
    too_dense = unpacked > RATIO_CHECK_FROM_BYTES and unpacked / packed > MAX_COMPRESSION_RATIO
    if unpacked > MAX_UNPACKED_BYTES or too_dense:
        raise ParseError("the DOCX is too large when unpacked (zip bomb?)")


def _docx_block(item: object) -> str:
    from docx.table import Table

    if isinstance(item, Table):
        rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in item.rows]
        return "\n".join(rows)
    text = item.text.strip()  # type: ignore[attr-defined]
    level = _heading_level(getattr(item.style, "name", "") or "")  # type: ignore[attr-defined]
    return f"{'#' * level} {text}" if level and text else text


def _heading_level(style_name: str) -> int:
    if style_name == "Title":
        return 1
    match = re.fullmatch(r"Heading (\d)", style_name)
    return min(int(match.group(1)), 6) if match else 0


def _parse_html(data: bytes) -> ParsedDocument:
    import trafilatura
    from lxml import html as lxml_html

    markdown = trafilatura.extract(
        data, output_format="markdown", include_tables=True, include_comments=False, favor_recall=True
    )
    tree = lxml_html.fromstring(data)
    title = " ".join((tree.findtext(".//title") or "").split())
    text = markdown or tree.text_content()
    return ParsedDocument(_clean(text), [], title or _first_line(text))


def _parse_text(data: bytes) -> ParsedDocument:
    text = _decode_text(data)
    return ParsedDocument(_clean(text), [], _markdown_title(text) or _first_line(text))


def _decode_text(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise ParseError(UNSUPPORTED) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ParseError(UNSUPPORTED) from None
    if _looks_binary(text):
        raise ParseError(UNSUPPORTED)
    return text


def _looks_like_text(head: bytes, *, whole: bool) -> bool:
    """Whether the first bytes decode as UTF-8 or UTF-16 text; unless they are the `whole`
    file, a character cut off at the end of the sample is not held against it."""
    encoding = "utf-16" if head.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8-sig"
    try:
        text = codecs.getincrementaldecoder(encoding)().decode(head, final=whole)
    except UnicodeDecodeError:
        return False
    return not _looks_binary(text)


def _looks_binary(text: str) -> bool:
    sample = text[:SNIFF_BYTES]
    controls = sum(1 for char in sample if ord(char) < 32 and char not in "\t\n\r\f")
    return "\x00" in sample or controls > len(sample) // 20


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return text.strip("\n")


def _markdown_title(text: str) -> str:
    match = re.search(r"^#{1,6}[ \t]+(.+)$", text, re.MULTILINE)
    return match.group(1).strip()[:TITLE_MAX_CHARS] if match else ""


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:TITLE_MAX_CHARS]
    return ""


def _child_main(kind: str) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))
    data = sys.stdin.buffer.read()
    try:
        parsed = parse_bytes(data, kind)
        answer: dict[str, object] = {"text": parsed.text, "pages": parsed.pages, "title": parsed.title}
    except ParseError as error:
        answer = {"error": str(error)}
    except MemoryError:
        answer = {"error": "the file could not be read (the parser ran out of memory)"}
    except Exception as error:  # a broken file makes parsers raise anything at all
        answer = {"error": f"the {KIND_LABELS[kind]} is damaged: {_describe(error)}"}
    sys.stdout.write(json.dumps(answer))


def _describe(error: Exception) -> str:
    return str(error).strip()[:300] or type(error).__name__


if __name__ == "__main__":
    _child_main(sys.argv[1])
