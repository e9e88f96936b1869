"""DOCX (WordprocessingML) read completely, from the package's own relationships.

The main part is the one `_rels/.rels` names as the office document, with a WordprocessingML
content type in `[Content_Types].xml`: not assumed to be `word/document.xml`. Its text is read
in document order: tracked insertions and moved-to text kept, deletions and moved-from text
dropped, content controls (`w:sdt`) and text boxes read, tables as rows of cells, headings (by
style or outline level) as Markdown headings so chunks carry them; footnotes and endnotes follow
the body under their own headings. Every part is inflated under a cap on the bytes it really
unpacks to (`retrieval.readers.zipped`), never `ZipFile.read`, which trusts the declared size.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from collections.abc import Iterator
from typing import BinaryIO

from lxml import etree

from retrieval.readers import zipped

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
# Strict Open XML (ISO 29500 Strict) names the same elements in namespaces of its own; a Strict
# part is read as the transitional one it is equivalent to.
STRICT_NAMESPACES = {
    b"http://purl.oclc.org/ooxml/wordprocessingml/main": W.encode(),
    b"http://purl.oclc.org/ooxml/officeDocument/relationships": (
        b"http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    ),
}
R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
ALT_CHUNK = re.compile(r"/aFChunk$")
# An altChunk's own text is at most this long (it is read whole, as the main part is).
ALT_CHUNK_MAX_BYTES = zipped.MEMBER_MAX_BYTES
MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
PACKAGE_RELS = "http://schemas.openxmlformats.org/package/2006/relationships"
CONTENT_TYPES = "http://schemas.openxmlformats.org/package/2006/content-types"
CORE = "http://purl.org/dc/elements/1.1/"
OFFICE_DOCUMENT = re.compile(r"/officeDocument$")
FOOTNOTES = re.compile(r"/footnotes$")
ENDNOTES = re.compile(r"/endnotes$")
STYLES = re.compile(r"/styles$")
CORE_PROPERTIES = re.compile(r"/metadata/core-properties$")
# Main parts of documents, macro-enabled documents and templates.
MAIN_CONTENT_TYPE = re.compile(
    r"^application/vnd\.ms-word\.|wordprocessingml\.(document|template)\.main\+xml$"
)
# The package's own description (relationships, content types, properties) is a few kilobytes in
# any real file; the web process parses it, so it is read under a far smaller cap than the parts.
PACKAGE_PART_MAX_BYTES = 4 * 1024 * 1024
PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, remove_comments=True)


class NotDocx(Exception):
    """A zip that is no WordprocessingML package (a spreadsheet, a presentation, any archive)."""


def _w(tag: str) -> str:
    return f"{{{W}}}{tag}"


def main_part(archive: zipfile.ZipFile) -> str:
    """The path of the main document part, found through `_rels/.rels` and the content types."""
    names = set(archive.namelist())
    if "_rels/.rels" not in names or "[Content_Types].xml" not in names:
        raise NotDocx
    try:
        rels = etree.fromstring(_part(archive, "_rels/.rels", PACKAGE_PART_MAX_BYTES), PARSER)
        types = etree.fromstring(_part(archive, "[Content_Types].xml", PACKAGE_PART_MAX_BYTES), PARSER)
    except etree.XMLSyntaxError:
        raise NotDocx from None
    targets = [
        rel.get("Target", "").lstrip("/")
        for rel in rels.iter(f"{{{PACKAGE_RELS}}}Relationship")
        if OFFICE_DOCUMENT.search(rel.get("Type", "")) and rel.get("TargetMode") != "External"
    ]
    overrides = {
        override.get("PartName", "").lstrip("/"): override.get("ContentType", "")
        for override in types.iter(f"{{{CONTENT_TYPES}}}Override")
    }
    defaults = {
        default.get("Extension", "").lower(): default.get("ContentType", "")
        for default in types.iter(f"{{{CONTENT_TYPES}}}Default")
    }
    for target in targets:
        path = posixpath.normpath(target)
        content_type = overrides.get(path) or defaults.get(path.rsplit(".", 1)[-1].lower(), "")
        if path in names and MAIN_CONTENT_TYPE.search(content_type):
            return path
    raise NotDocx


def _part(archive: zipfile.ZipFile, name: str, limit: int = zipped.MEMBER_MAX_BYTES) -> bytes:
    data = zipped.read(archive, name, limit)
    for strict, transitional in STRICT_NAMESPACES.items():
        data = data.replace(strict, transitional)
    return data


def read(source: BinaryIO) -> tuple[str, str]:
    """(text, title) of the package."""
    with zipfile.ZipFile(source) as archive:
        main = main_part(archive)
        related = _related_parts(archive, main)
        styles = _heading_styles(archive, related.get("styles"))
        body = etree.fromstring(_part(archive, main), PARSER)
        _inline_alt_chunks(body, archive, related)
        blocks = list(_blocks(body, styles))
        for kind, heading in (("footnotes", "Footnotes"), ("endnotes", "Endnotes")):
            notes = _notes(archive, related.get(kind), styles)
            if notes:
                blocks += [f"## {heading}", *notes]
        title = _title(archive)
    return "\n\n".join(block for block in blocks if block.strip()), title


def _related_parts(archive: zipfile.ZipFile, main: str) -> dict[str, str]:
    folder, name = posixpath.split(main)
    rels_path = posixpath.join(folder, "_rels", f"{name}.rels")
    found: dict[str, str] = {}
    if rels_path not in archive.namelist():
        return found
    rels = etree.fromstring(_part(archive, rels_path, PACKAGE_PART_MAX_BYTES), PARSER)
    kinds = {"footnotes": FOOTNOTES, "endnotes": ENDNOTES, "styles": STYLES}
    for rel in rels.iter(f"{{{PACKAGE_RELS}}}Relationship"):
        if rel.get("TargetMode") == "External":
            continue
        target = rel.get("Target", "")
        path = posixpath.normpath(
            target.lstrip("/") if target.startswith("/") else posixpath.join(folder, target)
        )
        for kind, pattern in kinds.items():
            if pattern.search(rel.get("Type", "")):
                found[kind] = path
        if ALT_CHUNK.search(rel.get("Type", "")):
            found[f"chunk:{rel.get('Id', '')}"] = path
    return found


def _inline_alt_chunks(body: etree._Element, archive: zipfile.ZipFile, related: dict[str, str]) -> None:
    """Each w:altChunk (content Word imports as it opens the file: HTML, text) replaced by
    paragraphs of its text, where it stands."""
    for chunk in list(body.iter(_w("altChunk"))):
        path = related.get(f"chunk:{chunk.get(f'{{{R}}}id', '')}")
        parent = chunk.getparent()
        if parent is None:
            continue
        paragraphs = _alt_chunk_text(archive, path) if path and path in archive.namelist() else []
        index = parent.index(chunk)
        parent.remove(chunk)
        for offset, text in enumerate(paragraphs):
            paragraph = etree.Element(_w("p"))
            run = etree.SubElement(paragraph, _w("r"))
            etree.SubElement(run, _w("t")).text = text
            parent.insert(index + offset, paragraph)


def _alt_chunk_text(archive: zipfile.ZipFile, path: str) -> list[str]:
    """The paragraphs of an altChunk part: HTML (tags, scripts and styles left out) or text."""
    from lxml import html as lxml_html

    from retrieval.readers.text import NotText, decode

    data = zipped.read(archive, path, ALT_CHUNK_MAX_BYTES)
    try:
        text = decode(data)
    except NotText:
        return []  # an embedded DOCX or RTF chunk: not read here
    if "<" not in text:
        return [line.strip() for line in text.splitlines() if line.strip()]
    try:
        tree = lxml_html.fromstring(text)
    except (ValueError, etree.ParserError):
        return []
    for element in tree.iter("script", "style", "head"):
        element.drop_tree()
    blocks = ("p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "br", "td", "th", "table", "pre")
    for element in tree.iter(*blocks):
        element.tail = "\n" + (element.tail or "")
    return [" ".join(line.split()) for line in tree.text_content().splitlines() if line.strip()]


def _heading_styles(archive: zipfile.ZipFile, path: str | None) -> dict[str, int]:
    """Style id → heading level, from the styles' names ("heading 2", "Title") or outline levels."""
    if not path or path not in archive.namelist():
        return {}
    levels: dict[str, int] = {}
    root = etree.fromstring(_part(archive, path), PARSER)
    for style in root.iter(_w("style")):
        style_id = style.get(_w("styleId"), "")
        name_element = style.find(_w("name"))
        name = (name_element.get(_w("val"), "") if name_element is not None else "").lower()
        outline = style.find(f"{_w('pPr')}/{_w('outlineLvl')}")
        match = re.fullmatch(r"heading (\d)", name)
        if name == "title":
            levels[style_id] = 1
        elif match:
            levels[style_id] = min(int(match.group(1)), 6)
        elif (
            outline is not None
            and (outline.get(_w("val")) or "").isdigit()
            and int(outline.get(_w("val"))) < 9
        ):
            levels[style_id] = min(int(outline.get(_w("val"))) + 1, 6)
    return levels


def _blocks(container: etree._Element, styles: dict[str, int]) -> Iterator[str]:
    """Paragraphs and tables of a body, a cell, a note or a content control, in order."""
    for element in container:
        tag = element.tag
        if tag == _w("p"):
            yield _paragraph(element, styles)
        elif tag == _w("tbl"):
            yield _table(element, styles)
        elif tag in (_w("sdt"), _w("customXml"), _w("ins"), _w("moveTo"), _w("smartTag")):
            content = element.find(_w("sdtContent")) if tag == _w("sdt") else element
            if content is not None:
                yield from _blocks(content, styles)
        elif tag == f"{{{MC}}}AlternateContent":
            choice = element.find(f"{{{MC}}}Choice")
            if choice is not None:
                yield from _blocks(choice, styles)
        elif tag == _w("body"):
            yield from _blocks(element, styles)


def _paragraph(paragraph: etree._Element, styles: dict[str, int]) -> str:
    text = " ".join("".join(_runs_text(paragraph)).split(" ")).strip()
    level = _paragraph_level(paragraph, styles)
    if level and text:
        return f"{'#' * level} {' '.join(text.split())}"
    return text


def _paragraph_level(paragraph: etree._Element, styles: dict[str, int]) -> int:
    properties = paragraph.find(_w("pPr"))
    if properties is None:
        return 0
    outline = properties.find(_w("outlineLvl"))
    if outline is not None and (outline.get(_w("val")) or "").isdigit() and int(outline.get(_w("val"))) < 9:
        return min(int(outline.get(_w("val"))) + 1, 6)
    style = properties.find(_w("pStyle"))
    return styles.get(style.get(_w("val"), ""), 0) if style is not None else 0


def _runs_text(element: etree._Element) -> Iterator[str]:
    """The text inside a paragraph, skipping deleted and moved-from text, field codes and the
    fallback copy of alternate content."""
    for child in element:
        tag = child.tag
        if tag in (_w("del"), _w("moveFrom"), _w("pPr"), _w("rPr"), _w("instrText"), _w("delText")):
            continue
        if tag == f"{{{MC}}}Fallback":
            continue
        if tag == _w("t"):
            yield child.text or ""
        elif tag == _w("tab"):
            yield "\t"
        elif tag in (_w("br"), _w("cr")):
            yield "\n"
        elif tag == _w("noBreakHyphen"):
            yield "-"
        elif tag == _w("txbxContent"):
            yield "\n" + "\n".join(_blocks(child, {})) + "\n"
        elif tag in (_w("footnoteReference"), _w("endnoteReference")):
            note = child.get(_w("id"), "")
            yield f"[{note}]" if note else ""
        else:
            yield from _runs_text(child)


def _table(table: etree._Element, styles: dict[str, int]) -> str:
    rows = []
    for row in table.iter(_w("tr")):
        if row.getparent() is not None and _enclosing_table(row) is not table:
            continue
        cells = [" ".join(" ".join(_blocks(cell, styles)).split()) for cell in row if cell.tag == _w("tc")]
        if any(cells):  # a row of empty cells says nothing
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _enclosing_table(element: etree._Element) -> etree._Element | None:
    parent = element.getparent()
    while parent is not None and parent.tag != _w("tbl"):
        parent = parent.getparent()
    return parent


def _notes(archive: zipfile.ZipFile, path: str | None, styles: dict[str, int]) -> list[str]:
    if not path or path not in archive.namelist():
        return []
    root = etree.fromstring(_part(archive, path), PARSER)
    notes = []
    for note in root:
        if note.get(_w("type")) in ("separator", "continuationSeparator", "continuationNotice"):
            continue
        text = " ".join(" ".join(_blocks(note, styles)).split())
        if text:
            notes.append(f"[{note.get(_w('id'), '')}] {text}")
    return notes


def _title(archive: zipfile.ZipFile) -> str:
    if "docProps/core.xml" not in archive.namelist():
        return ""
    try:
        root = etree.fromstring(_part(archive, "docProps/core.xml", PACKAGE_PART_MAX_BYTES), PARSER)
    except etree.XMLSyntaxError:
        return ""
    title = root.find(f"{{{CORE}}}title")
    return " ".join((title.text or "").split()) if title is not None else ""
