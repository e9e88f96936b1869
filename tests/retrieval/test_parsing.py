"""Parsing real files in the child process: PDF, DOCX, RTF, HTML, Markdown, text in any encoding,
and the ways they go wrong."""

from __future__ import annotations

import difflib
import io
import os
import re
import subprocess
import sys
import unicodedata
import zipfile
from collections import Counter
from pathlib import Path

import docx
import pytest

from retrieval.parsing import PROJECT_ROOT, UNSUPPORTED, ParseError, detect_kind, parse
from retrieval.readers import pdf as pdf_reader
from retrieval.readers import quality
from retrieval.readers.text import join_hyphenated, normalise
from tests.support import needs


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


def test_docx_table_rows_of_empty_cells_are_left_out():
    document = docx.Document()
    table = document.add_table(rows=3, cols=2)
    table.cell(0, 0).text = "model"
    table.cell(2, 1).text = "0.9"
    out = io.BytesIO()
    document.save(out)
    assert parse(out.getvalue(), filename="table.docx").text == "model | \n | 0.9"


def test_docx_zip_bomb_is_refused_before_it_is_read():
    bomb = zip_bytes({"[Content_Types].xml": b"<Types/>", "word/document.xml": b"\0" * 30_000_000})
    assert len(bomb) < 100_000
    with pytest.raises(ParseError, match=r"unpacks to more than 100 times its size \(a zip bomb\?\)"):
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


def test_a_note_that_mentions_the_pdf_header_is_text():
    note = b"# PDF notes\n\nEvery PDF starts with %PDF-1.7 and ends with %%EOF.\n"
    assert detect_kind(note) == "text"
    assert detect_kind(b"\r\n" + pdf_bytes(["x"])) == "pdf"


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


# --- Real files (tests/data/documents, made by its make.py) -----------------------------------------

DOCUMENTS = Path(__file__).resolve().parents[1] / "data" / "documents"
WORD = re.compile(r"\w+")


def fixture(name: str) -> bytes:
    return (DOCUMENTS / name).read_bytes()


def known_text(name: str) -> str:
    return (DOCUMENTS / name).with_suffix(".txt").read_text(encoding="utf-8")


def words(text: str) -> list[str]:
    return WORD.findall(unicodedata.normalize("NFKC", text).lower())


def recall(name: str, text: str) -> float:
    expected = words(known_text(name))
    return sum((Counter(expected) & Counter(words(text))).values()) / len(expected)


@pytest.fixture
def ocr() -> None:
    if not pdf_reader.ocr_available():
        needs.absent(
            "tesseract with Russian and English is missing: run scripts/ensure-tesseract (Debian:"
            " apt-get install tesseract-ocr tesseract-ocr-rus tesseract-ocr-eng) to run this test"
        )


def without_ocr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINDSEARCH_TESSERACT", "tesseract-not-installed")


def test_ligatures_are_letters_and_line_end_hyphens_are_joined():
    parsed = parse(fixture("ligatures.pdf"), filename="ligatures.pdf")
    assert "\ufb01" not in parsed.text and "\ufb03" not in parsed.text
    found = set(words(parsed.text))
    assert {"difficult", "difficulty", "efficient", "office", "offline", "typesetting", "paragraph"} <= found
    assert recall("ligatures.pdf", parsed.text) == 1.0


def test_three_columns_are_read_column_by_column():
    text = parse(fixture("three-columns.pdf"), filename="columns.pdf").text
    one, two, three = (text.index(f"Column {number}") for number in ("one", "two", "three"))
    assert one < two < three
    expected = words(known_text("three-columns.pdf"))
    assert difflib.SequenceMatcher(None, expected, words(text), autojunk=False).ratio() > 0.95


def test_running_headers_and_page_numbers_are_dropped_and_headings_kept():
    parsed = parse(fixture("report-headers.pdf"), filename="report.pdf")
    assert len(parsed.pages) == 8
    assert "ACME Research" not in parsed.text
    assert not re.search(r"Page \d+ of", parsed.text)
    assert "## Section 1: Findings" in parsed.text and "## Section 4: Методы" in parsed.text
    assert recall("report-headers.pdf", parsed.text) == 1.0
    # Each heading opens its page's text, so chunks of that page carry it.
    _number, start, end = parsed.pages[3]
    assert parsed.text[start:end].startswith("## Section 4: Методы")


def test_a_pdf_that_pdfminer_and_pypdf_call_damaged_is_read_by_pdfium():
    data = fixture("damaged.pdf")
    pages, _title, error, _complete = pdf_reader._pdfminer_pages(data)
    assert pages == [] and error
    parsed = parse(data, filename="damaged.pdf")
    assert recall("damaged.pdf", parsed.text) >= 0.95


def test_text_near_the_top_repeated_on_every_page_is_kept_when_it_is_not_in_the_margin():
    parsed = parse(pdf_bytes(["The same paragraph on every page of a form."] * 3), filename="form.pdf")
    assert parsed.text.count("The same paragraph on every page of a form.") == 3


def test_pages_pdfminer_has_no_time_for_are_read_by_pdfium(monkeypatch):
    monkeypatch.setattr(pdf_reader, "PDFMINER_SECONDS", 0.0)
    read = pdf_reader.read(fixture("report-headers.pdf"))
    assert len(read.pages) == 8 and all(read.pages)
    assert "ACME Research" not in " ".join(read.pages)
    assert recall("report-headers.pdf", "\n".join(read.pages)) >= 0.95


def test_a_public_corrupted_pdf_is_read():
    """pdfminer.six's sample: a stream that fails to inflate (pypdf: "Data-loss while
    decompressing corrupted data")."""
    parsed = parse(fixture("public/zen_of_python_corrupted.pdf"), filename="zen.pdf")
    assert "Beautiful is better than ugly." in parsed.text
    assert recall("public/zen_of_python_corrupted.pdf", parsed.text) >= 0.95


def test_a_password_protected_pdf_is_refused_as_such():
    with pytest.raises(ParseError, match=r"^the PDF is password-protected$"):
        parse(fixture("public/rc4-40-password.pdf"), filename="secret.pdf")


@pytest.mark.usefixtures("ocr")
def test_a_glyph_code_text_layer_is_read_by_ocr():
    parsed = parse(fixture("glyph-codes.pdf"), filename="glyph-codes.pdf")
    assert "(cid:" not in parsed.text and not re.search(r"/g\d+", parsed.text)
    assert recall("glyph-codes.pdf", parsed.text) >= 0.95


def test_a_glyph_code_text_layer_without_ocr_is_refused_saying_why_and_what_helps(monkeypatch):
    without_ocr(monkeypatch)
    with pytest.raises(ParseError) as raised:
        parse(fixture("glyph-codes.pdf"), filename="glyph-codes.pdf")
    message = str(raised.value)
    assert "text layer is unreadable (glyph codes instead of letters) on every page" in message
    assert "scripts/ensure-tesseract" in message and "tesseract-ocr-rus" in message


def merged_pdf(*names: str) -> bytes:
    import pypdfium2

    merged = pypdfium2.PdfDocument.new()
    for name in names:
        merged.import_pages(pypdfium2.PdfDocument(fixture(name)))
    out = io.BytesIO()
    merged.save(out)
    return out.getvalue()


def test_a_few_unreadable_pages_without_ocr_are_left_out_and_more_refuse_the_file(monkeypatch):
    without_ocr(monkeypatch)
    few = parse(merged_pdf("report-headers.pdf", "report-headers.pdf", "glyph-codes.pdf"), filename="a.pdf")
    assert len(few.pages) == 17
    _number, start, end = few.pages[16]
    assert few.text[start:end] == ""
    assert "## Section 8: Методы" in few.text and "(cid:" not in few.text
    with pytest.raises(
        ParseError, match=r"unreadable \(glyph codes instead of letters\) on page 9; OCR is not"
    ):
        parse(merged_pdf("report-headers.pdf", "glyph-codes.pdf"), filename="b.pdf")


@pytest.mark.usefixtures("ocr")
def test_ocr_of_a_poster_sized_page_stays_within_the_memory_cap(tmp_path):
    """At 300 dpi a 200-inch page would be a 3.6-gigapixel bitmap; the child's 2 GB cap holds."""
    import pypdfium2

    poster = pypdfium2.PdfDocument.new()
    poster.new_page(14400, 14400)
    path = tmp_path / "poster.pdf"
    poster.save(str(path))
    script = (
        "import resource, sys; from retrieval.parsing import CHILD_MEMORY_BYTES as m;"
        " resource.setrlimit(resource.RLIMIT_AS, (m, m)); from retrieval.readers import pdf;"
        " print(list(pdf.ocr_pages(open(sys.argv[1], 'rb').read(), [0])))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-500:]
    assert completed.stdout.strip() == "['']"


@pytest.mark.usefixtures("ocr")
@pytest.mark.parametrize("name", ["scan-ru.pdf", "scan-en.pdf"])
def test_scanned_pages_are_read_by_ocr(name):
    parsed = parse(fixture(name), filename=name)
    assert [number for number, _, _ in parsed.pages] == [1]
    assert recall(name, parsed.text) >= 0.95


def test_a_scan_without_ocr_says_how_to_add_it(monkeypatch):
    without_ocr(monkeypatch)
    with pytest.raises(ParseError, match=r"^no text found in the PDF \(a scan\?\); OCR is not installed"):
        parse(fixture("scan-ru.pdf"), filename="scan.pdf")


@pytest.mark.parametrize("name", ["tracked-changes.docx", "main-part-renamed.docx"])
def test_docx_keeps_insertions_notes_and_content_controls_and_drops_deletions(name):
    parsed = parse(fixture(name), filename=name)
    assert "This sentence was inserted with tracking on." in parsed.text
    assert "deleted" not in parsed.text
    assert "# Отчёт о чтении документов" in parsed.text and "## Details" in parsed.text
    assert "Сноска: данные собраны в 2025 году." in parsed.text
    assert "Endnote: see the appendix for the method." in parsed.text
    assert "Старые файлы часто сохранены" in parsed.text  # inside a content control
    assert recall(name, parsed.text) == 1.0


def test_docx_keeps_moved_text_once_at_its_new_place():
    with zipfile.ZipFile(io.BytesIO(docx_bytes())) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    moved = (
        f'<w:p {w}><w:moveFrom w:id="1" w:author="A"><w:r><w:t>Moved sentence.</w:t></w:r></w:moveFrom>'
        "<w:r><w:t>Staying sentence. </w:t></w:r>"
        '<w:moveTo w:id="2" w:author="A"><w:r><w:t>Moved sentence.</w:t></w:r></w:moveTo></w:p>'
    ).encode()
    members["word/document.xml"] = members["word/document.xml"].replace(b"<w:sectPr", moved + b"<w:sectPr", 1)
    text = parse(zip_bytes(members), filename="moved.docx").text
    assert "Staying sentence. Moved sentence." in text
    assert text.count("Moved sentence.") == 1


def test_a_zip_whose_main_part_is_a_spreadsheet_is_unsupported():
    members = {
        "[Content_Types].xml": b'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        b'<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument'
        b'.spreadsheetml.sheet.main+xml"/></Types>',
        "_rels/.rels": b'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        b'<Relationship Id="r1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        b'officeDocument" Target="xl/workbook.xml"/></Relationships>',
        "xl/workbook.xml": b"<workbook/>",
    }
    with pytest.raises(ParseError, match=UNSUPPORTED):
        parse(zip_bytes(members), filename="sheet.docx")


def test_rtf_is_converted_without_control_words_or_deletions():
    parsed = parse(fixture("tracked-changes.rtf"), filename="notes.rtf")
    assert detect_kind(fixture("tracked-changes.rtf")) == "rtf"
    assert "\\" not in parsed.text and "{" not in parsed.text
    assert "Отчёт о чтении документов" in parsed.text
    assert "deleted" not in parsed.text
    assert recall("tracked-changes.rtf", parsed.text) == 1.0


@pytest.mark.parametrize(
    "name", ["cp1251.text", "koi8-r.text", "ibm866.text", "utf-16le-no-bom.text", "latin-1.text"]
)
def test_legacy_encodings_are_decoded(name):
    parsed = parse(fixture(name), filename=name)
    assert parsed.text == known_text(name).strip().replace("\r\n", "\n")


def test_an_html_fragment_is_sniffed_by_its_tags_and_loses_scripts_and_styles():
    data = fixture("fragment.html")
    assert detect_kind(data) == "html"
    parsed = parse(data, filename="fragment.txt")
    assert "Съешь же ещё этих мягких французских булок" in parsed.text
    assert "tracking" not in parsed.text and "color" not in parsed.text and "<" not in parsed.text
    assert recall("fragment.html", parsed.text) == 1.0


def test_html_whose_tag_comes_late_in_a_legacy_encoding_is_html():
    data = fixture("late-html-cp1251.htm")
    assert b"<html" not in data[:2048]
    parsed = parse(data, filename="page.htm")
    assert parsed.title == "Отчёт"
    assert "var x" not in parsed.text and "font-family" not in parsed.text
    assert recall("late-html-cp1251.htm", parsed.text) == 1.0


def test_markdown_with_a_few_inline_tags_stays_text():
    note = b"# Notes\n\nLine one<br>\nSome <b>bold</b> words and <i>more</i> prose than markup in this note."
    assert detect_kind(note) == "text"
    assert parse(note, filename="note").text.startswith("# Notes")


def test_a_fragment_that_starts_with_text_is_html_by_its_closed_blocks():
    fragment = b"Saved from a forum:\n<div><p>First post.</p><p>Second post.</p><ul><li>One</li></ul></div>"
    assert detect_kind(fragment) == "html"
    text = parse(fragment, filename="posts.txt").text
    assert "Second post." in text and "<" not in text


def test_a_markdown_file_that_starts_with_html_is_markdown_by_its_name():
    readme = b'<p align="center"><img src="logo.png"></p>\n\n# Quokkas\n\nThey smile.\n'
    assert detect_kind(readme) == "html"
    parsed = parse(readme, filename="README.md")
    assert "# Quokkas" in parsed.text and parsed.title == "Quokkas"


# --- Cleaning and the quality check -------------------------------------------------------------------


def test_pdf_text_in_japanese_loses_the_spaces_layout_puts_between_glyphs():
    assert (
        pdf_reader._clean("み ん な の お の お の Hello World 日 本") == "みんなのおのおの Hello World 日本"
    )


def test_nfkc_and_soft_hyphens():
    assert normalise("e\ufb03cient of\u00adfice\r\nＡＢＣ") == "efficient office\nABC"


def test_line_end_hyphens_join_only_before_a_lower_case_letter():
    assert join_hyphenated("diffi-\ncult раз-\nбор") == "difficult разбор"
    assert join_hyphenated("Rus-\nSia 1990-\n2000") == "Rus-\nSia 1990-\n2000"


def test_a_compound_broken_at_its_own_hyphen_keeps_it():
    # Books and papers break lines at a compound's hyphen: the compound is not a broken word.
    text = "a well-\nknown half-\nhearted man, из-\nза того, кое-\nгде; program-\nming, програм-\nма"
    expected = "a well-known half-hearted man, из-за того, кое-где; programming, программа"
    assert join_hyphenated(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("/g18/g152/g33/g44 " * 20, "glyph codes"),
        ("(cid:12)(cid:33) (cid:5)" * 20, "glyph codes"),
        ("\ue000\ue001\ue002 " * 30, "private-use"),
        ("ÐœÐ¸Ñ€ ÐºÐ°Ðº Ð²Ð¾Ð»Ñ Ð¸ Ð¿Ñ€ÐµÐ´ÑÑ‚Ð°Ð²Ð»ÐµÐ½Ð¸Ðµ " * 5, "mojibake"),
        ("ÆüËÜ¸ì¤Î¥Æ¥¥¹¥È¤Ç¤¹¡£ ¤³¤ì¤Ï¥Æ¥¹¥È " * 5, "mojibake"),
        ("\x01\x02\x03 text " * 20, "control"),
        ("•·—–•·—– ...,,,;;; " * 10, "too few letters"),
    ],
)
def test_garbage_fails_the_quality_check(text, reason):
    verdict = quality.judge(text)
    assert not verdict.ok and reason in verdict.reason


@pytest.mark.parametrize("name", ["three-columns.txt", "cp1251.txt", "report-headers.txt"])
def test_prose_passes_the_quality_check(name):
    assert quality.judge((DOCUMENTS / name).read_text(encoding="utf-8")).ok


def test_a_page_of_prose_with_a_few_unmapped_formula_symbols_passes():
    page = "The mechanism satisfies (cid:2)-differential privacy for any data set D. " * 30
    assert quality.judge(page).ok


def test_formulas_and_tables_pass_the_quality_check():
    assert quality.judge("∀x ∈ ℝ: ∫₀¹ f(x) dx ≤ ‖f‖₂, α β γ δ → ∞; Σ Π ≈ ≠ " * 5).ok
    assert quality.judge("2019 2020 2021 12.5 13.7 14.9 1 234 567 89 0.05 0.01 " * 5).ok


def test_the_parsers_budget_is_its_own_cpu_time_enforced_by_the_kernel():
    """Wall time is the machine's load (a 600-page PDF: 11.6 s of CPU, past 60 s on the clock at a
    load average of 17); the child gets `timeout` seconds of CPU (RLIMIT_CPU) and three times as
    many on the clock."""
    import signal

    many_pages = pdf_bytes([f"Page {n} of a long and slow file about harbours." for n in range(3000)])
    completed = subprocess.run(
        [sys.executable, "-m", "retrieval.parsing", "pdf"],
        input=many_pages,
        capture_output=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, "MINDSEARCH_PARSE_CPU_SECONDS": "1"},
        check=False,
        timeout=120,
    )
    assert completed.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and not completed.stdout
    with pytest.raises(ParseError, match=r"^reading the file took longer than 1 s$"):
        parse(many_pages, filename="long.pdf", timeout=1)


def test_a_word_made_of_two_words_broken_between_them_is_joined():
    # "some-where" is two frequent words, but "somewhere" is more frequent still: one word.
    text = "some-\nwhere every-\nthing news-\npaper any-\none vaso-\npressin twenty-\nfive"
    assert join_hyphenated(text) == "somewhere everything newspaper anyone vasopressin twenty-five"
    assert join_hyphenated("какой-\nнибудь сказа-\nла") == "какой-нибудь сказала"


def test_a_pdf_line_broken_at_a_compounds_hyphen_keeps_the_compound():
    # bench/bigfile.py's book: textwrap breaks lines at hyphens, so a page reads "well-" / "known".
    from bench.bigfile import book

    line = "It was a well-known fact that the programme of the evening was a long one. "
    text = pdf_reader.read(book(1, text=line * 6)).pages[0]  # the line, again and again
    assert "wellknown" not in text
    assert text.count("well-known") == text.count("well") > 40
