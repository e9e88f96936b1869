"""Make the document fixtures in this folder with real tools (run by hand, not by the tests).

    pip install --target /tmp/tools fpdf2==2.8.9 pypdf==7.1.0   # PDFs (with Pillow, fontTools)
    apt-get install libreoffice-writer-nogui fonts-dejavu-core
    PYTHONPATH=/tmp/tools .venv/bin/python tests/data/documents/make.py

Each fixture NAME.EXT has its known text in NAME.txt (UTF-8): what a reader must find in it.
Fonts are Debian's DejaVu (free licence); all text is written for these fixtures.
PDFs: fpdf2 (ligature code points in the text, three columns, running headers and footers,
headings in a larger size; a font without its /ToUnicode map for a glyph-code text layer);
pypdfium2 to check; Pillow for the scanned pages (image-only PDFs at 300 dpi). DOCX and RTF:
LibreOffice converts flat ODT written here (tracked insertion, deletion and move, footnote,
endnote, content control, headings); one DOCX has its main part renamed. Encodings: Python's
codecs over the same Russian text.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

HERE = Path(__file__).resolve().parent
FONTS = Path("/usr/share/fonts/truetype/dejavu")

EN = [
    "Reading real documents is more difficult than it looks. The first difficulty is the layout:"
    " a page of a scientific paper is set in columns, with headers, footers and page numbers that"
    " belong to no paragraph.",
    "The second difficulty is the font. Typesetting systems join letters into ligatures, so the"
    " office workflow that produced a report stores fi, fl and ffi as single glyphs, and a search"
    " for an efficient offline method finds nothing unless the text is normalised.",
    "The third difficulty is the encoding of old files. Reports written twenty years ago were"
    " saved in code pages that nobody names any more, and they still have to be found.",
]
RU = [
    "Настоящий отчёт описывает результаты исследования качества поиска по частным документам."
    " Пользователи хранят отчёты, статьи и сканы на русском и английском языках.",
    "Старые файлы часто сохранены в кодировках Windows-1251, КОИ-8 или DOS, и программа должна"
    " прочитать их так же хорошо, как современный текст в UTF-8.",
    "Съешь же ещё этих мягких французских булок да выпей чаю: эта фраза содержит все буквы"
    " русского алфавита и помогает проверить, что ни одна из них не потерялась.",
]
LIGATURES = {"ffi": "\ufb03", "ffl": "\ufb04", "fi": "\ufb01", "fl": "\ufb02", "ff": "\ufb00"}


def write_known(name: str, text: str) -> None:
    (HERE / f"{name}.txt").write_text(text.strip() + "\n", encoding="utf-8")


def pdf(**kwargs: object) -> object:
    from fpdf import FPDF

    document = FPDF(**kwargs)
    document.add_font("DejaVu", "", str(FONTS / "DejaVuSerif.ttf"))
    document.add_font("DejaVu", "B", str(FONTS / "DejaVuSerif-Bold.ttf"))
    document.set_font("DejaVu", size=11)
    return document


def ligatured(text: str) -> str:
    for letters, glyph in LIGATURES.items():
        text = text.replace(letters, glyph)
    return text


def make_ligatures() -> None:
    """English prose whose fi/ffi/fl are ligature code points, hyphenated at line ends."""
    document = pdf()
    document.add_page()
    document.set_font("DejaVu", size=11)
    for paragraph in EN:
        # Narrow lines with explicit hyphenation: "diffi-" at one line end, "cult" on the next.
        words = ligatured(paragraph).split()
        line = ""
        for word in words:
            if len(line) + len(word) > 38 and len(word) > 7:
                cut = len(word) // 2
                document.cell(0, 6, f"{line} {word[:cut]}-".strip(), new_x="LMARGIN", new_y="NEXT")
                line = word[cut:]
            elif len(line) + len(word) > 38:
                document.cell(0, 6, line, new_x="LMARGIN", new_y="NEXT")
                line = word
            else:
                line = f"{line} {word}".strip()
        document.cell(0, 6, line, new_x="LMARGIN", new_y="NEXT")
        document.ln(4)
    document.output(str(HERE / "ligatures.pdf"))
    write_known("ligatures", "\n\n".join(EN))


def make_columns() -> None:
    """Three columns of English prose on one page, written line by line across the columns (as
    many typesetters and converters write them), so the content stream's order is not the
    reading order."""
    import textwrap

    document = pdf()
    document.add_page()
    document.set_font("DejaVu", size=9)
    columns = [
        "Column one begins the story. " + EN[0],
        "Column two continues it. " + EN[1],
        "Column three ends the story. " + EN[2],
    ]
    wrapped = [textwrap.wrap(text, width=34) for text in columns]
    for row in range(max(map(len, wrapped))):
        for column, lines in enumerate(wrapped):
            if row < len(lines):
                document.text(x=10 + column * 65, y=20 + row * 4.5, text=lines[row])
    document.output(str(HERE / "three-columns.pdf"))
    write_known("three-columns", "\n\n".join(columns))


def make_report() -> None:
    """Six pages with a running header, a "Page N of M" footer and headings in a larger size."""
    from fpdf import FPDF

    class Report(FPDF):
        def header(self) -> None:
            self.set_font("DejaVu", size=8)
            self.cell(0, 8, "ACME Research — Annual report 2025 — confidential", align="C")
            self.ln(12)

        def footer(self) -> None:
            self.set_y(-15)
            self.set_font("DejaVu", size=8)
            self.cell(0, 8, f"Page {self.page_no()} of {{nb}}", align="C")

    document = Report()
    document.add_font("DejaVu", "", str(FONTS / "DejaVuSerif.ttf"))
    document.add_font("DejaVu", "B", str(FONTS / "DejaVuSerif-Bold.ttf"))
    known = []
    sections = EN + RU + EN[:1] + RU[:1]
    for number, paragraph in enumerate(sections, start=1):
        document.add_page()
        heading = f"Section {number}: {'Findings' if number % 2 else 'Методы'}"
        document.set_font("DejaVu", "B", size=16)
        document.multi_cell(0, 10, heading, new_x="LMARGIN", new_y="NEXT")
        document.set_font("DejaVu", size=11)
        for _ in range(2):
            document.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
            document.ln(3)
        known += [f"## {heading}", paragraph, paragraph]
    document.output(str(HERE / "report-headers.pdf"))
    write_known("report-headers", "\n\n".join(known))


def make_glyph_codes() -> None:
    """A PDF whose embedded font has no /ToUnicode map: the text layer is glyph codes only."""
    import pypdf

    document = pdf()
    document.add_page()
    document.set_font("DejaVu", size=14)
    for paragraph in EN[:2]:
        document.multi_cell(0, 8, paragraph, new_x="LMARGIN", new_y="NEXT")
        document.ln(4)
    buffer = io.BytesIO()
    document.output(buffer)
    reader = pypdf.PdfReader(io.BytesIO(buffer.getvalue()))
    writer = pypdf.PdfWriter(clone_from=reader)
    for page in writer.pages:
        for font in page["/Resources"]["/Font"].values():
            font.get_object().pop("/ToUnicode", None)
    writer.write(str(HERE / "glyph-codes.pdf"))
    write_known("glyph-codes", "\n\n".join(EN[:2]))


def make_damaged() -> None:
    """A PDF with its cross-reference table and trailer cut off and object offsets shifted."""
    document = pdf()
    document.add_page()
    for paragraph in EN[1:] + RU[:1]:
        document.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
        document.ln(3)
    data = bytes(document.output())
    cut = data.rindex(b"xref")
    damaged = b"%PDF-1.7\n%junk inserted after the header\n" + data[len(b"%PDF-1.3\n") : cut]
    (HERE / "damaged.pdf").write_bytes(damaged)
    write_known("damaged", "\n\n".join(EN[1:] + RU[:1]))


def make_scans() -> None:
    """Image-only PDFs: text drawn at 300 dpi onto a page-sized image, as a scanner would."""
    from PIL import Image, ImageDraw, ImageFont

    for name, paragraphs in (("scan-en", EN[:2]), ("scan-ru", RU[:2])):
        page = Image.new("L", (2480, 3508), 255)
        draw = ImageDraw.Draw(page)
        font = ImageFont.truetype(str(FONTS / "DejaVuSerif.ttf"), 42)
        y = 250
        for paragraph in paragraphs:
            line = ""
            for word in paragraph.split():
                if draw.textlength(f"{line} {word}", font=font) > 2000:
                    draw.text((240, y), line, font=font, fill=0)
                    y, line = y + 62, word
                else:
                    line = f"{line} {word}".strip()
            draw.text((240, y), line, font=font, fill=0)
            y += 110
        # Black and white, as office scanners save text pages (and small enough to commit).
        page.convert("1").save(HERE / f"{name}.pdf", "PDF", resolution=300)
        write_known(name, "\n\n".join(paragraphs))


def fodt(body: str) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
        ' xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"'
        ' xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0"'
        ' xmlns:dc="http://purl.org/dc/elements/1.1/"'
        ' xmlns:loext="urn:org:documentfoundation:names:experimental:office:xmlns:loext:1.0"'
        ' office:version="1.3" office:mimetype="application/vnd.oasis.opendocument.text">'
        f"<office:body><office:text>{body}</office:text></office:body></office:document>"
    )


def change(identifier: str, kind: str, deleted: str = "") -> str:
    content = f"<text:p>{escape(deleted)}</text:p>" if deleted else ""
    return (
        f'<text:changed-region text:id="{identifier}"><text:{kind}><office:change-info>'
        "<dc:creator>Editor</dc:creator><dc:date>2025-05-01T10:00:00</dc:date>"
        f"</office:change-info>{content}</text:{kind}></text:changed-region>"
    )


def make_office() -> None:
    """DOCX with tracked changes, notes and a content control; the same text as RTF; a DOCX
    whose main part is not word/document.xml."""
    inserted = "This sentence was inserted with tracking on."
    deleted = "This sentence was deleted with tracking on."
    body = (
        '<text:tracked-changes text:track-changes="true">'
        + change("c1", "insertion")
        + change("c2", "deletion", deleted)
        + "</text:tracked-changes>"
        + '<text:h text:outline-level="1">Отчёт о чтении документов</text:h>'
        + f"<text:p>{escape(RU[0])}"
        + '<text:note text:id="n1" text:note-class="footnote"><text:note-citation>1</text:note-citation>'
        + "<text:note-body><text:p>Сноска: данные собраны в 2025 году.</text:p></text:note-body></text:note>"
        + "</text:p>"
        + f"<text:p>{escape(EN[0])} "
        + '<text:change-start text:change-id="c1"/>'
        + escape(inserted)
        + '<text:change-end text:change-id="c1"/> <text:change text:change-id="c2"/></text:p>'
        + '<text:h text:outline-level="2">Details</text:h>'
        + f"<text:p>{escape(EN[1])}"
        + '<text:note text:id="n2" text:note-class="endnote"><text:note-citation>i</text:note-citation>'
        + "<text:note-body><text:p>Endnote: see the appendix for the method.</text:p>"
        + "</text:note-body></text:note>"
        + "</text:p>"
        + f"<text:p><loext:content-control>{escape(RU[1])}</loext:content-control></text:p>"
    )
    known = "\n\n".join(
        [
            "# Отчёт о чтении документов",
            RU[0],
            f"{EN[0]} {inserted}",
            "## Details",
            EN[1],
            RU[1],
            "Сноска: данные собраны в 2025 году.",
            "Endnote: see the appendix for the method.",
        ]
    )
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "tracked.fodt"
        source.write_text(fodt(body), encoding="utf-8")
        for target in ("docx", "rtf"):
            subprocess.run(
                ["soffice", "--headless", "--convert-to", target, "--outdir", folder, str(source)],
                check=True,
                capture_output=True,
            )
        shutil.copy(Path(folder) / "tracked.docx", HERE / "tracked-changes.docx")
        shutil.copy(Path(folder) / "tracked.rtf", HERE / "tracked-changes.rtf")
    write_known("tracked-changes", known)
    rename_main_part(HERE / "tracked-changes.docx", HERE / "main-part-renamed.docx")
    write_known("main-part-renamed", known)


def rename_main_part(source: Path, target: Path) -> None:
    """The same package with its main part at word/main.xml, found only through _rels/.rels."""
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for item in archive.infolist():
            data = archive.read(item.filename)
            name = item.filename
            if name == "word/document.xml":
                name = "word/main.xml"
            elif name == "word/_rels/document.xml.rels":
                name = "word/_rels/main.xml.rels"
            elif name in ("_rels/.rels", "[Content_Types].xml"):
                data = data.replace(b"word/document.xml", b"word/main.xml")
            out.writestr(name, data)


def make_encodings() -> None:
    text = "\n\n".join(RU + EN[2:])
    for name, codec in (("cp1251", "cp1251"), ("koi8-r", "koi8_r"), ("ibm866", "cp866")):
        (HERE / f"{name}.text").write_bytes(text.replace("\n", "\r\n").encode(codec, errors="replace"))
        write_known(name, text)
    (HERE / "utf-16le-no-bom.text").write_bytes(text.encode("utf-16-le"))
    write_known("utf-16le-no-bom", text)
    latin = "\n\n".join(
        [
            "Café crème, naïve façade: the Latin-1 file keeps its accents.",
            "Les données de l'année dernière sont arrivées à Zürich et à Besançon.",
        ]
    )
    (HERE / "latin-1.text").write_bytes(latin.encode("latin-1"))
    write_known("latin-1", latin)


def make_html() -> None:
    fragment = (
        '<div class="post"><style>.post { color: red; }</style>'
        "<script>window.tracking = 'do not index me';</script>"
        f"<h2>Заметка</h2><p>{escape(RU[2])}</p><p>{escape(EN[2])}</p></div>\n"
    )
    (HERE / "fragment.html").write_text(fragment, encoding="utf-8")
    write_known("fragment", "\n\n".join(["Заметка", RU[2], EN[2]]))
    padding = "<!-- " + "saved from an intranet page; " * 150 + "-->\n"
    late = (
        padding + '<html><head><meta charset="windows-1251"><title>Отчёт</title>'
        "<style>body { font-family: serif; }</style></head><body>"
        f"<article><h1>Отчёт</h1><p>{escape(RU[0])}</p><p>{escape(RU[1])}</p></article>"
        "<script>var x = 1;</script></body></html>\n"
    )
    (HERE / "late-html-cp1251.htm").write_bytes(late.encode("cp1251"))
    write_known("late-html-cp1251", "\n\n".join(["Отчёт", RU[0], RU[1]]))


def main() -> None:
    make_ligatures()
    make_columns()
    make_report()
    make_glyph_codes()
    make_damaged()
    make_scans()
    make_office()
    make_encodings()
    make_html()
    for path in sorted(HERE.iterdir()):
        if not re.search(r"\.(py|txt|md)$", path.name):
            print(f"{path.name}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
