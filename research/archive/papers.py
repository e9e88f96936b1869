"""A paper's fields in an archive (`Hit.paper`, and the doi/authors/year/venue of a report's
sources): kept only as the scholarly clients write them — known keys, plain strings, a DOI
that is a DOI — since the sources list puts them into Markdown and the BibTeX/RIS files."""

from __future__ import annotations

import re
from typing import Any

DOI = re.compile(r"^10\.\d{4,9}/[^\s\[\]()<>\"'`{}\\]+$")
TEXT_KEYS = ("source", "title", "venue", "abstract", "pdf_url", "landing_url", "kind", "identifier")
SOURCE_TEXT_KEYS = ("venue", "paper_kind")
MAX_TEXT = 20_000
MAX_AUTHORS = 500


def _bad(where: str) -> ValueError:
    return ValueError(where)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT or "\x00" in value:
        raise _bad(where)
    return value


def _common(raw: dict[str, Any], where: str) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    if raw.get("doi"):
        doi = _text(raw["doi"], where)
        if not DOI.match(doi):
            raise _bad(where)
        kept["doi"] = doi
    if "authors" in raw:
        authors = raw["authors"]
        if not isinstance(authors, list) or len(authors) > MAX_AUTHORS:
            raise _bad(where)
        kept["authors"] = [_text(name, where) for name in authors]
    if raw.get("year") is not None:
        if type(raw["year"]) is not int or not 0 < raw["year"] < 10_000:
            raise _bad(where)
        kept["year"] = raw["year"]
    return kept


def clean_paper(raw: Any, where: str) -> dict[str, Any]:
    """A hit's `paper` as the clients write it, or ValueError naming the row."""
    if raw in ({}, None):
        return {}
    if not isinstance(raw, dict):
        raise _bad(where)
    kept = _common(raw, where)
    kept |= {key: _text(raw[key], where) for key in TEXT_KEYS if key in raw}
    if "title" not in kept:
        raise _bad(where)
    return kept


def clean_source(source: dict[str, Any], where: str) -> None:
    """A report source's paper fields checked in place."""
    fields = _common(source, where)
    for key in SOURCE_TEXT_KEYS:
        if key in source:
            fields[key] = _text(source[key], where)
    source.update(fields)
