"""PubMed through NCBI's E-utilities: `esearch.fcgi` (JSON) finds the PMIDs, `efetch.fcgi`
(PubMed XML) gives the records with their abstracts (esummary has none). Without a key NCBI
allows 3 requests a second per address, 10 with `PUBMED_API_KEY`: `LIMIT_PUBMED_RPS` holds it
globally. `tool` and `email` name this instance, as NCBI asks.

How the real service answers, which the loopback stand-in in `tests/support/scholarly_world.py`
repeats: too many requests is HTTP 429 with `{"error":"API rate limit exceeded","api-key":
"<address>","count":"4","limit":"3"}`; a query it cannot read is HTTP 200 with
`esearchresult.ERROR`; nothing found is `count` "0" and an empty `idlist` (with
`errorlist.phrasesnotfound`). A record may have no abstract, no DOI (`ArticleId IdType="doi"`),
a `MedlineDate` ("2019 Jan-Feb") instead of a year, and a `CollectiveName` among its authors.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import httpx
from django.conf import settings

from mindsearch.clients.scholarly import (
    Paper,
    ScholarlyError,
    ask,
    clean_doi,
    mailto,
    plain,
    refused,
    xml_root,
)

SERVICE = "pubmed"
NAME = "PubMed"
TOOL = "mindsearch"


def is_configured() -> bool:
    return bool(settings.PUBMED_URL)


def _url(endpoint: str, params: dict[str, Any]) -> str:
    params = {**params, "tool": TOOL}
    if mailto():
        params["email"] = mailto()
    if settings.PUBMED_API_KEY:
        params["api_key"] = settings.PUBMED_API_KEY
    return f"{settings.PUBMED_URL.rstrip('/')}/{endpoint}?{urlencode(params)}"


def search_url(query: str, limit: int) -> str:
    return _url("esearch.fcgi", {"db": "pubmed", "term": query, "retmode": "json", "retmax": limit})


def fetch_url(pmids: list[str]) -> str:
    return _url("efetch.fcgi", {"db": "pubmed", "id": ",".join(pmids), "retmode": "xml"})


def _reason(response: httpx.Response) -> str:
    """NCBI's words: `{"error": "API rate limit exceeded", "count": …, "limit": …}`."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if not isinstance(body, dict) or not body.get("error"):
        return ""
    limit = (
        f" ({body.get('count')} requests, limit {body.get('limit')} a second)" if body.get("limit") else ""
    )
    return f"{body['error']}{limit}"


async def _ask(url: str, user: int | None, accept: str) -> httpx.Response:
    response = await ask(
        url,
        name=NAME,
        service=SERVICE,
        limit=settings.LIMIT_PUBMED_RPS,
        per_seconds=1.0,
        user=user,
        accept=accept,
        reason=_reason,
    )
    if response.status_code != 200:
        raise refused(response, NAME, _reason(response))
    return response


async def search(query: str, *, limit: int = 10, user: int | None) -> list[Paper]:
    response = await _ask(search_url(query, limit), user, "application/json")
    try:
        body = response.json()
    except ValueError as exc:
        raise ScholarlyError("PubMed's esearch answered, but not with JSON") from exc
    result = body.get("esearchresult") if isinstance(body, dict) else None
    if not isinstance(result, dict):
        raise ScholarlyError(f"PubMed's esearch answered without a result: {_reason(response) or body}")
    if result.get("ERROR"):
        raise ScholarlyError(f"PubMed could not read the query: {result['ERROR']}")
    pmids = [str(pmid) for pmid in result.get("idlist") or [] if str(pmid).isdigit()]
    if not pmids:
        return []
    records = await _ask(fetch_url(pmids), user, "application/xml")
    root = xml_root(records.content, NAME)
    papers = {
        paper.identifier: paper for article in root.iter("PubmedArticle") if (paper := as_paper(article))
    }
    return [papers[pmid] for pmid in pmids if pmid in papers]  # in esearch's order of relevance


def _year(article: Any) -> int | None:
    date = article.find(".//Journal/JournalIssue/PubDate")
    if date is None:
        return None
    text = date.findtext("Year") or (date.findtext("MedlineDate") or "")[:4]
    return int(text) if text.isdigit() else None


def _authors(article: Any) -> list[str]:
    names = []
    for author in article.findall(".//AuthorList/Author"):
        collective = author.findtext("CollectiveName")
        if collective:
            names.append(plain(collective))
            continue
        last, first = author.findtext("LastName") or "", author.findtext("ForeName") or ""
        if last:
            names.append(f"{plain(first)} {plain(last)}".strip())
    return names


def _abstract(article: Any) -> str:
    parts = []
    for text in article.findall(".//Abstract/AbstractText"):
        body = plain("".join(text.itertext()))
        label = text.get("Label")
        parts.append(f"{label.capitalize()}: {body}" if label and body else body)
    return " ".join(part for part in parts if part)


def as_paper(article: Any) -> Paper | None:
    pmid = (article.findtext(".//MedlineCitation/PMID") or "").strip()
    title = (
        plain("".join(article.find(".//ArticleTitle").itertext()))
        if article.find(".//ArticleTitle") is not None
        else ""
    )
    if not pmid or not title:
        return None
    doi = ""
    for identifier in article.findall(".//PubmedData/ArticleIdList/ArticleId"):
        if identifier.get("IdType") == "doi":
            doi = clean_doi(identifier.text)
    return Paper(
        source=SERVICE,
        title=title.rstrip("."),
        doi=doi,
        authors=_authors(article),
        year=_year(article),
        venue=plain(article.findtext(".//Journal/Title")),
        abstract=_abstract(article),
        landing_url=f"https://pubmed.ncbi.nlm.nih.gov/{pmid}/",
        identifier=pmid,
    )
