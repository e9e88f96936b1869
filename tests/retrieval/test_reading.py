"""Text that used to be lost or mangled: RTF footnotes, Strict and altChunk DOCX, a notice on every
page, HTML inline tags, a page pdfminer takes too long over."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import pytest

from retrieval.parsing import parse
from retrieval.readers import pdf as pdf_reader
from tests.retrieval.test_parsing import docx_bytes, zip_bytes

STRICT = {
    b"http://schemas.openxmlformats.org/wordprocessingml/2006/main": b"http://purl.oclc.org/ooxml/wordprocessingml/main",
    b"http://schemas.openxmlformats.org/officeDocument/2006/relationships": (
        b"http://purl.oclc.org/ooxml/officeDocument/relationships"
    ),
}


def members_of(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def positioned_pdf(pages: list[list[tuple[int, str]]]) -> bytes:
    """A PDF whose pages hold lines of Helvetica at the given heights (points from the bottom)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    kids = []
    for lines in pages:
        stream = b" ".join(
            b"BT /F1 10 Tf 72 %d Td (%s) Tj ET" % (height, text.encode("latin-1")) for height, text in lines
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
            b" /Resources << /Font << /F1 3 0 R >> >> >>" % len(objects)
        )
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_word_rtf_footnotes_are_kept():
    rtf = (
        rb"{\rtf1\ansi\ansicpg1251\deff0{\fonttbl{\f0\fcharset204 Times New Roman;}}"
        rb"\pard Body text of the report.{\super\chftn}"
        rb"{\footnote \pard\plain {\super\chftn} The survey data were collected in 2025.}"
        rb" More body text.\par}"
    )
    text = parse(rtf, filename="report.rtf").text
    assert "The survey data were collected in 2025." in text
    assert "Body text of the report." in text and "More body text." in text


def test_a_strict_open_xml_docx_is_read():
    members = members_of(docx_bytes())
    for name, data in members.items():
        if name.endswith((".xml", ".rels")) and name != "[Content_Types].xml":
            for transitional, strict in STRICT.items():
                data = data.replace(transitional, strict)
            members[name] = data
    assert b"purl.oclc.org" in members["word/document.xml"]
    parsed = parse(zip_bytes(members), filename="strict.docx")
    assert "# Introduction" in parsed.text and "## Results" in parsed.text
    assert "Experts route tokens to the best expert." in parsed.text and "MoT | 0.9" in parsed.text


def test_a_docx_whose_text_is_an_altchunk_html_part_is_read():
    members = members_of(docx_bytes())
    html = (
        b"<html><head><style>p {color: red}</style></head><body><p>Imported paragraph about"
        b" wallabies.</p><ul><li>First item</li><li>Second item</li></ul></body></html>"
    )
    members["word/afchunk.htm"] = html
    rels = members["word/_rels/document.xml.rels"]
    members["word/_rels/document.xml.rels"] = rels.replace(
        b"</Relationships>",
        b'<Relationship Id="rIdAlt1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
        b'relationships/aFChunk" Target="afchunk.htm"/></Relationships>',
    )
    r = b'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
    members["word/document.xml"] = members["word/document.xml"].replace(
        b"<w:sectPr", b'<w:altChunk %s r:id="rIdAlt1"/><w:sectPr' % r, 1
    )
    text = parse(zip_bytes(members), filename="alt.docx").text
    assert "Imported paragraph about wallabies." in text
    assert "First item" in text and "Second item" in text
    assert "color" not in text and "<" not in text


def test_a_notice_repeated_in_every_pages_margin_is_kept_once_and_a_running_title_dropped():
    notice = "This document is provided for information only and does not constitute legal advice."
    pages = [
        [(760, "Quarterly Review"), (700, f"Body of page {n} about harbour traffic."), (40, notice)]
        for n in range(1, 5)
    ]
    text = parse(positioned_pdf(pages), filename="review.pdf").text
    assert text.count(notice) == 1
    assert "Quarterly Review" not in text
    assert all(f"Body of page {n} about harbour traffic." in text for n in range(1, 5))


def test_html_inline_tags_never_reach_the_text():
    page = (
        "<html><head><title>T</title></head><body><article><h1>Заголовок</h1><p>Это мнения раз<u>ных</u>"
        " людей: E=mc<sup>2</sup>, H<sub>2</sub>O и <span class='x'>примечание</span><sup><a href='#n'>1</a>"
        "</sup>. Длинный абзац, чтобы страница считалась содержимым и была прочитана целиком.</p></article>"
        "</body></html>"
    ).encode()
    text = parse(page, filename="page.html").text
    assert "<" not in text and ">" not in text
    assert "разных" in text and "mc2" in text


def test_a_page_pdfminer_takes_too_long_over_is_read_by_pdfium_within_the_page_budget(monkeypatch):
    keepers = {1: "lighthouses", 2: "harbours", 3: "canals"}
    pages = [[(700, f"Page {n} speaks of {keepers[n]} and their keepers.")] for n in range(1, 4)]
    data = positioned_pdf(pages)
    from pdfminer import pdfinterp

    slow = pdfinterp.PDFPageInterpreter.process_page

    def crawl(self, page):  # a page whose layout takes pdfminer minutes (a newspaper's)
        time.sleep(30)
        return slow(self, page)

    monkeypatch.setattr(pdfinterp.PDFPageInterpreter, "process_page", crawl)
    monkeypatch.setattr(pdf_reader, "PDFMINER_PAGE_SECONDS", 0.5)
    started = time.monotonic()
    read = pdf_reader.read(data)
    assert time.monotonic() - started < 10
    assert all(f"Page {n} speaks of {keepers[n]}" in read.pages[n - 1] for n in range(1, 4))


def test_pdfium_keeps_line_end_hyphens_as_text(monkeypatch):
    # pdfium joins a line that ends in a hyphen to the next and marks the hyphen with a control
    # character (U+0002): it must not reach a passage as "well\x02known".
    lines = [
        "The keepers of the lighthouse were a well-",
        "known family of the coast, and their work was diffi-",
        "cult in winter, as every log of the station shows.",
        "The lamp was lit at dusk and put out at dawn by the",
        "keeper on watch, who wrote the weather in the log.",
        "Ships passing the headland answered the light with",
        "their own signals, which were written down as well.",
    ]
    data = positioned_pdf([[(700 - 15 * row, line) for row, line in enumerate(lines)]])
    monkeypatch.setattr(pdf_reader, "PDFMINER_SECONDS", 0.0)  # every page read by pdfium
    text = " ".join(pdf_reader.read(data).pages[0].split())
    assert "a well-known family" in text and "was difficult in winter" in text
    assert not any(ord(char) < 32 and char not in "\n\t" for char in text)


def test_pdfium_reads_a_body_pdfminer_loses(monkeypatch):
    data = positioned_pdf([[(700, "The body of the page, which one engine loses entirely, is here.")]])
    real = pdf_reader._pdfminer_pages

    def without_body(data: bytes):
        pages, title, error, complete = real(data)
        for page in pages:
            page.blocks = [pdf_reader.Block("The")]
        return pages, title, error, complete

    monkeypatch.setattr(pdf_reader, "_pdfminer_pages", without_body)
    assert "one engine loses entirely" in pdf_reader.read(data).pages[0]


@pytest.mark.parametrize("engine", ["pdfminer", "pdfium"])
def test_both_engines_keep_a_tables_rows_on_its_page(engine, monkeypatch):
    rows = ["Year Ships Tonnage", "2023 412 1,200", "2024 455 1,310"]
    data = positioned_pdf([[(700, "Intro page.")], [(700 - 14 * n, row) for n, row in enumerate(rows)]])
    if engine == "pdfium":
        monkeypatch.setattr(pdf_reader, "PDFMINER_SECONDS", 0.0)
    parsed = pdf_reader.read(data)
    for row in rows:
        assert row in parsed.pages[1]


LAYOUT = Path(__file__).resolve().parents[1] / "data" / "documents" / "layout"


@pytest.mark.parametrize("name", ["justified-ru", "two-column-en"])
def test_justified_lines_and_columns_stay_together(name):
    """pdfminer's default char_margin split justified lines at their wide word gaps (32 one- or
    two-word blocks of 118 on the Russian page, 83 % of sentences whole)."""
    sentences = (LAYOUT / f"{name}.sentences").read_text(encoding="utf-8").splitlines()
    parsed = parse((LAYOUT / f"{name}.pdf").read_bytes(), filename=f"{name}.pdf")
    paragraphs = [p for p in parsed.text.split("\n\n") if p.strip()]
    assert sum(1 for p in paragraphs if len(p.split()) <= 2) <= 1
    text = " ".join(parsed.text.split())
    assert sum(1 for s in sentences if s in text) / len(sentences) >= 0.98
