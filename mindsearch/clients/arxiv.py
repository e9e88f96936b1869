"""arXiv: the export API's query (`GET /api/query?search_query=…`), an Atom 1.0 feed. No key.
arXiv asks for one request every three seconds from a client, one connection at a time:
`LIMIT_ARXIV_RPM` (20) is that pace, held globally.

How the real API answers, which the loopback stand-in in `tests/support/scholarly_world.py`
repeats: each `<entry>` has `<id>` (the abstract page, http://arxiv.org/abs/<id>v<n>),
`<title>` and `<summary>` with hard line breaks, `<author><name>`, `<published>`, a
`<link title="pdf">`, and maybe `<arxiv:doi>` (a journal's DOI) and `<arxiv:journal_ref>`.
A bad query is HTTP 400 whose feed holds one entry titled "Error" with the reason in its
summary. Nothing found is a feed with `opensearch:totalResults` 0 and no entries (arXiv also
sometimes answers a real query so, by mistake: an empty answer is cached only briefly by the
caller). Pressed too hard it answers 429 or 503 with Retry-After.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from django.conf import settings

from mindsearch.clients.scholarly import Paper, ScholarlyError, ask, clean_doi, plain, refused, xml_root

SERVICE = "arxiv"
NAME = "arXiv"
ATOM = "{http://www.w3.org/2005/Atom}"
ARXIV = "{http://arxiv.org/schemas/atom}"
_WORDS = re.compile(r"[\w-]+", re.UNICODE)
_VERSION = re.compile(r"v\d+$")
# Words a question has that no paper is found by: with every term required (AND), "what is"
# would leave most queries with nothing.
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "how",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "with",
    ]
)


def is_configured() -> bool:
    return bool(settings.ARXIV_URL)


def search_url(query: str, limit: int) -> str:
    # Every word but stop words in any field (all:), all required, as arXiv's own search box does.
    words = [word for word in _WORDS.findall(query) if word.lower() not in STOP_WORDS]
    expression = " AND ".join(f"all:{word}" for word in words[:12])
    params = {"search_query": expression, "start": 0, "max_results": limit, "sortBy": "relevance"}
    return f"{settings.ARXIV_URL.rstrip('/')}/api/query?{urlencode(params)}"


async def search(query: str, *, limit: int = 10, user: int | None) -> list[Paper]:
    if not [word for word in _WORDS.findall(query) if word.lower() not in STOP_WORDS]:
        return []  # nothing to search by: arXiv would answer its error feed
    response = await ask(
        search_url(query, limit),
        name=NAME,
        service=SERVICE,
        limit=settings.LIMIT_ARXIV_RPM,
        per_seconds=60.0,
        user=user,
        accept="application/atom+xml",
        reason=lambda r: _error_of(r.content),
    )
    if response.status_code != 200:
        raise refused(response, NAME, _error_of(response.content))
    root = xml_root(response.content, NAME)
    if root.tag != f"{ATOM}feed":
        raise ScholarlyError("arXiv answered, but not with an Atom feed")
    error = _error_of(response.content)
    if error:
        raise ScholarlyError(f"arXiv refused the query: {error}")
    return [paper for entry in root.findall(f"{ATOM}entry") if (paper := as_paper(entry))]


def _error_of(data: bytes) -> str:
    """The reason in arXiv's error feed: one entry titled "Error", the reason its summary."""
    try:
        root = xml_root(data, NAME)
    except ScholarlyError:
        return ""
    for entry in root.findall(f"{ATOM}entry"):
        if (entry.findtext(f"{ATOM}title") or "").strip() == "Error":
            return plain(entry.findtext(f"{ATOM}summary"))
    return ""


def arxiv_id(entry_id: str) -> str:
    """2401.01234 from http://arxiv.org/abs/2401.01234v2 (old ids keep their archive: hep-th/9901001)."""
    tail = entry_id.split("/abs/", 1)[-1]
    return _VERSION.sub("", tail.strip())


def as_paper(entry: Any) -> Paper | None:
    title = plain(entry.findtext(f"{ATOM}title"))
    identifier = arxiv_id(entry.findtext(f"{ATOM}id") or "")
    if not title or not identifier:
        return None
    pdf = ""
    for link in entry.findall(f"{ATOM}link"):
        if link.get("title") == "pdf" or link.get("type") == "application/pdf":
            pdf = link.get("href") or ""
    published = entry.findtext(f"{ATOM}published") or ""
    journal_doi = clean_doi(entry.findtext(f"{ARXIV}doi"))
    return Paper(
        source=SERVICE,
        title=title,
        # A journal's DOI when the authors gave one; else the DOI arXiv registers for every paper.
        doi=journal_doi or f"10.48550/arxiv.{identifier}".lower(),
        authors=[plain(a.findtext(f"{ATOM}name")) for a in entry.findall(f"{ATOM}author")],
        year=int(published[:4]) if published[:4].isdigit() else None,
        venue=plain(entry.findtext(f"{ARXIV}journal_ref")) or "arXiv",
        abstract=plain(entry.findtext(f"{ATOM}summary")),
        pdf_url=pdf,
        landing_url=f"https://arxiv.org/abs/{identifier}",
        kind="article" if journal_doi else "preprint",
        identifier=identifier,
    )
