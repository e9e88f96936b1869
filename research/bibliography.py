"""A report's sources as a reference manager reads them: BibTeX (`.bib`) and RIS (`.ris`).

Every numbered source is one entry, in the report's order, so [n] in the report is the n-th
entry. A paper (research/pipeline/papers.py) is an article, a conference paper or a preprint
with its authors, year, venue and DOI; a web page is a web entry (`@misc` with its address and
the day it was read); one of the owner's documents is a `@misc` with its name only.

BibTeX: values in braces with TeX's special characters escaped (a title's capitals kept by
double braces, as BibTeX styles would lower-case them); keys of ASCII letters and digits, made
unique. RIS: one `TAG  - value` line each, every entry closed by `ER  - `.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from django.http import HttpResponse

from research.export import filename
from research.models import Topic

_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "%": r"\%",
    "&": r"\&",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "^": r"\^{}",
    "~": r"\~{}",
}
_TEX = re.compile("|".join(re.escape(char) for char in _TEX_SPECIAL))
_KEY_CHARS = re.compile(r"[^a-z0-9]")
_RIS_LINE_BREAK = re.compile(r"[\r\n]+")
# Crossref/OpenAlex work types → (BibTeX entry, RIS type); anything else is an article with a venue.
_KINDS = {
    "preprint": ("misc", "UNPB"),
    "posted-content": ("misc", "UNPB"),
    "proceedings-article": ("inproceedings", "CPAPER"),
    "book-chapter": ("incollection", "CHAP"),
    "book": ("book", "BOOK"),
    "dissertation": ("phdthesis", "THES"),
}


def sources_of(topic: Topic) -> list[dict[str, Any]]:
    report = getattr(topic, "report", None)
    return sorted(report.sources, key=lambda source: source.get("n", 0)) if report else []


def _tex(text: Any) -> str:
    return _TEX.sub(lambda match: _TEX_SPECIAL[match.group(0)], " ".join(str(text).split()))


def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()


def _key(source: dict[str, Any], taken: set[str]) -> str:
    authors = source.get("authors") or []
    family = authors[0].split()[-1] if authors and authors[0].split() else ""
    stem = _KEY_CHARS.sub("", _ascii(family)) or "source"
    key = f"{stem}{source.get('year') or ''}_{source.get('n', len(taken) + 1)}"
    while key in taken:
        key += "x"
    taken.add(key)
    return key


def _kind(source: dict[str, Any]) -> tuple[str, str]:
    if not source.get("doi") and not source.get("authors"):
        return ("misc", "ELEC") if source.get("url") else ("misc", "GEN")
    kind = _KINDS.get(str(source.get("paper_kind") or ""))
    if kind:
        return kind
    return ("article", "JOUR") if source.get("venue") else ("misc", "GEN")


def bibtex(topic: Topic) -> str:
    taken: set[str] = set()
    entries = [_bibtex_entry(source, taken, topic) for source in sources_of(topic)]
    return "\n".join(entries)


def _bibtex_entry(source: dict[str, Any], taken: set[str], topic: Topic) -> str:
    entry, _ris = _kind(source)
    fields: list[tuple[str, str]] = [
        ("title", "{" + _tex(source.get("title") or source.get("url") or "") + "}")
    ]
    if source.get("authors"):
        fields.append(("author", " and ".join(_tex(name) for name in source["authors"])))
    if source.get("year"):
        fields.append(("year", str(source["year"])))
    venue = source.get("venue")
    if venue:
        name = {"article": "journal", "inproceedings": "booktitle", "incollection": "booktitle"}.get(
            entry, "howpublished"
        )
        fields.append((name, _tex(venue)))
    if source.get("doi"):
        fields.append(("doi", _tex(source["doi"])))
    if source.get("url"):
        fields.append(("url", _tex(source["url"])))
        if not source.get("doi"):
            fields.append(("urldate", f"{topic.created_at:%Y-%m-%d}"))
    if not source.get("url") and not source.get("doi"):
        fields.append(("note", "My documents"))
    body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
    return f"@{entry}{{{_key(source, taken)},\n{body}\n}}\n"


def _ris_value(text: Any) -> str:
    return _RIS_LINE_BREAK.sub(" ", str(text)).strip()


def ris(topic: Topic) -> str:
    lines: list[str] = []
    for source in sources_of(topic):
        _entry, kind = _kind(source)
        lines.append(f"TY  - {kind}")
        lines.append(f"TI  - {_ris_value(source.get('title') or source.get('url') or '')}")
        lines.extend(f"AU  - {_ris_value(name)}" for name in source.get("authors") or [])
        if source.get("year"):
            lines.append(f"PY  - {source['year']}")
        if source.get("venue"):
            lines.append(f"T2  - {_ris_value(source['venue'])}")
        if source.get("doi"):
            lines.append(f"DO  - {_ris_value(source['doi'])}")
        if source.get("url"):
            lines.append(f"UR  - {_ris_value(source['url'])}")
            if not source.get("doi"):
                lines.append(f"Y2  - {topic.created_at:%Y/%m/%d}")  # the day it was read
        lines.append(f"N1  - [{source.get('n')}]")
        lines.append("ER  - ")
        lines.append("")
    return "\r\n".join(lines)  # RIS is specified with CR LF line ends


def bibtex_response(topic: Topic) -> HttpResponse:
    response = HttpResponse(bibtex(topic), content_type="application/x-bibtex; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename(topic, "bib")}"'
    return response


def ris_response(topic: Topic) -> HttpResponse:
    response = HttpResponse(ris(topic), content_type="application/x-research-info-systems; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename(topic, "ris")}"'
    return response
