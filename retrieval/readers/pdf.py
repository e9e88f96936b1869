"""PDF: text in reading order, headings kept, running headers and page numbers dropped, OCR last.

Each page is read by pdfminer.six first: its layout analysis orders a multi-column page column by
column and gives each block its font size, from which headings are told apart from the body. A
page whose text fails the quality check (`quality.judge`), and every page of a file pdfminer
cannot open, is read again by pdfium (pypdfium2), which reads many files other readers call
damaged. A page that is still empty or garbage while it holds an image is a scan: OCR reads it
(`ocr_pages`, run separately by the parent with a time budget of its own) when tesseract is
installed; otherwise the file is refused with a message that says how to add it.

OCR text that is not words (`quality.judge`: a page scanned sideways or upside down reads as
noise such as "ЯП ММТ 67686С#") has the page's orientation and script found by tesseract's OSD
(`--psm 0`, the osd traineddata); the page is turned upright and read again in the languages of
its script. A page still judged noise is reported as unreadable, never indexed.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from retrieval.readers import pdfstreams, quality
from retrieval.readers.text import join_hyphenated, normalise

if TYPE_CHECKING:
    from pdfminer.layout import LTTextBox

# A block wholly within this share of the page's height from its top or bottom edge is in the
# margin, where running headers, footers and page numbers live.
MARGIN_SHARE = 0.08
# Longer than this, a block is text, however often it repeats.
RUNNING_MAX_CHARS = 200
# A repeated margin block of this many words is a sentence (a disclaimer, a notice on every page),
# not a running title: it is kept the first time and dropped after.
SENTENCE_WORDS = 8
LETTER_WORD = re.compile(r"[^\W\d_]+")
# A margin line seen (digits aside) on at least this share of the pages is a running header.
REPEATED_SHARE = 0.5
# A block this much larger than the body text, and short, is a heading.
HEADING_SIZE_RATIO = 1.15
HEADING_MAX_CHARS = 150
PAGE_NUMBER = re.compile(
    r"^[\W_]*(?:(?:page|p\.|pp\.|стр\.?|страница|с\.)\s*)?"
    r"(?:\d{1,4}|[ivxlcdm]{1,6})(?:\s*(?:of|из|/)\s*\d{1,4})?[\W_]*$",
    re.IGNORECASE,
)
# pdfminer's stand-in for a glyph its font maps to no character (a symbol in a formula, say).
UNMAPPED_GLYPH = re.compile(r"\(cid:\d+\)")
# Chinese and Japanese are written without spaces; layout analysis puts one between each glyph.
CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
CJK_GAP = re.compile(f"(?<=[{CJK}]) (?=[{CJK}])")
BLOCK_END_HYPHEN = re.compile(r"(?<=[^\W\d_])-\n\n(?=([^\W\d_]))")


# pdfminer's layout analysis beyond its defaults: justified lines, whose word gaps grow past the
# default char_margin (2.0), came apart into one- and two-word blocks (bench/layout.py: a justified
# Russian text 32 such blocks of 118 and 83 % of sentences whole by default, none and 99.5 % at 4.0;
# a two-column paper whole either way).
class LayoutParams(TypedDict, total=False):
    """pdfminer's LAParams margins that the reader and bench/layout.py set."""

    line_overlap: float
    char_margin: float
    line_margin: float
    word_margin: float


LAPARAMS: LayoutParams = {"char_margin": 4.0}
# pdfminer's share of the parse timeout (60 s); pages after it are read by pdfium.
PDFMINER_SECONDS = 30.0
# pdfminer's time for one page, enforced inside the page (a one-page newspaper took it 21 s of
# CPU, pdfium 0.08 s): a page past it, and the pages after it, are read by pdfium.
PDFMINER_PAGE_SECONDS = 8.0
# pdfium's reading replaces pdfminer's when pdfminer found far fewer letters (a body in a CID
# font it cannot map, text it lost): fewer than this share of pdfium's, and this many fewer.
LOST_BODY_SHARE = 0.5
LOST_BODY_LETTERS = 40
# OCR: 300 dpi is what tesseract is trained on.
OCR_SCALE = 300 / 72
OCR_LANGUAGES = "rus+eng"
# The languages to read a page in once OSD has named its script; others get OCR_LANGUAGES.
SCRIPT_LANGUAGES = {"Cyrillic": "rus+eng", "Latin": "eng+rus"}
OSD_ROTATE = re.compile(r"^Rotate:\s*(\d+)", re.MULTILINE)
OSD_SCRIPT = re.compile(r"^Script:\s*(\w+)", re.MULTILINE)
OCR_MAX_PIXELS = 40_000_000
TESSERACT = os.environ.get("MINDSEARCH_TESSERACT", "tesseract")
# Pages with at most this share unreadable (no OCR to fix them) are left out, not the file.
MAX_UNREADABLE_SHARE = 0.1


class PdfUnreadable(Exception):
    """Neither engine could open the file; the message is the first engine's complaint."""

    def __init__(self, message: str, *, password: bool = False) -> None:
        super().__init__(message)
        self.password = password


@dataclass
class Block:
    text: str
    size: float = 0.0
    edge: bool = False


@dataclass
class Page:
    blocks: list[Block] = field(default_factory=list)
    has_images: bool = False
    verdict: quality.Verdict = quality.GOOD

    @property
    def text(self) -> str:
        return "\n\n".join(block.text for block in self.blocks if block.text)


@dataclass
class PdfText:
    """Page texts in order; `needs_ocr` are page indices left for OCR; `title` from metadata."""

    pages: list[str]
    needs_ocr: list[int]
    unreadable: dict[int, str]
    title: str = ""


def read(data: bytes) -> PdfText:
    """Read every page with the engines in turn; scans and garbage are marked, not guessed at.

    pdfminer inflates streams under caps (`pdfstreams`): a stream past them refuses the whole
    file with `pdfstreams.StreamTooLarge`, before pdfium, which has no cap of its own, sees it."""
    pdfstreams.start()
    pages, title, first_error, _complete = _pdfminer_pages(data)
    pdfstreams.check()
    for page in pages:
        page.verdict = quality.judge(page.text)
    # pdfium reads every file too: it is fast, and it catches pages pdfminer lost or had no time for.
    pdfium_pages, pdfium_error = _pdfium_pages(data)
    if not pages and pdfium_pages is None:
        password = any(word in f"{first_error} {pdfium_error}".lower() for word in ("password", "encrypt"))
        raise PdfUnreadable(first_error or pdfium_error or "no pages", password=password)
    pages = _second_reading(pages, pdfium_pages or [])
    _mark_headings(pages)
    _drop_running_lines(pages)
    texts: list[str] = []
    needs_ocr: list[int] = []
    unreadable: dict[int, str] = {}
    for index, page in enumerate(pages):
        text = _page_text(page)
        if not page.verdict.ok:
            unreadable[index] = page.verdict.reason
            text = ""
        if (not text.strip() and page.has_images) or not page.verdict.ok:
            needs_ocr.append(index)
        texts.append(text)
    return PdfText(texts, needs_ocr, unreadable, title)


def ocr_available() -> bool:
    """Whether tesseract with Russian and English is installed."""
    if shutil.which(TESSERACT) is None:
        return False
    try:
        listed = subprocess.run(
            [TESSERACT, "--list-langs"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    languages = set(listed.stdout.split())
    return {"rus", "eng"} <= languages


def osd_available() -> bool:
    """Whether tesseract has its orientation and script data (Debian: tesseract-ocr-osd)."""
    try:
        listed = subprocess.run(
            [TESSERACT, "--list-langs"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "osd" in listed.stdout.split()


def ocr_pages(data: bytes, indices: list[int]) -> Iterator[str]:
    """The OCR text of each page in `indices`, in order (pages rendered by pdfium)."""
    import pypdfium2

    document = pypdfium2.PdfDocument(data)
    try:
        for index in indices:
            page = document[index]
            width, height = page.get_size()
            # 300 dpi, but never a bitmap larger than OCR_MAX_PIXELS (a poster-sized page).
            scale = min(OCR_SCALE, (OCR_MAX_PIXELS / max(1.0, width * height)) ** 0.5)
            image = page.render(scale=scale, grayscale=True).to_pil()
            page.close()
            yield read_image(image)
    finally:
        document.close()


def read_image(image: Any) -> str:
    """OCR of one page image (a PIL image); turned upright first when it reads as noise."""
    text = _clean(_tesseract(_png(image)))
    if quality.judge(text).ok and quality.words_known(text).letters >= quality.MIN_WORD_LETTERS:
        return text
    rotate, script = _orientation(image)
    languages = SCRIPT_LANGUAGES.get(script, OCR_LANGUAGES)
    if rotate == 0 and languages == OCR_LANGUAGES:
        return text
    upright = image.rotate(-rotate, expand=True, fillcolor=255) if rotate else image
    again = _clean(_tesseract(_png(upright), languages))
    if quality.judge(again).ok and (not quality.judge(text).ok or len(again) >= len(text)):
        return again
    return text


def _orientation(image: Any) -> tuple[int, str]:
    """(degrees to turn the page clockwise to make it upright, script name) by tesseract's OSD;
    (0, "") when it cannot tell (too little text, no osd data)."""
    completed = subprocess.run(
        [TESSERACT, "stdin", "stdout", "--psm", "0"],
        input=_png(image),
        capture_output=True,
        check=False,
        env={**os.environ, "OMP_THREAD_LIMIT": "1"},
    )
    report = completed.stdout.decode("utf-8", errors="replace")
    rotate = OSD_ROTATE.search(report)
    script = OSD_SCRIPT.search(report)
    if completed.returncode != 0 or rotate is None:
        return 0, ""
    return int(rotate.group(1)) % 360, script.group(1) if script else ""


def _png(image: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _tesseract(png: bytes, languages: str = OCR_LANGUAGES) -> str:
    completed = subprocess.run(
        [TESSERACT, "stdin", "stdout", "-l", languages],
        input=png,
        capture_output=True,
        check=False,
        env={**os.environ, "OMP_THREAD_LIMIT": "1"},
    )
    if completed.returncode != 0:
        raise OSError(completed.stderr.decode(errors="replace").strip()[-300:] or "tesseract failed")
    return completed.stdout.decode("utf-8", errors="replace")


# --- pdfminer ---------------------------------------------------------------------------------


def _pdfminer_pages(data: bytes) -> tuple[list[Page], str, str, bool]:
    """(pages, title, error, complete): no pages and the error when pdfminer cannot read the
    file; not complete when its time ran out (pdfminer is pure Python: pdfium reads the rest)."""
    from pdfminer.layout import LAParams, LTFigure, LTImage, LTTextBox

    from retrieval.readers.pdflayout import extract_pages

    pages: list[Page] = []
    deadline = time.monotonic() + PDFMINER_SECONDS
    try:
        layouts = extract_pages(data, LAParams(all_texts=True, **LAPARAMS))
        while True:
            budget = min(PDFMINER_PAGE_SECONDS, deadline - time.monotonic())
            if budget <= 0:
                return pages, _pdfminer_title(data), "", False
            try:
                with _time_limit(budget):
                    layout = next(layouts)
            except StopIteration:
                break
            except _OutOfTime:
                return pages, _pdfminer_title(data), "", False
            height = layout.height or 1.0
            page = Page()
            for element in layout:
                if isinstance(element, LTTextBox):
                    edge = (
                        element.y0 >= layout.y1 - height * MARGIN_SHARE
                        or element.y1 <= layout.y0 + height * MARGIN_SHARE
                    )
                    page.blocks.append(Block(element.get_text(), _font_size(element), edge))
                elif isinstance(element, LTImage | LTFigure):
                    page.has_images = True
            pages.append(page)
    except pdfstreams.StreamTooLarge:
        raise
    except Exception as error:  # pdfminer raises many kinds on a damaged file
        return [], "", _describe(error), False
    return pages, _pdfminer_title(data), "", True


class _OutOfTime(BaseException):
    """pdfminer's time for a page ran out (a BaseException: pdfminer catches Exception inside)."""


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block after `seconds` (SIGALRM; in the main thread only, as the parser's
    child process runs it; elsewhere pages are checked between them only)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def out_of_time(_signal: int, _frame: object) -> None:
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, out_of_time)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _font_size(box: LTTextBox) -> float:
    from pdfminer.layout import LTChar

    sizes = [
        char.size for line in box for char in line if isinstance(char, LTChar) and char.get_text().strip()
    ]
    return statistics.median(sizes) if sizes else 0.0


def _pdfminer_title(data: bytes) -> str:
    from pdfminer.pdfdocument import PDFDocument
    from pdfminer.pdfparser import PDFParser
    from pdfminer.pdftypes import PDFObjRef
    from pdfminer.utils import decode_text

    try:
        document = PDFDocument(PDFParser(io.BytesIO(data)))
        for info in document.info:
            title = info.get("Title")
            if isinstance(title, PDFObjRef):
                title = title.resolve()
            if isinstance(title, bytes):
                return decode_text(title).strip()
            if isinstance(title, str):
                return title.strip()
    except Exception:  # a title is a nicety; a broken info dictionary is no reason to fail
        return ""
    return ""


# --- pdfium -----------------------------------------------------------------------------------


def _pdfium_pages(data: bytes) -> tuple[list[Page] | None, str]:
    import pypdfium2
    import pypdfium2.raw as pdfium_c

    try:
        document = pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError as error:
        return None, _describe(error)
    pages: list[Page] = []
    try:
        for index in range(len(document)):
            page = document[index]
            textpage = page.get_textpage()
            text = textpage.get_text_bounded()
            images = any(True for _ in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=3))
            textpage.close()
            page.close()
            pages.append(Page(_line_blocks(text), images))
    except pypdfium2.PdfiumError as error:
        return None, _describe(error)
    finally:
        document.close()
    return pages, ""


# pdfium joins a line that ends in a hyphen to the next and marks the hyphen (U+0002 in bounded
# text, U+FFFE elsewhere): put the line end back, so the hyphen is judged like pdfminer's.
PDFIUM_LINE_END_HYPHEN = re.compile(r"(?<=[^\W\d_])[\x02\ufffe](?=[^\W\d_])")


def _line_blocks(text: str) -> list[Block]:
    """pdfium's page text as blocks: the first and last two lines (the margins) and the body."""
    text = PDFIUM_LINE_END_HYPHEN.sub("-\n", text.replace("\r\n", "\n").replace("\r", "\n"))
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) <= 4:
        return [Block(line, 0.0, True) for line in lines]
    body = Block("\n".join(lines[2:-2]))
    return (
        [Block(line, 0.0, True) for line in lines[:2]]
        + [body]
        + [Block(line, 0.0, True) for line in lines[-2:]]
    )


def _second_reading(pages: list[Page], second: list[Page]) -> list[Page]:
    """pdfium's pages where pdfminer had none, found garbage or nothing, and pdfium did better."""
    for page in second:
        page.verdict = quality.judge(page.text)
    if not pages:
        return second
    pages = pages + second[len(pages) :]  # pages pdfminer had no time for
    for index, page in enumerate(pages[: len(second)]):
        other = second[index]
        page.has_images = page.has_images or other.has_images
        if page.verdict.ok and page.text.strip() and not _lost_body(page, other):
            continue
        if other.verdict.ok and (other.text.strip() or not page.verdict.ok):
            pages[index] = Page(other.blocks, page.has_images, other.verdict)
    return pages


def _lost_body(first: Page, second: Page) -> bool:
    """Whether the first reading lost most of the page's letters that the second found."""
    mine, theirs = _letters(first.text), _letters(second.text)
    return mine < LOST_BODY_SHARE * theirs and theirs - mine >= LOST_BODY_LETTERS


def _letters(text: str) -> int:
    return sum(1 for char in text if char.isalpha())


# --- Headings, running headers, page numbers ----------------------------------------------------


def _mark_headings(pages: list[Page]) -> None:
    """Blocks in a clearly larger font than the body, and short, become Markdown headings."""
    weights: Counter[float] = Counter()
    for page in pages:
        for block in page.blocks:
            if block.size:
                weights[round(block.size, 1)] += len(block.text)
    if not weights:
        return
    body = weights.most_common(1)[0][0]
    for page in pages:
        for block in page.blocks:
            text = " ".join(block.text.split())
            heading = (
                block.size >= body * HEADING_SIZE_RATIO
                and 0 < len(text) <= HEADING_MAX_CHARS
                and any(char.isalpha() for char in text)
            )
            if heading:
                block.text = f"## {text}"


def _drop_running_lines(pages: list[Page]) -> None:
    """Margin lines repeated on many pages (digits aside) and page numbers are not the text."""
    if len(pages) < 2:
        return
    seen: Counter[str] = Counter()
    for page in pages:
        seen.update({_running_key(block.text) for block in page.blocks if block.edge and block.text.strip()})
    pages_with_text = sum(1 for page in pages if page.text.strip())
    threshold = max(2, REPEATED_SHARE * pages_with_text)
    kept: set[str] = set()
    for page in pages:
        blocks = []
        for block in page.blocks:
            key = _running_key(block.text)
            running = (
                block.edge
                and len(block.text) <= RUNNING_MAX_CHARS
                and not block.text.startswith("## ")
                and block.text.strip()
                and (seen[key] >= threshold or PAGE_NUMBER.match(block.text.strip()))
            )
            if running and len(LETTER_WORD.findall(block.text)) >= SENTENCE_WORDS and key not in kept:
                kept.add(key)  # a notice or disclaimer on every page: text, kept once
                running = False
            if not running:
                blocks.append(block)
        page.blocks = blocks


def _running_key(text: str) -> str:
    return re.sub(r"\d+", "#", " ".join(text.split()).lower())


def _page_text(page: Page) -> str:
    """The page's blocks as paragraphs; a word broken between two blocks (each line its own box)
    is joined too."""
    text = "\n\n".join(_clean(block.text) for block in page.blocks if block.text.strip())
    return join_hyphenated(text, BLOCK_END_HYPHEN)


def _clean(text: str) -> str:
    """One block: words broken at line ends joined, ligatures and the like normalised, lines of a
    paragraph joined by spaces; blank lines (paragraph breaks) kept."""
    text = normalise(join_hyphenated(normalise(UNMAPPED_GLYPH.sub("", text))))
    paragraphs = re.split(r"\n[ \t]*\n", text)
    text = "\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs if paragraph.strip())
    return CJK_GAP.sub("", text)


def _describe(error: Exception) -> str:
    return str(error).strip()[:300] or type(error).__name__
