"""OpenAlex: the works search (`GET /works?search=…`), JSON. No key; a `mailto` puts the requests
in the polite pool. Every request waits for its turn under `LIMIT_OPENALEX_RPS`.

How the real API answers, which the loopback stand-in in `tests/support/scholarly_world.py`
repeats: results under `results` with `meta.count`; the DOI as a full `https://doi.org/…` link
or null; the abstract only as `abstract_inverted_index` (word → positions), null for many
works; the open-access copy in `open_access.oa_url` (often a landing page, not a PDF) and
`best_oa_location.pdf_url` (a PDF when not null); the venue in `primary_location.source`, which
may be null. Too many requests is HTTP 429 with `{"error": …, "message": …}`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import httpx
from django.conf import settings

from mindsearch.clients.scholarly import Paper, ScholarlyError, ask, clean_doi, mailto, plain, refused

SERVICE = "openalex"
NAME = "OpenAlex"


def is_configured() -> bool:
    return bool(settings.OPENALEX_URL)


def search_url(query: str, limit: int) -> str:
    params: dict[str, Any] = {"search": query, "per-page": limit}
    if mailto():
        params["mailto"] = mailto()
    return f"{settings.OPENALEX_URL.rstrip('/')}/works?{urlencode(params)}"


async def search(query: str, *, limit: int = 10, user: int | None) -> list[Paper]:
    response = await ask(
        search_url(query, limit),
        name=NAME,
        service=SERVICE,
        limit=settings.LIMIT_OPENALEX_RPS,
        per_seconds=1.0,
        user=user,
        reason=_reason,
    )
    body = _json(response)
    results = body.get("results")
    if not isinstance(results, list):
        raise ScholarlyError("OpenAlex answered without a list of results")
    return [paper for work in results if isinstance(work, dict) and (paper := as_paper(work))]


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200:
        raise refused(response, NAME, _reason(response))
    if not isinstance(body, dict):
        raise ScholarlyError("OpenAlex answered, but not with a JSON object")
    return body


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    return " — ".join(str(body[key]) for key in ("error", "message") if body.get(key))


def abstract_of(inverted: Any) -> str:
    """The abstract from OpenAlex's inverted index (word → positions), in position order."""
    if not isinstance(inverted, dict):
        return ""
    places: list[tuple[int, str]] = []
    for word, positions in inverted.items():
        for position in positions if isinstance(positions, list) else []:
            if isinstance(position, int):
                places.append((position, str(word)))
    return " ".join(word for _, word in sorted(places))


def as_paper(work: dict[str, Any]) -> Paper | None:
    title = plain(work.get("title") or work.get("display_name"))
    if not title:
        return None
    authors = [
        str(((item or {}).get("author") or {}).get("display_name") or "")
        for item in work.get("authorships") or []
        if isinstance(item, dict)
    ]
    location = work.get("primary_location") or {}
    source = location.get("source") or {} if isinstance(location, dict) else {}
    best = work.get("best_oa_location") or {}
    open_access = work.get("open_access") or {}
    pdf = (best.get("pdf_url") if isinstance(best, dict) else "") or ""
    if not pdf and isinstance(location, dict):
        pdf = location.get("pdf_url") or ""
    year = work.get("publication_year")
    return Paper(
        source=SERVICE,
        title=title,
        doi=clean_doi(work.get("doi")),
        authors=[name for name in authors if name],
        year=year if isinstance(year, int) else None,
        venue=str(source.get("display_name") or "") if isinstance(source, dict) else "",
        abstract=abstract_of(work.get("abstract_inverted_index")),
        pdf_url=str(pdf),
        landing_url=str(
            (location.get("landing_page_url") if isinstance(location, dict) else "")
            or (open_access.get("oa_url") if isinstance(open_access, dict) else "")
            or ""
        ),
        kind=str(work.get("type") or "article"),
        identifier=str(work.get("id") or "").rsplit("/", 1)[-1],
    )
