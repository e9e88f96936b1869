"""Crossref: the works search (`GET /works?query=…`), JSON. No key; a `mailto` puts the
requests in the polite pool. `LIMIT_CROSSREF_RPS` (5, the public pool's rate) holds globally.

How the real API answers, which the loopback stand-in in `tests/support/scholarly_world.py`
repeats: `{"status": "ok", "message-type": "work-list", "message": {"items": [...]}}`; in an
item the title and the venue (`container-title`) are lists, authors `given`/`family` (or a
`name` for an organisation), the year in `issued.date-parts` ([[2019, 5]] or [[null]]), the
abstract (when the publisher deposited one, which most have not) JATS XML (`<jats:p>`), and
full-text links in `link` (`content-type` application/pdf; often behind a licence). A bad
parameter is HTTP 400 `{"status": "failed", "message": [{"message": …}]}`; too many requests
is HTTP 429 (with `X-Rate-Limit-Limit` / `X-Rate-Limit-Interval`).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import httpx
from django.conf import settings

from mindsearch.clients.scholarly import Paper, ScholarlyError, ask, clean_doi, mailto, plain, refused

SERVICE = "crossref"
NAME = "Crossref"
_JATS_TITLE = re.compile(r"<jats:title[^>]*>.*?</jats:title>", re.DOTALL)
SELECT = "DOI,title,author,issued,container-title,abstract,link,type,URL"


def is_configured() -> bool:
    return bool(settings.CROSSREF_URL)


def search_url(query: str, limit: int) -> str:
    params: dict[str, Any] = {"query": query, "rows": limit, "select": SELECT}
    if mailto():
        params["mailto"] = mailto()
    return f"{settings.CROSSREF_URL.rstrip('/')}/works?{urlencode(params)}"


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200].strip() if response.status_code == 429 else ""
    message = body.get("message") if isinstance(body, dict) else None
    if isinstance(message, list):
        return "; ".join(str(m.get("message") or m) for m in message if m)
    return str(message or "") if isinstance(message, str) else ""


async def search(query: str, *, limit: int = 10, user: int | None) -> list[Paper]:
    response = await ask(
        search_url(query, limit),
        name=NAME,
        service=SERVICE,
        limit=settings.LIMIT_CROSSREF_RPS,
        per_seconds=1.0,
        user=user,
        reason=_reason,
    )
    if response.status_code != 200:
        raise refused(response, NAME, _reason(response))
    try:
        body = response.json()
    except ValueError as exc:
        raise ScholarlyError("Crossref answered, but not with JSON") from exc
    message = body.get("message") if isinstance(body, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("items"), list):
        raise ScholarlyError("Crossref answered without a list of works")
    return [paper for item in message["items"] if isinstance(item, dict) and (paper := as_paper(item))]


def _first(value: Any) -> str:
    if isinstance(value, list):
        return plain(str(value[0])) if value else ""
    return plain(str(value or ""))


def _year(item: dict[str, Any]) -> int | None:
    parts = (item.get("issued") or {}).get("date-parts") or [[None]]
    first = parts[0][0] if parts and parts[0] else None
    return first if isinstance(first, int) else None


def _authors(item: dict[str, Any]) -> list[str]:
    names = []
    for author in item.get("author") or []:
        if not isinstance(author, dict):
            continue
        name = " ".join(str(author.get(key) or "") for key in ("given", "family")).strip() or str(
            author.get("name") or ""
        )
        if name:
            names.append(plain(name))
    return names


def as_paper(item: dict[str, Any]) -> Paper | None:
    title = _first(item.get("title"))
    if not title:
        return None
    pdf = next(
        (
            str(link.get("URL") or "")
            for link in item.get("link") or []
            if isinstance(link, dict)
            and link.get("content-type") == "application/pdf"
            and link.get("intended-application")
            in (None, "text-mining", "similarity-checking", "unspecified")
        ),
        "",
    )
    doi = clean_doi(item.get("DOI"))
    return Paper(
        source=SERVICE,
        title=title,
        doi=doi,
        authors=_authors(item),
        year=_year(item),
        venue=_first(item.get("container-title")),
        abstract=plain(_JATS_TITLE.sub(" ", str(item.get("abstract") or ""))),  # JATS markup out
        pdf_url=pdf,
        landing_url=str(item.get("URL") or ""),
        kind=str(item.get("type") or "journal-article"),
        identifier=doi,
    )
