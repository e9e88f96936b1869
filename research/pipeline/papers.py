"""The "Papers" source: OpenAlex, arXiv, PubMed and Crossref searched with the topic's queries,
their works saved as hits that carry the DOI, authors, year and venue (`Hit.paper`), and read
as a paper is best read: the open-access PDF downloaded and parsed by the document reader (the
same parser, quality gate and OCR an upload gets), else the abstract the index gave, else the
landing page through the reader like any web page.

When: a "Papers" topic searches nothing else; a web or web-and-documents topic searches papers
too when the user said "Always", or by default ("When the question is scholarly") when the
question — the topic's, or the follow-up's being searched — reads as one (`looks_scholarly`: words
of study, papers and evidence, in Russian and English). "Never" keeps papers out. A follow-up's
search is the run's search stage, so it asks the indexes as the topic's search did.

Which queries: per sub-query not searched yet, the first query in each language; arXiv and
PubMed index English text only, so they get the English ones. `PER_QUERY` works from each
index, merged by DOI (the first index's record, with what the others add: a PDF, an abstract).
Each answer is cached per index (`CacheEntry.Kind.OPENALEX`…); a failed index is named in the
topic's log and the others go on.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.utils import timezone
from django.utils.translation import gettext_lazy, gettext_noop

from mindsearch.clients import arxiv, crossref, fetch, openalex, pubmed
from mindsearch.clients.scholarly import Paper, ScholarlyError, download_pdf
from research.models import CacheEntry, Hit, SearchQuery, Topic
from research.pipeline import cache
from research.pipeline.context import RunContext, StageError, db
from research.pipeline.stage import StageName

PER_QUERY = 5
EMPTY_TTL = timedelta(hours=1)  # arXiv sometimes answers a real query with nothing, by mistake
PDF_PARSE_SECONDS = 90.0
MAX_TEXT_CHARS = 200_000
ENGINE_PREFIX = "papers:"

SaveHit = Callable[[Topic, SearchQuery, int, dict], int]


@dataclass(frozen=True)
class Index:
    name: str  # the engine name on hits: papers:openalex
    label: str
    kind: str  # CacheEntry.Kind
    configured: Callable[[], bool]
    search: Callable[..., Awaitable[list[Paper]]]
    english_only: bool


INDEXES = (
    Index("openalex", "OpenAlex", CacheEntry.Kind.OPENALEX, openalex.is_configured, openalex.search, False),
    Index("arxiv", "arXiv", CacheEntry.Kind.ARXIV, arxiv.is_configured, arxiv.search, True),
    Index("pubmed", "PubMed", CacheEntry.Kind.PUBMED, pubmed.is_configured, pubmed.search, True),
    Index("crossref", "Crossref", CacheEntry.Kind.CROSSREF, crossref.is_configured, crossref.search, False),
)

# Words of scholarship: asking what studies, papers, trials or reviews found. Stems, matched at a
# word's start (Russian endings vary; "исследовани" covers исследование/исследования/…).
_SCHOLARLY = re.compile(
    r"\b(?:"
    r"papers?\b|studies\b|study\b|research(?:ers)?\b|literature|peer[- ]review|preprints?|arxiv|pubmed"
    r"|meta-?analys[ie]s|systematic review|clinical trials?|randomi[sz]ed|cohort|journals?\b|doi\b"
    r"|citations?\b|scholarly|academic|evidence (?:on|for|that|from)|state of the art|survey of"
    r"|статья|стать[иеёюй]|статей|исследовани|научн|публикаци|литератур|рецензир|препринт"
    r"|мета-?анализ|систематическ\w* обзор|клиническ\w* испытани|рандомизир|когорт|журнал"
    r"|диссертаци|академическ|доказательн|учён|учен(?:ые|ых)"
    r")",
    re.IGNORECASE,
)


def looks_scholarly(question: str) -> bool:
    return _SCHOLARLY.search(question) is not None


def configured() -> list[Index]:
    return [index for index in INDEXES if index.configured()]


def wanted(topic: Topic, asked: str = "") -> bool:
    """Whether this topic searches papers: the user's choice, or by default a scholarly question
    while an index is configured (without one the default is silent: the status page says why;
    a topic that asked for papers is told in its log, `_not_configured`). `asked` is the question
    being searched when it is not the topic's own — a follow-up's (`RunContext.asked`): a scholarly
    follow-up of a topic whose question was not one searches papers too."""
    if topic.sources == Topic.Sources.PAPERS:
        return True
    if topic.sources == Topic.Sources.DOCS or topic.papers == Topic.Papers.NEVER:
        return False
    if topic.papers == Topic.Papers.ALWAYS:
        return True
    scholarly = looks_scholarly(topic.question) or (bool(asked) and looks_scholarly(asked))
    return scholarly and bool(configured())


def is_paper_hit(hit: Hit) -> bool:
    return bool(hit.paper)


# --- Searching --------------------------------------------------------------------------------


def search(ctx: RunContext, stage: StageName, save_hit: SaveHit) -> bool:
    """Search the configured indexes with the topic's queries (when the topic wants papers), save
    the works as hits with `save_hit`; whether the topic has paper hits (of this run or before)."""
    topic = ctx.topic
    if not wanted(topic, ctx.asked):
        return False
    indexes = configured()
    if not indexes:
        _not_configured(ctx, stage)
        return False
    queries = _queries(topic)
    if queries:
        how = (
            gettext_noop("Searching papers (the question reads as a scholarly one): %(indexes)s")
            if topic.sources != Topic.Sources.PAPERS and topic.papers == Topic.Papers.AUTO
            else gettext_noop("Searching papers: %(indexes)s")
        )
        ctx.emit(stage, how, args={"indexes": ", ".join(index.label for index in indexes)})
        found, failures = async_to_sync(_search_all)(ctx, stage, indexes, queries)
        added = _save(ctx, found, save_hit)
        ctx.emit(stage, gettext_noop("%(count)s papers found"), args={"count": added})
        if failures and topic.sources == Topic.Sources.PAPERS and not _has_paper_hits(topic):
            raise StageError(f"Paper search failed: {failures[0]}")
    if topic.sources == Topic.Sources.PAPERS:  # nothing else will search these queries
        SearchQuery.objects.filter(subquery__topic=topic, searched_at__isnull=True).update(
            searched_at=timezone.now()
        )
    has = _has_paper_hits(topic)
    if not has and topic.sources == Topic.Sources.PAPERS and not Hit.objects.filter(topic=topic).exists():
        ctx.warn(stage, gettext_noop("No papers were found for these queries."), args={})
    return has


def _has_paper_hits(topic: Topic) -> bool:
    return Hit.objects.filter(topic=topic, engine__startswith=ENGINE_PREFIX).exists()


def _not_configured(ctx: RunContext, stage: StageName) -> None:
    if ctx.topic.sources == Topic.Sources.PAPERS:
        raise StageError(
            "No scholarly index is configured: set OPENALEX_URL, ARXIV_URL, PUBMED_URL or CROSSREF_URL "
            "(see the status page)."
        )
    ctx.warn(
        stage,
        gettext_noop(
            "Papers were asked for, but no scholarly index is configured (OPENALEX_URL, ARXIV_URL, "
            "PUBMED_URL, CROSSREF_URL); searching the web only."
        ),
        args={},
    )


def _queries(topic: Topic) -> list[SearchQuery]:
    """Per sub-query not searched yet, its first query in each language, in plan order: a later
    round, or a follow-up's search (research/pipeline/followup.py), asks the indexes its own
    sub-queries only, never the topic's earlier ones again (an empty answer's cache entry lasts
    an hour)."""
    chosen: dict[tuple[int, str], SearchQuery] = {}
    pending = SearchQuery.objects.filter(subquery__topic=topic, searched_at__isnull=True).values("subquery")
    ordered = (
        SearchQuery.objects.filter(subquery__topic=topic, subquery__in=pending)
        .select_related("subquery")
        .order_by("subquery__round", "subquery__position", "language", "position")
    )
    for query in ordered:
        chosen.setdefault((query.subquery_id, query.language), query)
    return list(chosen.values())


async def _search_all(
    ctx: RunContext, stage: StageName, indexes: list[Index], queries: list[SearchQuery]
) -> tuple[list[tuple[SearchQuery, list[Paper]]], list[str]]:
    failures: list[str] = []

    async def one(index: Index, query: SearchQuery) -> list[Paper]:
        if index.english_only and query.language != "en":
            return []
        try:
            return await _ask(ctx, index, query.text)
        except ScholarlyError as exc:
            failures.append(str(exc))
            await db(ctx.warn)(
                stage,
                gettext_noop("%(index)s failed for “%(query)s”: %(error)s"),
                args={"index": index.label, "query": query.text, "error": str(exc)},
            )
            return []

    per_query = []
    for query in queries:
        answers = await asyncio.gather(*(one(index, query) for index in indexes))
        per_query.append((query, [paper for papers in answers for paper in papers]))
    return per_query, failures


async def _ask(ctx: RunContext, index: Index, text: str) -> list[Paper]:
    key = cache.make_key(index.name, text, PER_QUERY)
    cached = await db(cache.get)(index.kind, key, newer_than=ctx.topic.web_fresh_since)
    if cached is not None:
        return [Paper.from_dict(item) for item in cached["papers"]]
    papers = (await index.search(text, limit=PER_QUERY, user=ctx.owner_id))[:PER_QUERY]
    payload = {"papers": [paper.as_dict() for paper in papers]}
    await db(cache.put)(index.kind, key, payload, description=text, ttl=None if papers else EMPTY_TTL)
    return papers


def merged(papers: list[Paper]) -> list[Paper]:
    """One paper per DOI (or per title without one): the first record, with what later ones add."""
    by_key: dict[str, Paper] = {}
    for paper in papers:
        key = paper.doi or " ".join(paper.title.lower().split())
        first = by_key.get(key)
        if first is None:
            by_key[key] = paper
            continue
        by_key[key] = replace(
            first,
            pdf_url=first.pdf_url or paper.pdf_url,
            abstract=first.abstract or paper.abstract,
            venue=first.venue if first.venue and first.venue != "arXiv" else paper.venue or first.venue,
            year=first.year or paper.year,
            authors=first.authors or paper.authors,
            doi=first.doi or paper.doi,
        )
    return list(by_key.values())


def _save(ctx: RunContext, found: list[tuple[SearchQuery, list[Paper]]], save_hit: SaveHit) -> int:
    added = 0
    known = Hit.objects.filter(topic=ctx.topic, engine__startswith=ENGINE_PREFIX).values_list(
        "paper", flat=True
    )
    seen: set[str] = {
        str(paper.get("doi")) for paper in known if isinstance(paper, dict) and paper.get("doi")
    }
    for query, papers in found:
        for position, paper in enumerate(merged(papers)):
            if not paper.url or (paper.doi and paper.doi in seen):
                continue
            seen.add(paper.doi)
            added += save_hit(ctx.topic, query, position, as_result(paper))
    return added


def as_result(paper: Paper) -> dict[str, Any]:
    """A paper as the search stage saves a result: its hit, with the paper's own fields."""
    byline = ", ".join(paper.authors[:3]) + (" et al." if len(paper.authors) > 3 else "")
    about = " · ".join(str(part) for part in (byline, paper.venue, paper.year) if part)
    return {
        "url": paper.url,
        "title": paper.title,
        "snippet": " — ".join(part for part in (about, paper.abstract[:400]) if part),
        "engine": ENGINE_PREFIX + paper.source,
        "published_at": f"{paper.year}-01-01T00:00:00+00:00" if paper.year else None,
        "paper": paper.as_dict(),
    }


# --- Reading ----------------------------------------------------------------------------------


async def read(
    hit: Hit, *, user: int | None, read_page: Callable[..., Awaitable[dict[str, str]]]
) -> dict[str, str]:
    """A paper hit's text: its open-access PDF through the document reader; else (no PDF, or it
    could not be had) the abstract; else its landing page through `read_page` (the reader)."""
    paper = Paper.from_dict(hit.paper)
    problem = ""
    if paper.pdf_url:
        try:
            return await read_pdf(paper)
        except fetch.FetchError as exc:
            problem = str(exc)
    if paper.abstract:
        return {"url": hit.url, "title": paper.title, "markdown": abstract_text(paper), "via": "abstract"}
    if problem and hit.url == paper.pdf_url:
        raise fetch.FetchError(problem)
    return await read_page(hit.url, user=user)


def abstract_text(paper: Paper) -> str:
    lines = [f"# {paper.title}", ""]
    if paper.authors:
        lines.append(", ".join(paper.authors))
    about = " · ".join(
        str(part) for part in (paper.venue, paper.year, f"DOI {paper.doi}" if paper.doi else "") if part
    )
    if about:
        lines.append(about)
    return "\n".join([*lines, "", "## Abstract", "", paper.abstract])


async def read_pdf(paper: Paper) -> dict[str, str]:
    """The PDF downloaded (cached as a document) and parsed in the reader's child process."""
    key = cache.make_key("paper-pdf", paper.pdf_url)
    cached = await db(cache.get)(CacheEntry.Kind.DOCS, key)
    if cached is not None and "error" in cached:
        raise fetch.FetchError(cached["error"])
    if cached is not None:
        return dict(cached)
    try:
        data = await download_pdf(paper.pdf_url)
        text = await asyncio.to_thread(_parse, data)
    except fetch.FetchError as exc:
        await db(cache.put)(
            CacheEntry.Kind.DOCS, key, {"error": str(exc)}, description=paper.pdf_url, ttl=timedelta(days=1)
        )
        raise
    page = {"url": paper.pdf_url, "title": paper.title, "markdown": text[:MAX_TEXT_CHARS], "via": "paper"}
    await db(cache.put)(CacheEntry.Kind.DOCS, key, page, description=paper.pdf_url)
    return page


def _parse(data: bytes) -> str:
    from retrieval.parsing import ParseError, parse

    try:
        parsed = parse(data, filename="paper.pdf", timeout=PDF_PARSE_SECONDS)
    except ParseError as exc:
        raise fetch.FetchError(f"the PDF could not be read: {exc}") from exc
    if not parsed.text.strip():
        raise fetch.FetchError("the PDF has no text")
    return parsed.text


# --- What a source carries --------------------------------------------------------------------


def source_fields(hit: Hit | None) -> dict[str, Any]:
    """The paper's fields a report's source keeps (doi, authors, year, venue), or nothing."""
    if hit is None or not hit.paper:
        return {}
    paper = Paper.from_dict(hit.paper)
    fields: dict[str, Any] = {
        "doi": paper.doi,
        "authors": paper.authors,
        "year": paper.year,
        "venue": paper.venue,
    }
    fields["paper_kind"] = paper.kind
    return {key: value for key, value in fields.items() if value}


def citation_note(source: dict[str, Any]) -> str:
    """What a sources list adds after a paper's title: its authors, venue, year and DOI link."""
    if not source.get("doi") and not source.get("authors"):
        return ""
    authors = list(source.get("authors") or [])
    byline = ", ".join(authors[:3]) + (" et al." if len(authors) > 3 else "")
    parts = [part for part in (byline, source.get("venue"), source.get("year")) if part]
    if source.get("doi"):
        parts.append(f"DOI [{source['doi']}](https://doi.org/{source['doi']})")
    return " — " + ", ".join(
        str(part).replace("[", "(").replace("]", ")") if not str(part).startswith("DOI") else str(part)
        for part in parts
    )


NOT_CONFIGURED = gettext_lazy(
    "No scholarly index is configured on this server (OPENALEX_URL, ARXIV_URL, PUBMED_URL and "
    "CROSSREF_URL are empty), so a Papers topic cannot start: choose Web, or ask the administrator "
    "(the status page says how)."
)
