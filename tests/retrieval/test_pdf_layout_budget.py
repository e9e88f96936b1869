"""pdfminer's layout analysis within a memory budget: a page of many separately placed words is
laid out in memory linear in them (issue 26: a 70 KB page of 22,000 placed glyphs took the parser's
child to 590 MB), and ordinary pages are laid out exactly as pdfminer lays them out."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from pdfminer.high_level import extract_pages as pdfminer_extract_pages
from pdfminer.layout import LAParams, LTTextBox

from retrieval.parsing import PROJECT_ROOT
from retrieval.readers import pdflayout
from retrieval.readers.pdf import LAPARAMS

DOCUMENTS = Path(__file__).resolve().parents[1] / "data" / "documents"
ROWS, COLUMNS = 40, 24  # 960 words, each a text box of its own


def grid_pdf(rows: int = ROWS, columns: int = COLUMNS) -> bytes:
    """One page of `rows` × `columns` short words, each placed on its own far from the others."""
    ops = ["BT /F1 4 Tf"]
    for row in range(rows):
        for column in range(columns):
            ops.append(f"1 0 0 1 {20 + column * 24} {810 - row * 20} Tm (r{row}c{column}) Tj")
    ops.append("ET")
    stream = zlib.compress("\n".join(ops).encode(), 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 600 842] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


# In a child of its own, as the parser runs: the growth of its peak resident memory while
# pdfminer reads the page, and the words in the order it read them. Capped at 60 s of CPU.
MEASURE = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_CPU, (60, 61))
from retrieval.readers import pdf, pdfstreams
data = sys.stdin.buffer.read()
pdfstreams.start()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
pages, _title, error, complete = pdf._pdfminer_pages(data)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"grown_mb": grown / 1024, "complete": complete, "error": error,
                  "words": [page.text.split() for page in pages]}))
"""


def test_a_page_of_many_separate_words_is_laid_out_in_memory_linear_in_them() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", MEASURE],
        input=grid_pdf(),
        capture_output=True,
        cwd=PROJECT_ROOT,
        check=False,
        timeout=600,
    )
    # Before: pdfminer's pairwise heap of 960 boxes, about +170 MB and 7 s of CPU.
    assert completed.returncode == 0, completed.stderr[-500:]
    answer = json.loads(completed.stdout)
    assert answer["complete"] and not answer["error"]
    assert answer["grown_mb"] < 60, answer["grown_mb"]
    # Still read by pdfminer, every word, in reading order: row by row, left to right.
    assert answer["words"] == [[f"r{row}c{column}" for row in range(ROWS) for column in range(COLUMNS)]]


def boxes(layouts: object) -> list[list[tuple[str, tuple[float, float, float, float]]]]:
    return [
        [(element.get_text(), element.bbox) for element in page if isinstance(element, LTTextBox)]
        for page in layouts  # type: ignore[attr-defined]
    ]


@pytest.mark.parametrize(
    "name",
    [
        "layout/two-column-en.pdf",
        "layout/justified-ru.pdf",
        "report-headers.pdf",
        "three-columns.pdf",
        "ligatures.pdf",
        "glyph-codes.pdf",
    ],
)
def test_ordinary_pages_are_laid_out_exactly_as_pdfminer_lays_them_out(name: str) -> None:
    data = (DOCUMENTS / name).read_bytes()
    laparams = LAParams(all_texts=True, char_margin=LAPARAMS["char_margin"])
    ours = boxes(pdflayout.extract_pages(data, laparams))
    theirs = boxes(pdfminer_extract_pages(str(DOCUMENTS / name), laparams=laparams))
    assert ours == theirs and any(ours)


def test_the_bound_is_past_the_boxes_of_ordinary_pages() -> None:
    """The densest page of the documents measured had 45 boxes; grouping 500 stays cheap."""
    assert 45 * 10 < pdflayout.MAX_GROUPED_BOXES < ROWS * COLUMNS
