"""Parsing real files in the child process: PDF, DOCX, HTML, Markdown, and the ways they go wrong."""

from __future__ import annotations

import io
import zipfile

import docx
import pytest

from retrieval.parsing import UNSUPPORTED, ParseError, detect_kind, parse


def pdf_bytes(pages: list[str], title: str = "") -> bytes:
    """A minimal valid PDF with one line of Helvetica text per page, offsets computed."""
    count = len(pages)
    font = 3 + 2 * count
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (b" ".join(b"%d 0 R" % (3 + 2 * n) for n in range(count)), count),
    ]
    for n, text in enumerate(pages):
        stream = b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % text.encode("latin-1")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
            b" /Resources << /Font << /F1 %d 0 R >> >> >>" % (4 + 2 * n, font)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    objects.append(b"<< /Title (%s) >>" % title.encode("latin-1"))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info %d 0 R >>\n" % (len(objects) + 1, len(objects))
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def docx_bytes() -> bytes:
    document = docx.Document()
    document.core_properties.title = "Mixture of Tokens"
    document.add_heading("Introduction", level=1)
    document.add_paragraph("Experts route tokens to the best expert.")
    document.add_heading("Results", level=2)
    document.add_paragraph("Mixing tokens improves throughput.")
    table = document.add_table(rows=2, cols=2)
    for row, values in zip(table.rows, [("model", "score"), ("MoT", "0.9")], strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


# --- PDF -------------------------------------------------------------------------------------------


def test_pdf_text_and_page_offsets():
    parsed = parse(pdf_bytes(["Routing tokens to experts", "Mixing tokens instead"]), filename="paper.pdf")
    assert [number for number, _, _ in parsed.pages] == [1, 2]
    (_, start1, end1), (_, start2, end2) = parsed.pages
    assert "Routing tokens to experts" in parsed.text[start1:end1]
    assert "Mixing tokens instead" in parsed.text[start2:end2]
    assert end1 <= start2


def test_pdf_title_comes_from_its_metadata():
    parsed = parse(pdf_bytes(["Body text"], title="Mixture of Tokens"), filename="x.pdf")
    assert parsed.title == "Mixture of Tokens"


def test_pdf_from_a_path(tmp_path):
    path = tmp_path / "upload.bin"
    path.write_bytes(pdf_bytes(["From a file on disk"]))
    assert "From a file on disk" in parse(path, filename="upload.bin").text


def test_damaged_pdf_is_a_clear_error():
    broken = pdf_bytes(["Hello"])[:60] + b"\x00garbage" * 10
    with pytest.raises(ParseError, match=r"^the PDF is damaged: "):
        parse(broken, filename="paper.pdf")


def test_pdf_without_text_is_an_error():
    with pytest.raises(ParseError, match="no text found in the PDF"):
        parse(pdf_bytes([""]), filename="scan.pdf")


# --- DOCX ------------------------------------------------------------------------------------------


def test_docx_text_keeps_headings_as_markdown_and_tables():
    parsed = parse(docx_bytes(), filename="notes.docx")
    assert parsed.pages == []
    assert parsed.title == "Mixture of Tokens"
    assert "# Introduction\n\nExperts route tokens to the best expert." in parsed.text
    assert "## Results" in parsed.text
    assert "model | score\nMoT | 0.9" in parsed.text


def test_docx_zip_bomb_is_refused_before_it_is_read():
    bomb = zip_bytes({"[Content_Types].xml": b"<Types/>", "word/document.xml": b"\0" * 30_000_000})
    assert len(bomb) < 100_000
    with pytest.raises(ParseError, match=r"too large when unpacked \(zip bomb\?\)"):
        parse(bomb, filename="bomb.docx")


def test_zip_that_is_not_a_docx_is_unsupported():
    with pytest.raises(ParseError, match=UNSUPPORTED):
        parse(zip_bytes({"xl/workbook.xml": b"<workbook/>"}), filename="sheet.docx")


def test_broken_docx_is_a_clear_error():
    with zipfile.ZipFile(io.BytesIO(docx_bytes())) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["word/document.xml"] = b"<not really"
    with pytest.raises(ParseError, match=r"^the DOCX is damaged: "):
        parse(zip_bytes(members), filename="broken.docx")


# --- Type by content, never by name ---------------------------------------------------------------


def test_a_png_named_pdf_is_unsupported():
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    with pytest.raises(ParseError, match=UNSUPPORTED):
        parse(png, filename="report.pdf")


def test_a_pdf_named_txt_is_read_as_a_pdf():
    parsed = parse(pdf_bytes(["Actually a PDF"]), filename="notes.txt")
    assert "Actually a PDF" in parsed.text
    assert parsed.pages


def test_html_is_sniffed_and_its_tags_dropped():
    page = (
        b"<!DOCTYPE html><html><head><title>Tokens</title></head><body><article>"
        b"<h1>Mixture of Tokens</h1><p>Tokens are mixed across examples in a group.</p>"
        b"</article></body></html>"
    )
    parsed = parse(page, filename="page.txt")
    assert detect_kind(page) == "html"
    assert "Tokens are mixed across examples" in parsed.text
    assert "<p>" not in parsed.text
    assert parsed.title == "Tokens"


def test_markdown_and_plain_text():
    parsed = parse("# Смесь токенов\n\nТекст заметки.".encode(), filename="note.bin")
    assert parsed.text == "# Смесь токенов\n\nТекст заметки."
    assert parsed.title == "Смесь токенов"
    assert parsed.pages == []


def test_text_title_falls_back_to_the_first_line_then_the_name():
    assert parse(b"First line\nsecond", filename="a.txt").title == "First line"


def test_windows_line_endings_and_bom_are_normalised():
    parsed = parse(b"\xef\xbb\xbfline one\r\nline two\r\n", filename="a.txt")
    assert parsed.text == "line one\nline two"


def test_binary_junk_is_unsupported():
    with pytest.raises(ParseError, match=UNSUPPORTED):
        parse(bytes(range(256)) * 4, filename="data.txt")


def test_latin1_text_is_read_in_its_encoding():
    text = "Café crème et façade naïve : les données de l'année dernière sont arrivées à Zürich."
    assert parse(text.encode("latin-1"), filename="a.txt").text == text


# --- Limits ----------------------------------------------------------------------------------------


def test_parser_that_runs_too_long_is_stopped():
    with pytest.raises(ParseError, match=r"took longer than 0\.001 s"):
        parse(pdf_bytes(["Slow enough"]), filename="slow.pdf", timeout=0.001)
