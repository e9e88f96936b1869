"""The scholarly route (research/pipeline/papers.py) end to end: a scholarly question in
Russian and one in English, against loopback OpenAlex, arXiv, PubMed and Crossref speaking their
real formats (tests/support/scholarly_world.py) beside the SearXNG world, give reports whose
sources carry DOIs; the BibTeX and RIS downloads are parsed back by bibtexparser and rispy."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import bibtexparser
import pytest
import rispy  # type: ignore[import-untyped]  # ships no type information
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research import archive, workflow
from research.forms import TopicForm
from research.models import CacheEntry, Document, FollowUp, Hit, Report, RunEvent, ShareLink, Topic
from research.pipeline import papers
from research.pipeline.followup import answer_pending
from research.pipeline.run import plan_topic, run_topic
from tests.support.scholarly_world import (
    CORPUS,
    PDF_ONLY_SENTENCE,
    ScholarlyWorld,
    Work,
    ncbi_rate_limited,
    openalex_rate_limited,
    scholarly_world,
)
from tests.support.world import World

pytestmark = pytest.mark.django_db

RUSSIAN = "Какие научные статьи и исследования есть о Mixture of Tokens?"
ENGLISH = "What do research papers say about Mixture of Tokens and its improvements?"
ARXIV_DOI = "10.48550/arxiv.2310.15961"


@pytest.fixture
def scholarly(loopback: World, settings: Any) -> Iterator[ScholarlyWorld]:
    """The SearXNG world and the four indexes; the scripted LLM rates the papers as it rates the
    best pages (their titles are among its pages, found by no web query)."""
    with scholarly_world() as w:
        for name, value in w.settings().items():
            setattr(settings, name, value)
        for work in CORPUS:
            loopback.script.pages.append((work.key, work.title, "-", 10, work.abstract))
        yield w


def research(owner: User, question: str, **fields: Any) -> Topic:
    topic = Topic.objects.create(owner=owner, question=question, auto_approve=True, **fields)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def messages(topic: Topic) -> list[str]:
    return [event.message for event in RunEvent.objects.filter(topic=topic)]


def check_downloads(client: Client, topic: Topic) -> None:
    """The page lists the DOIs; the .bib and .ris files hold every source, in the report's order,
    with the same DOIs, as a reference manager's parser reads them."""
    sources = Report.objects.get(topic=topic).sources
    dois = [source.get("doi", "") for source in sources]
    page = client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    for doi in filter(None, dois):
        assert f"https://doi.org/{doi}" in page
    bib = client.get(reverse("report_bibtex", args=[topic.pk]))
    assert bib.status_code == 200 and bib["Content-Type"].startswith("application/x-bibtex")
    library = bibtexparser.parse_string(bib.content.decode())
    assert not library.failed_blocks
    assert len(library.entries) == len(sources)
    assert [
        entry.fields_dict["doi"].value if "doi" in entry.fields_dict else "" for entry in library.entries
    ] == dois
    assert len({entry.key for entry in library.entries}) == len(sources)
    ris = client.get(reverse("report_ris", args=[topic.pk]))
    assert ris.status_code == 200
    records = rispy.loads(ris.content.decode())
    assert len(records) == len(sources)
    assert [record.get("doi", "") for record in records] == dois
    for record, source in zip(records, sources, strict=True):
        assert record["title"] == source["title"]
        assert record.get("authors", []) == source.get("authors", [])
        if source.get("doi"):
            assert record["type_of_reference"] in {"JOUR", "UNPB", "CPAPER", "GEN"}
            assert str(source["year"]) == record["year"]


def check_paper_sources(topic: Topic) -> list[dict]:
    assert topic.status == Topic.Status.COMPLETED, topic.error
    sources = Report.objects.get(topic=topic).sources
    with_doi = [source for source in sources if source.get("doi")]
    assert with_doi, sources
    for source in with_doi:
        assert source["authors"] and source["year"], source
    # The arXiv paper was read from its PDF by the document reader, not from a landing page.
    pdf = Document.objects.get(topic=topic, hit__paper__doi=ARXIV_DOI)
    assert pdf.fetched_via == Document.FetchedVia.PAPER and PDF_ONLY_SENTENCE in " ".join(pdf.text.split())
    return sources


def test_a_russian_scholarly_question_goes_to_papers_by_default(
    alice: User, alice_client: Client, scholarly: ScholarlyWorld
) -> None:
    assert papers.looks_scholarly(RUSSIAN)
    topic = research(alice, RUSSIAN)
    assert topic.papers == Topic.Papers.AUTO and topic.sources == Topic.Sources.WEB
    assert any("reads as a scholarly one" in message for message in messages(topic)), "\n".join(
        messages(topic)
    )
    check_paper_sources(topic)
    engines = set(Hit.objects.filter(topic=topic).values_list("engine", flat=True))
    kinds = set(CacheEntry.objects.values_list("kind", flat=True))
    assert {
        CacheEntry.Kind.OPENALEX,
        CacheEntry.Kind.ARXIV,
        CacheEntry.Kind.PUBMED,
        CacheEntry.Kind.CROSSREF,
    } <= kinds
    # The arXiv paper is one hit: OpenAlex found it first, and the arXiv record merged into it by DOI.
    assert {"papers:openalex", "papers:pubmed", "papers:crossref"} <= engines
    assert Hit.objects.filter(topic=topic, paper__doi=ARXIV_DOI).count() == 1
    # arXiv and PubMed index English: only the English queries went there.
    asked = [r.param("search_query") for r in scholarly.arxiv.requests]
    asked += [r.param("term") for r in scholarly.pubmed.requests_to("/entrez/eutils/esearch.fcgi")]
    assert asked and all(text.isascii() for text in asked)
    report = Report.objects.get(topic=topic)
    assert f"DOI [{ARXIV_DOI}](https://doi.org/{ARXIV_DOI})" in report.markdown or any(
        f"https://doi.org/{s['doi']}" in report.markdown for s in report.sources if s.get("doi")
    )
    check_downloads(alice_client, topic)
    # A share link gives the same files to someone signed out.
    _link, token = ShareLink.issue(topic)
    shared = Client().get(reverse("shared_report_bibtex", args=[token]))
    assert (
        shared.status_code == 200
        and shared.content == alice_client.get(reverse("report_bibtex", args=[topic.pk])).content
    )
    shared_page = Client().get(reverse("shared_report", args=[token])).content.decode()
    assert reverse("shared_report_ris", args=[token]) in shared_page


def test_an_english_scholarly_question_and_the_api(
    alice: User, alice_client: Client, scholarly: ScholarlyWorld
) -> None:
    from mindsearch.models import ApiToken
    from tests.api.conftest import ApiClient

    assert papers.looks_scholarly(ENGLISH)
    topic = research(alice, ENGLISH)
    sources = check_paper_sources(topic)
    check_downloads(alice_client, topic)
    api = ApiClient(ApiToken.issue(alice, "tests")[1])
    report = api.get(f"/api/topics/{topic.pk}/report").json()
    assert [s.get("doi", "") for s in report["sources"]] == [s.get("doi", "") for s in sources]
    paper = next(s for s in report["sources"] if s["doi"] == ARXIV_DOI)
    assert paper["authors"][0] == "Szymon Antoniak" and paper["year"] == 2023
    assert api.get(f"/api/topics/{topic.pk}").json()["papers"] == "auto"
    bib = api.get(f"/api/topics/{topic.pk}/sources.bib")
    assert bib.status_code == 200 and ARXIV_DOI in bib.content.decode()
    assert ARXIV_DOI in api.get(f"/api/topics/{topic.pk}/sources.ris").content.decode()


def test_never_keeps_papers_out_and_a_plain_question_is_not_sent_there(
    alice: User, scholarly: ScholarlyWorld
) -> None:
    topic = research(alice, RUSSIAN, papers=Topic.Papers.NEVER)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert scholarly.requests() == 0
    assert not papers.looks_scholarly("Расскажи об Mixture of Tokens, в том числе где используется")
    assert not papers.looks_scholarly("Weather in Kazan tomorrow")


def test_a_papers_topic_needs_no_web_search_and_an_index_that_fails_is_named(
    alice: User, scholarly: ScholarlyWorld, loopback: World, settings: Any
) -> None:
    settings.SEARXNG_URL = ""
    scholarly.openalex.inject(*[openalex_rate_limited() for _ in range(40)])
    topic = research(alice, "Mixture of Tokens", sources=Topic.Sources.PAPERS)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert not loopback.searxng.requests
    warned = [e.message for e in RunEvent.objects.filter(topic=topic, level=RunEvent.Level.WARNING)]
    assert any("OpenAlex refused the request (rate limit, HTTP 429)" in error for error in warned), warned
    sources = Report.objects.get(topic=topic).sources
    assert sources and all(source.get("doi") or source.get("authors") for source in sources)
    assert not Hit.objects.filter(topic=topic).exclude(engine__startswith=papers.ENGINE_PREFIX).exists()


def test_papers_not_configured_is_said_plainly(alice: User, loopback: World, settings: Any) -> None:
    for name in ("OPENALEX_URL", "ARXIV_URL", "PUBMED_URL", "CROSSREF_URL"):
        setattr(settings, name, "")
    form = TopicForm(
        data={"question": "Mixture of Tokens", "sources": "papers", "papers": "auto", "mode": "quick"}
    )
    assert not form.is_valid() and "No scholarly index is configured" in str(form.errors["sources"])
    assert not papers.wanted(Topic(question=RUSSIAN))  # by default: silent, the status page says why
    topic = research(alice, RUSSIAN, papers=Topic.Papers.ALWAYS)  # asked for: the web alone, and why
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert any("no scholarly index is configured" in message for message in messages(topic))


def test_the_archive_keeps_the_papers_option_and_the_paper_fields(
    alice: User, bob: User, scholarly: ScholarlyWorld
) -> None:
    topic = research(alice, ENGLISH, papers=Topic.Papers.ALWAYS)
    data = archive.topic_data(topic)
    copy = archive.import_topic(archive.json.loads(archive.dumps(data)), bob)
    assert copy.papers == Topic.Papers.ALWAYS
    assert Hit.objects.get(topic=copy, paper__doi=ARXIV_DOI).paper["authors"][0] == "Szymon Antoniak"
    kept = [(s.get("doi"), s.get("authors"), s.get("year")) for s in Report.objects.get(topic=copy).sources]
    assert kept == [
        (s.get("doi"), s.get("authors"), s.get("year")) for s in Report.objects.get(topic=topic).sources
    ]
    assert any(doi for doi, _a, _y in kept)
    hostile = archive.json.loads(archive.dumps(data))
    hit = next(row for row in hostile["hits"] if row["paper"])
    hit["paper"]["doi"] = "10.1/x](javascript:alert(1))"
    with pytest.raises(archive.ArchiveError, match="paper"):
        archive.import_topic(hostile, bob)


def test_the_status_page_has_a_line_per_index(
    alice: User, alice_client: Client, scholarly: ScholarlyWorld, settings: Any
) -> None:
    from tests.mindsearch.test_status import row

    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    settings.STATUS_CACHE_SECONDS = 0
    settings.ARXIV_URL = ""
    scholarly.pubmed.inject(ncbi_rate_limited(), ncbi_rate_limited())
    html = alice_client.get("/status/").content.decode()
    # OpenAlex answered, with nothing for the probe's word (the stand-in's corpus is about tokens).
    openalex = row(html, "Papers: OpenAlex")
    assert "found nothing" in openalex and scholarly.openalex.url in openalex
    assert scholarly.openalex.requests[-1].param("search") == "photosynthesis"
    assert "Not configured" in row(html, "Papers: arXiv") and "ARXIV_URL" in row(html, "Papers: arXiv")
    pubmed = row(html, "Papers: PubMed (E-utilities)")
    assert "Not working" in pubmed and "API rate limit exceeded" in pubmed
    scholarly.works.append(replace(CORPUS[1], key="photo", title="Photosynthesis under tokens", doi="10.1/p"))
    crossref = row(alice_client.get("/status/").content.decode(), "Papers: Crossref")
    assert "5 requests a second" in crossref or "0 requests a second" in crossref


def test_a_scanned_open_access_pdf_is_read_by_ocr(scholarly: ScholarlyWorld, settings: Any) -> None:
    """The document reader's whole path: a PDF of page images is read by tesseract, as an upload is."""
    from pathlib import Path

    from asgiref.sync import async_to_sync

    from mindsearch.clients.scholarly import Paper
    from retrieval.readers import pdf as pdf_reader
    from tests.support import needs
    from tests.support.fakes import Response

    if not pdf_reader.ocr_available():
        needs.absent("tesseract is missing: run scripts/ensure-tesseract")
    scan = (Path(__file__).parents[2] / "data" / "documents" / "scan-en.pdf").read_bytes()
    scholarly.files.routes[("GET", "/pdf/scan")] = lambda _request: Response(
        200, scan, {"Content-Type": "application/pdf"}
    )
    paper = Paper(source="openalex", title="A scanned paper", pdf_url=scholarly.files.url + "pdf/scan")
    page = async_to_sync(papers.read_pdf)(paper)
    assert page["via"] == "paper" and "Reading real documents is more difficult" in " ".join(
        page["markdown"].split()
    )


SCHOLARLY = [
    "Какие исследования подтверждают эффективность интервального голодания?",
    "Что говорит научная литература о влиянии сна на память?",
    "Найди статьи о трансформерах для распознавания речи",
    "Есть ли мета-анализ по витамину D и простуде?",
    "Рандомизированные клинические испытания метформина при старении",
    "Обзор публикаций по квантовым кодам коррекции ошибок",
    "What do studies say about microplastics in drinking water?",
    "Find papers on retrieval-augmented generation evaluation",
    "Is there a systematic review of mindfulness for anxiety?",
    "Peer-reviewed evidence on four-day work weeks",
    "Recent preprints on protein structure prediction",
    "Randomized trials of GLP-1 agonists for weight loss",
]
NOT_SCHOLARLY = [
    "Какая погода будет в Казани в выходные?",
    "Курс доллара к рублю сегодня",
    "Как доехать от Москвы до Твери на машине?",
    "Лучшие рестораны Санкт-Петербурга",
    "Когда следующий матч Зенита?",
    "Как приготовить борщ?",
    "Weather in Berlin tomorrow",
    "Tesla stock price today",
    "Best hiking trails near Denver",
    "How do I reset my router password?",
    "When does the next Arsenal game start?",
    "Cheap flights from London to Rome",
]


@pytest.mark.parametrize("question", SCHOLARLY)
def test_scholarly_questions_go_to_papers_by_default(question: str) -> None:
    assert papers.looks_scholarly(question)


@pytest.mark.parametrize("question", NOT_SCHOLARLY)
def test_other_questions_do_not(question: str) -> None:
    assert not papers.looks_scholarly(question)


def test_no_live_domain_question_of_the_routing_table_is_sent_to_papers() -> None:
    from tests.research.pipeline.test_question_domain import TABLE

    live = [question for question, domain in TABLE if domain != Topic.Domain.GENERAL]
    assert len(live) >= 30 and not [question for question in live if papers.looks_scholarly(question)]


def test_the_console_takes_the_papers_source(
    alice: User, scholarly: ScholarlyWorld, loopback: World, settings: Any
) -> None:
    from io import StringIO

    from django.core.management import call_command

    settings.SEARXNG_URL = ""
    out = StringIO()
    call_command("research", ENGLISH, "--user", "alice", "--yes", "--sources", "papers", stdout=out)
    topic = Topic.objects.get(owner=alice, question=ENGLISH)
    assert topic.sources == Topic.Sources.PAPERS and topic.status == Topic.Status.COMPLETED, topic.error
    assert f"https://doi.org/{ARXIV_DOI}" in out.getvalue()
    settings.SEARXNG_URL = loopback.searxng.url
    asked = scholarly.requests()
    call_command("research", RUSSIAN, "--user", "alice", "--yes", "--papers", "never", stdout=StringIO())
    assert scholarly.requests() == asked
    assert Topic.objects.get(owner=alice, question=RUSSIAN).papers == Topic.Papers.NEVER


# --- A follow-up's search (research/pipeline/followup.py drives the search stage) ----------------

SPEECH = Work(
    "streaming-speech",
    "Streaming speech recognition with grouped token mixing",
    [("Ines", "Moreau"), ("Pavel", "Orlov")],
    2025,
    "Transactions on Audio, Speech and Language Processing",
    "Grouped token mixing cut the word error rate of streaming speech recognition by 8 percent "
    "on LibriSpeech at the same latency.",
    doi="10.1109/taslp.2025.0042",
)
SPEECH_QUERY = "Mixture of Tokens speech recognition"


def speech_follow_up(loopback: World, scholarly: ScholarlyWorld) -> None:
    """A paper only a question about speech finds (none of the topic's queries has its words),
    which the scripted model rates well once read, and queries for such a question."""
    scholarly.works.append(SPEECH)
    loopback.script.pages.append((SPEECH.key, SPEECH.title, "-", 10, SPEECH.abstract))
    real = loopback.script.queries

    def queries(user: str) -> str:
        if "speech" in user.lower():
            return f"ЗАПРОС: {SPEECH_QUERY}\nЗАПРОС: распознавание речи Mixture of Tokens"
        return real(user)

    loopback.script.queries = queries  # type: ignore[method-assign]


def asked_indexes(scholarly: ScholarlyWorld) -> list[str]:
    """Every query text the four indexes were sent, in the order asked."""
    return (
        [r.param("search") for r in scholarly.openalex.requests]
        + [r.param("search_query") for r in scholarly.arxiv.requests]
        + [r.param("term") for r in scholarly.pubmed.requests_to("/entrez/eutils/esearch.fcgi")]
        + [r.param("query") for r in scholarly.crossref.requests]
    )


def answer_follow_up(topic: Topic, question: str) -> FollowUp:
    followup = workflow.ask_followup(topic, question=question)
    answer_pending(topic.pk)
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.COMPLETED, followup.error
    return followup


def test_a_follow_up_of_a_papers_topic_asks_the_indexes_its_own_queries(
    alice: User, scholarly: ScholarlyWorld, loopback: World, settings: Any
) -> None:
    settings.SEARXNG_URL = ""
    topic = research(alice, "Mixture of Tokens", sources=Topic.Sources.PAPERS)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    speech_follow_up(loopback, scholarly)
    CacheEntry.objects.all().delete()  # the topic's answers gone (an empty one lasts an hour)
    for service in (scholarly.openalex, scholarly.arxiv, scholarly.pubmed, scholarly.crossref):
        service.requests.clear()
    followup = answer_follow_up(topic, "Which works apply it to speech recognition?")
    assert followup.searched
    # Its own queries, none of the topic's: in both languages to OpenAlex and Crossref, the
    # English one to arXiv (in its Lucene syntax) and PubMed.
    assert followup.subquery is not None
    own = set(followup.subquery.search_queries.values_list("text", flat=True))
    assert own == {SPEECH_QUERY, "распознавание речи Mixture of Tokens"}
    assert sorted(asked_indexes(scholarly)) == sorted(
        [*own, *own, "all:Mixture AND all:Tokens AND all:speech AND all:recognition", SPEECH_QUERY]
    ), asked_indexes(scholarly)
    assert not loopback.searxng.requests
    # The paper it found is read from its abstract and numbered after the topic's sources, DOI kept.
    new = [source for source in followup.sources if source.get("doi") == SPEECH.doi]
    assert new and new[0]["n"] > len(Report.objects.get(topic=topic).sources), followup.sources
    assert new[0]["authors"] == ["Ines Moreau", "Pavel Orlov"] and new[0]["year"] == 2025


def test_a_scholarly_follow_up_of_a_web_topic_searches_papers_too(
    alice: User, scholarly: ScholarlyWorld, loopback: World
) -> None:
    topic = research(alice, "Mixture of Tokens")  # not a scholarly question: the web alone
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert topic.papers == Topic.Papers.AUTO and scholarly.requests() == 0
    speech_follow_up(loopback, scholarly)
    followup = answer_follow_up(topic, "What do research papers say about it in speech recognition?")
    assert followup.searched and loopback.searxng.requests
    assert followup.subquery is not None
    own = set(followup.subquery.search_queries.values_list("text", flat=True))
    asked = asked_indexes(scholarly)
    assert asked and set(asked) - own == {"all:Mixture AND all:Tokens AND all:speech AND all:recognition"}
    assert any("reads as a scholarly one" in message for message in messages(topic))
    assert any(source.get("doi") == SPEECH.doi for source in followup.sources), followup.sources
    # "Never" keeps a scholarly follow-up out of the indexes as it keeps the topic.
    Topic.objects.filter(pk=topic.pk).update(papers=Topic.Papers.NEVER)
    topic.refresh_from_db()
    asked_before = scholarly.requests()
    answer_follow_up(topic, "What do studies say about its speech recognition word error rate?")
    assert scholarly.requests() == asked_before
