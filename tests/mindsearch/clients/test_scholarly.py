"""The four scholarly clients against their loopback stand-ins (tests/support/scholarly_world.py):
real formats in, `Paper`s out; rate answers retried once then said in the service's words;
empty answers empty; records without abstract or DOI kept as they are."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from mindsearch.clients import arxiv, crossref, openalex, pubmed, scholarly
from tests.support.scholarly_world import (
    ScholarlyWorld,
    arxiv_busy,
    arxiv_error,
    crossref_rate_limited,
    ncbi_rate_limited,
    openalex_rate_limited,
    scholarly_world,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world(settings: Any) -> Iterator[ScholarlyWorld]:
    with scholarly_world() as w:
        for name, value in w.settings().items():
            setattr(settings, name, value)
        yield w


def search(module: Any, query: str, limit: int = 5) -> list[scholarly.Paper]:
    return async_to_sync(module.search)(query, limit=limit, user=None)


def test_openalex_reads_the_inverted_abstract_the_pdf_and_the_polite_pool(world: ScholarlyWorld) -> None:
    papers = search(openalex, "mixture of tokens transition tuning")
    assert next(p.title for p in papers) == "Scaling Mixture of Tokens with transition tuning"
    first = papers[0]
    assert first.doi == "10.1234/jmlr.2024.0077" and first.year == 2024
    assert first.venue == "Journal of Machine Learning Research"
    assert first.abstract.startswith("Transition tuning lets a Mixture of Tokens model")
    assert first.authors == ["Anna Kowalska", "Jan Nowak"]
    preprint = next(p for p in papers if p.doi == "10.48550/arxiv.2310.15961")
    assert preprint.pdf_url == world.pdf_url(world.works[0]) and preprint.venue == ""
    sent = world.openalex.requests[-1]
    assert sent.param("mailto") == world.mailto and sent.param("per-page") == "5"
    assert world.mailto in sent.headers["user-agent"]


def test_arxiv_parses_atom_and_gives_every_paper_a_doi(world: ScholarlyWorld) -> None:
    papers = search(arxiv, "Mixture of Tokens what is")
    assert len(papers) == 1
    paper = papers[0]
    assert paper.identifier == "2310.15961" and paper.kind == "preprint"
    assert paper.doi == "10.48550/arxiv.2310.15961"  # the DOI arXiv registers for every paper
    assert paper.title == "Mixture of Tokens: Continuous MoE through Cross-Example Aggregation"
    assert paper.authors[0] == "Szymon Antoniak" and paper.year == 2023
    assert paper.pdf_url.endswith("/pdf/2310.15961v1")
    assert world.arxiv.requests[-1].param("search_query") == "all:Mixture AND all:Tokens"
    assert search(arxiv, "quantum gravity") == []  # an empty feed: nothing found, not an error


def test_arxiv_error_feed_and_busy_answers(world: ScholarlyWorld, settings: Any) -> None:
    assert search(arxiv, "what is it") == [] and not world.arxiv.requests  # nothing to search by
    world.arxiv.inject(arxiv_error("incorrect id format for 1234.12345"))
    with pytest.raises(scholarly.ScholarlyError, match=r"HTTP 400.*incorrect id format"):
        search(arxiv, "mixture tokens")  # arXiv's 400 error feed, its reason quoted
    world.arxiv.inject(arxiv_busy())
    assert search(arxiv, "mixture tokens")  # 503 with Retry-After, then the answer
    world.arxiv.inject(arxiv_busy(), arxiv_busy())
    with pytest.raises(
        scholarly.ScholarlyError, match=r"arXiv refused the request \(unavailable, HTTP 503\)"
    ):
        search(arxiv, "mixture tokens")


def test_pubmed_searches_then_fetches_and_keeps_records_without_abstract_or_doi(
    world: ScholarlyWorld,
) -> None:
    papers = search(pubmed, "mixture tokens")
    assert [p.identifier for p in papers] == ["36100001", "36100002"]
    clinical, cohort = papers
    assert clinical.doi == "10.1016/j.jbi.2022.104155" and clinical.year == 2022
    assert (
        clinical.abstract.startswith("Background: Sparse models") and "Results: Mixture" in clinical.abstract
    )
    assert clinical.authors[0] == "Maria Garcia" and clinical.title.endswith("comparison")
    assert (
        cohort.doi == ""
        and cohort.abstract == ""
        and cohort.url == "https://pubmed.ncbi.nlm.nih.gov/36100002/"
    )
    fetched = world.pubmed.requests_to("/entrez/eutils/efetch.fcgi")[-1]
    assert fetched.param("id") == "36100001,36100002" and fetched.param("tool") == "mindsearch"
    assert fetched.param("email") == world.mailto
    assert search(pubmed, "quantum gravity") == []  # count 0 with phrasesnotfound


def test_ncbi_rate_answer_is_retried_then_said_in_its_words(world: ScholarlyWorld) -> None:
    world.pubmed.inject(ncbi_rate_limited())
    assert search(pubmed, "mixture tokens")
    world.pubmed.inject(ncbi_rate_limited(), ncbi_rate_limited())
    with pytest.raises(
        scholarly.ScholarlyError, match=r"API rate limit exceeded .4 requests, limit 3 a second."
    ):
        search(pubmed, "mixture tokens")


def test_crossref_reads_lists_jats_and_date_parts(world: ScholarlyWorld) -> None:
    papers = search(crossref, "mixture of tokens")
    by_doi = {p.doi: p for p in papers}
    speech = by_doi["10.21437/interspeech.2024-991"]
    assert speech.abstract == "" and speech.kind == "proceedings-article" and speech.year == 2024
    clinical = by_doi["10.1016/j.jbi.2022.104155"]
    assert clinical.abstract.startswith("Background:")  # JATS markup and its "Abstract" title gone
    assert clinical.venue == "Journal of Biomedical Informatics"
    assert world.crossref.requests[-1].param("mailto") == world.mailto


def test_openalex_and_crossref_rate_limits_are_said(world: ScholarlyWorld) -> None:
    world.openalex.inject(openalex_rate_limited(), openalex_rate_limited())
    with pytest.raises(
        scholarly.ScholarlyError, match=r"OpenAlex .*rate limit, HTTP 429.*Rate limit exceeded"
    ):
        search(openalex, "mixture tokens")
    world.crossref.inject(crossref_rate_limited(), crossref_rate_limited())
    with pytest.raises(scholarly.ScholarlyError, match=r"Crossref .*HTTP 429.*Too many requests"):
        search(crossref, "mixture tokens")


def test_a_service_that_is_down_says_so(world: ScholarlyWorld, settings: Any) -> None:
    settings.OPENALEX_URL = "http://127.0.0.1:9/"  # nothing listens on the discard port
    with pytest.raises(scholarly.ScholarlyError, match="OpenAlex is not reachable"):
        search(openalex, "mixture tokens")
    settings.OPENALEX_URL = ""
    assert not openalex.is_configured()


def test_the_pdf_download_refuses_a_landing_page(world: ScholarlyWorld, settings: Any) -> None:
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = True  # the stand-in is on loopback
    from mindsearch.clients import fetch
    from tests.support.fakes import html_page

    data = async_to_sync(scholarly.download_pdf)(world.pdf_url(world.works[0]))
    assert data.startswith(b"%PDF")
    world.files.routes[("GET", "/landing")] = html_page("A landing page", "<p>Buy access</p>")
    with pytest.raises(fetch.FetchError, match="not a PDF: text/html"):
        async_to_sync(scholarly.download_pdf)(world.files.url + "landing")
