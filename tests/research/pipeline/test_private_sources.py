"""Private documents in research: found per sub-query, scored, read, ranked with the web and cited
by name and page; never sent to the search engine; cached for their owner only."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any
from urllib.parse import unquote

import pytest
from django.contrib.auth.models import User
from django.core.files.base import ContentFile
from django.test import Client
from django.urls import reverse

from research.models import (
    CacheEntry,
    Document,
    Hit,
    HitScore,
    Report,
    RunEvent,
    SearchQuery,
    SubQuery,
    Summary,
    SummaryScore,
    Topic,
)
from research.pipeline import private
from research.pipeline.context import RunContext
from research.pipeline.run import plan_topic, run_topic
from research.pipeline.stage import StageName
from research.pipeline.stages import queries, score_hits, search
from research.pipeline.stages.answer.report_writer import sources_section
from retrieval.ingest import ingest
from retrieval.models import UploadedDocument
from tests.retrieval.test_parsing import pdf_bytes
from tests.support import processes
from tests.support.world import TOPIC, ScriptedLLM, World, world

# The distinctive phrase: every private passage carries it, and nothing public does.
PHRASE = "Zanzibar lab"
MEMO = "Quarterly memo.pdf"
MEMO_PAGES = [
    f"{PHRASE} quarterly memo. Cover page and contents.",
    f"Mixture of Tokens in the {PHRASE}: the lattice protocol cut our training cost by 41 percent.",
    f"{PHRASE} catering budget for the spring offsite and the parking rules.",
    f"Improvements to Mixture of Tokens planned by the {PHRASE}: larger token groups and transition tuning.",
]
NOTES = "Lab notes.md"
NOTES_RUNS = 24  # over 2,500 characters: a section that long is cut into chunks (three)
NOTES_TEXT = "## Mixture of Tokens experiments\n\n" + " ".join(
    f"Run {i} in the {PHRASE}: Mixture of Tokens with group size {8 + i} reached perplexity {40 - i} "
    "on the Wren corpus."
    for i in range(NOTES_RUNS)
)
LEDGER = "Bob ledger.pdf"
LEDGER_PAGES = ["Mixture of Tokens at the Orinoco workshop: routing was replaced by token mixing in 2024."]
PRIVATE_NAMES = (MEMO, NOTES, LEDGER)
CRITERIA = ["соответствие_запросу", "соответствие_направлению", "полнота", "точность", "структура"]
ROWS = (Hit, HitScore, Document, Summary, SummaryScore, Report, SearchQuery, SubQuery)


pytestmark = pytest.mark.usefixtures("media_root")


class JudgesPassagesByContent(ScriptedLLM):
    """Scores a private passage or summary by what it says (10 when it is about Mixture of
    Tokens, else 1), and web pages as ScriptedLLM does."""

    def score(self, user: str) -> str:
        listing = user.split("<<<ДАННЫЕ", 1)[-1]
        rows = []
        for block in re.split(r"^\d+\. Заголовок: ", listing, flags=re.M)[1:]:
            title, _, text = block.partition("\n")
            if title.startswith(PRIVATE_NAMES):
                value = 10 if "Mixture of Tokens" in text else 1
                rows.append({"заголовок": title, **dict.fromkeys(CRITERIA, value)})
            else:
                rows.append(self._row(title))
        return json.dumps(rows, ensure_ascii=False)


def judge_passages_by_content(world: World) -> None:
    """The world's LLM becomes a `JudgesPassagesByContent` over the same pages."""
    world.use_script(
        JudgesPassagesByContent(
            pages=world.script.pages, queries_per_language=world.script.queries_per_language
        )
    )


def chunk_owner(hit: Hit) -> int:
    """The owner of a private hit's passage (a private hit has one)."""
    assert hit.chunk is not None, hit
    return hit.chunk.owner_id


def upload(owner: User, data: bytes, name: str) -> UploadedDocument:
    document = UploadedDocument(
        owner=owner, original_name=name, sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data)
    )
    document.file.save(name, ContentFile(data), save=False)
    document.save()
    ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.READY, document.error
    return document


def alices_documents(owner: User) -> dict[str, UploadedDocument]:
    return {
        MEMO: upload(owner, pdf_bytes(MEMO_PAGES), MEMO),
        NOTES: upload(owner, NOTES_TEXT.encode(), NOTES),
    }


def research(owner: User, sources: str = Topic.Sources.BOTH) -> Topic:
    topic = Topic.objects.create(owner=owner, question=TOPIC, sources=sources, auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def llm_bodies(w: World, since: int = 0) -> list[str]:
    return [request.body.decode() for request in w.llm.requests[since:]]


def counts(topic: Topic) -> dict[str, int]:
    lookups = {
        Hit: "topic",
        HitScore: "hit__topic",
        Document: "topic",
        Summary: "document__topic",
        SummaryScore: "summary__document__topic",
        Report: "topic",
        SearchQuery: "subquery__topic",
        SubQuery: "topic",
    }
    return {model.__name__: model.objects.filter(**{lookups[model]: topic}).count() for model in ROWS}


# --- End to end -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_both_topic_cites_private_documents_by_name_and_page_next_to_web_sources(
    alice: User, alice_client: Client, private_loopback: World
) -> None:
    uploads = alices_documents(alice)
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error

    private_hits = Hit.objects.filter(topic=topic, source=Hit.Source.PRIVATE).select_related("chunk", "score")
    # The relevance floor may keep off-topic pages (cover, catering) from being hits at all.
    assert private_hits.count() <= uploads[MEMO].chunk_count + uploads[NOTES].chunk_count
    for hit in private_hits:
        assert chunk_owner(hit) == alice.pk and hit.url == "" and PHRASE in hit.snippet
        assert hit.score.origin == HitScore.Origin.LLM
    assert set(private_hits.values_list("title", flat=True)) >= {f"{MEMO}, p. {n}" for n in (2, 4)}

    documents = Document.objects.filter(topic=topic, fetched_via=Document.FetchedVia.PRIVATE)
    memo_page_2 = documents.get(title=f"{MEMO}, p. 2")
    assert memo_page_2.uploaded_document == uploads[MEMO] and memo_page_2.pages == [2]
    assert memo_page_2.text == MEMO_PAGES[1] and memo_page_2.url == ""
    # Off-topic pages (cover, catering), if hits, scored under the floor and were not read.
    assert set(documents.values_list("title", flat=True)) == {
        f"{MEMO}, p. 2",
        f"{MEMO}, p. 4",
        f"{NOTES}, “Mixture of Tokens experiments”",
    }
    # The notes' neighbouring chunks became one document, their overlap taken once.
    notes = documents.get(uploaded_document=uploads[NOTES])
    assert uploads[NOTES].chunk_count > 1 and notes.pages == []
    assert [int(n) for n in re.findall(r"Run (\d+) in", notes.text)] == list(range(NOTES_RUNS))
    assert all(hasattr(document, "summary") for document in documents)

    report = Report.objects.get(topic=topic)
    by_title = {source["title"]: source for source in report.sources}
    cited_private = by_title[f"{MEMO}, p. 2"]
    assert cited_private["url"] == "" and cited_private["pages"] == [2]
    assert cited_private["fetched_via"] == "private"
    assert any(source["url"].startswith("http") for source in report.sources)  # next to web pages
    body, sources = report.markdown.split("## Источники")
    private_numbers = {source["n"] for source in report.sources if source["fetched_via"] == "private"}
    assert private_numbers & {int(n) for n in re.findall(r"\[(\d+)\]", body)}
    assert f"{cited_private['n']}. {MEMO}, p. 2\n" in sources + "\n"

    # The topic page: the sources list, the hits table and the documents, without empty links.
    html = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert f"{MEMO}, p. 2" in html and "from my documents" in html
    assert 'href=""' not in html
    exported = alice_client.get(reverse("report_markdown", args=[topic.pk])).content.decode()
    assert f"{cited_private['n']}. {MEMO}, p. 2" in exported


@pytest.mark.django_db
def test_private_text_never_reaches_the_search_engine(alice: User, private_loopback: World) -> None:
    alices_documents(alice)
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    searches = private_loopback.searxng.requests
    assert searches, "the web was searched"
    for request in searches:
        assert PHRASE.lower() not in unquote(request.raw_path).lower()
    for service in (private_loopback.reader, private_loopback.web):
        assert not any(PHRASE.lower() in unquote(r.raw_path).lower() for r in service.requests)
    # The phrase did go through the pipeline: the LLM summarised and scored it.
    assert any(PHRASE in body for body in llm_bodies(private_loopback))


@pytest.mark.django_db
def test_deep_rounds_never_search_the_web_for_private_text(
    alice: User, private_loopback: World, settings: Any
) -> None:
    """Later rounds are planned from what was found; without an LLM, from names and terms in the
    passages themselves. Those of private documents may not become web searches."""
    settings.AITUNNEL_API_KEY = ""
    alices_documents(alice)
    topic = Topic.objects.create(
        owner=alice, question=TOPIC, sources=Topic.Sources.BOTH, mode=Topic.Mode.DEEP, auto_approve=True
    )
    plan_topic(topic.pk)
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    assert topic.subqueries.filter(round=2).exists()
    assert Document.objects.filter(topic=topic, fetched_via=Document.FetchedVia.PRIVATE).exists()
    private_words = re.compile(r"zanzibar|wren|run \d|lattice|catering", re.I)
    for request in private_loopback.searxng.requests:
        assert not private_words.search(unquote(request.raw_path)), request.raw_path
    assert not any(private_words.search(text) for text in topic.subqueries.values_list("text", flat=True))


@pytest.mark.django_db
def test_a_docs_topic_makes_no_web_request(alice: User, private_loopback: World) -> None:
    alices_documents(alice)
    topic = research(alice, Topic.Sources.DOCS)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert (
        not private_loopback.searxng.requests
        and not private_loopback.reader.requests
        and not private_loopback.web.requests
    )
    assert not Hit.objects.filter(topic=topic, source=Hit.Source.WEB).exists()
    sources = topic.report.sources
    assert sources and {source["fetched_via"] for source in sources} == {"private"}
    assert all(source["url"] == "" for source in sources)
    assert f"{MEMO}, p. 2" in topic.report.markdown


@pytest.mark.django_db
def test_a_docs_topic_cites_several_passages_of_one_file(
    alice: User, private_loopback: World, settings: Any
) -> None:
    """The cap of sources per site (one uploaded file is one site) does not apply when the user
    asked for their documents only."""
    settings.RESEARCH_SOURCES_PER_SITE = 1
    upload(alice, pdf_bytes(MEMO_PAGES), MEMO)
    topic = research(alice, Topic.Sources.DOCS)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    titles = [source["title"] for source in topic.report.sources]
    assert sorted(titles) == [f"{MEMO}, p. 2", f"{MEMO}, p. 4"]


@pytest.mark.django_db
def test_a_docs_topic_without_indexed_documents_fails_clearly(alice: User, private_loopback: World) -> None:
    topic = research(alice, Topic.Sources.DOCS)
    assert topic.status == Topic.Status.FAILED
    assert "no indexed documents" in topic.error
    assert RunEvent.objects.filter(
        topic=topic, level="error", message__contains="no indexed documents"
    ).exists()
    assert (
        not private_loopback.llm.requests and not private_loopback.searxng.requests
    )  # nothing was spent on it


@pytest.mark.django_db
def test_a_docs_topic_whose_documents_are_still_indexing_says_so(
    alice: User, private_loopback: World
) -> None:
    UploadedDocument.objects.create(owner=alice, file="x", original_name="late.pdf", sha256="0" * 64)
    topic = research(alice, Topic.Sources.DOCS)
    assert topic.status == Topic.Status.FAILED
    assert "no indexed documents yet: 1 still being indexed" in topic.error
    assert not private_loopback.searxng.requests


@pytest.mark.django_db
def test_a_both_topic_without_documents_warns_and_searches_the_web(
    alice: User, private_loopback: World
) -> None:
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    warning = RunEvent.objects.get(topic=topic, level="warning", stage="search")
    assert "no indexed documents" in warning.message and "web only" in warning.message
    assert {source["fetched_via"] for source in topic.report.sources} == {"reader"}


# --- Owners ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_bob_never_sees_alices_passages(alice: User, bob: User, private_loopback: World) -> None:
    alices_documents(alice)
    assert research(alice).status == Topic.Status.COMPLETED
    upload(bob, pdf_bytes(LEDGER_PAGES), LEDGER)
    since = len(private_loopback.llm.requests)
    topic = research(bob)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    hits = Hit.objects.filter(topic=topic, source=Hit.Source.PRIVATE).select_related("chunk")
    assert hits and {chunk_owner(hit) for hit in hits} == {bob.pk}
    assert not Document.objects.filter(topic=topic, uploaded_document__owner=alice).exists()
    for text in [
        *Hit.objects.filter(topic=topic).values_list("snippet", flat=True),
        *Document.objects.filter(topic=topic).values_list("text", flat=True),
        topic.report.markdown,
        *llm_bodies(private_loopback, since),
    ]:
        assert PHRASE not in text and MEMO not in text
    assert f"{LEDGER}, p. 1" in topic.report.markdown


@pytest.mark.django_db
def test_private_answers_are_cached_for_their_owner_only(
    alice: User, bob: User, private_loopback: World
) -> None:
    """Bob uploads the very same files and asks the very same question: every LLM request about
    the private text is his own again, while the web part comes from the shared cache."""
    alices_documents(alice)
    assert research(alice).status == Topic.Status.COMPLETED
    alice_private = [body for body in llm_bodies(private_loopback) if PHRASE in body]
    alice_entries = CacheEntry.objects.filter(owner=alice)
    assert set(alice_entries.values_list("kind", flat=True)) == {
        CacheEntry.Kind.RANKED_RESULTS,
        CacheEntry.Kind.SUMMARIES,
        CacheEntry.Kind.RANKED_SUMMARIES,
        CacheEntry.Kind.ANSWERS,
        CacheEntry.Kind.CITATION_CHECKS,  # the claims are checked against the private text
    }
    # Nothing derived from the private text sits in the shared cache.
    for payload in CacheEntry.objects.filter(owner=None).values_list("payload", flat=True):
        assert PHRASE not in json.dumps(payload) and MEMO not in json.dumps(payload)
    alice_hits = sum(alice_entries.values_list("hit_count", flat=True))

    alices_documents(bob)
    since, searches = len(private_loopback.llm.requests), len(private_loopback.searxng.requests)
    topic = research(bob)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    bob_bodies = llm_bodies(private_loopback, since)
    assert sorted(body for body in bob_bodies if PHRASE in body) == sorted(alice_private)
    assert [body for body in bob_bodies if PHRASE not in body] == []  # the web part: shared cache
    assert len(private_loopback.searxng.requests) == searches
    assert sum(alice_entries.values_list("hit_count", flat=True)) == alice_hits
    assert CacheEntry.objects.filter(owner=bob).count() == alice_entries.count()


# --- Resuming -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_running_a_finished_topic_again_adds_no_rows_and_no_calls(
    alice: User, private_loopback: World
) -> None:
    alices_documents(alice)
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    before, calls = counts(topic), private_loopback.external_requests()
    topic.set_status(Topic.Status.QUEUED)
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    assert counts(topic) == before
    assert private_loopback.external_requests() == calls


@pytest.mark.django_db
def test_a_run_stopped_after_reading_passages_resumes_without_duplicates(
    alice: User, private_loopback: World
) -> None:
    alices_documents(alice)
    topic = Topic.objects.create(owner=alice, question=TOPIC, sources=Topic.Sources.DOCS, auto_approve=True)
    plan_topic(topic.pk)
    ctx = RunContext.for_topic(Topic.objects.get(pk=topic.pk))
    for stage in (queries, search, score_hits):
        stage.run(ctx)
    # The worker made the documents and died before summarising any of them.
    assert private.read_documents(ctx, StageName.READ)
    documents = set(Document.objects.filter(topic=topic).values_list("pk", flat=True))
    hits = Hit.objects.filter(topic=topic).count()
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    assert set(Document.objects.filter(topic=topic).values_list("pk", flat=True)) == documents
    assert Hit.objects.filter(topic=topic).count() == hits
    assert Summary.objects.filter(document__topic=topic).count() == len(documents)


@pytest.mark.django_db
def test_a_deleted_document_is_not_read(alice: User, private_loopback: World) -> None:
    uploads = alices_documents(alice)
    topic = Topic.objects.create(owner=alice, question=TOPIC, sources=Topic.Sources.DOCS, auto_approve=True)
    plan_topic(topic.pk)
    ctx = RunContext.for_topic(Topic.objects.get(pk=topic.pk))
    for stage in (queries, search, score_hits):
        stage.run(ctx)
    uploads[MEMO].delete()  # between finding its passages and reading them
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    assert Document.objects.filter(topic=topic).exists()
    assert not Document.objects.filter(topic=topic, title__startswith=MEMO).exists()
    assert MEMO not in Report.objects.get(topic=topic).markdown


# --- Pure parts -----------------------------------------------------------------------------------


def test_rankings_fuse_by_reciprocal_rank_with_stable_ties() -> None:
    assert private.fuse_rankings([[7, 8], [8]]) == [8, 7]  # found by more phrasings
    assert private.fuse_rankings([[1, 2, 3], [2, 1, 9]]) == [1, 2, 3, 9]
    assert private.fuse_rankings([[5], [4]]) == [4, 5]
    assert private.fuse_rankings([]) == []


def test_neighbouring_passages_of_one_document_are_grouped() -> None:
    # (item, document, chunk position), best first.
    items = [("a", 1, 4), ("b", 2, 0), ("c", 1, 5), ("d", 1, 7), ("e", 1, 3)]
    assert private.neighbour_groups(items) == [("a", ["e", "a", "c"]), ("b", ["b"]), ("d", ["d"])]
    assert private.neighbour_groups([]) == []


def test_chunks_join_without_repeating_their_overlap() -> None:
    text = "One. Two. Three. Four."
    spans = [(0, 9, text[0:9]), (5, 16, text[5:16]), (20, 22, "r.")]
    assert private.join_chunks(spans) == "One. Two. Three.\n\nr."
    assert private.join_chunks([(0, 4, "One.")]) == "One."


def test_citations_name_the_document_and_its_pages() -> None:
    assert private.citation("Annual report.pdf", [4]) == "Annual report.pdf, p. 4"
    assert private.citation("Annual report.pdf", [4, 5]) == "Annual report.pdf, pp. 4–5"
    assert private.citation("notes.md", [], "Results") == "notes.md, “Results”"
    assert private.citation("notes.md", []) == "notes.md"
    assert private.citation("n.md", [], "x" * 200).endswith("x…”")
    taken: set[str] = set()
    assert private.distinct("a.pdf, p. 4", [6], taken) == "a.pdf, p. 4"
    assert private.distinct("a.pdf, p. 4", [7, 8], taken) == "a.pdf, p. 4, passages 8–9"
    assert private.distinct("a.pdf, p. 4", [7], taken) == "a.pdf, p. 4, passage 8"
    assert private.distinct("a.pdf, p. 4", [7], taken) == "a.pdf, p. 4, passage 8 (2)"


def test_the_sources_list_writes_private_documents_as_plain_text() -> None:
    sources = [
        {"n": 1, "title": "Page [draft]", "url": "https://example.org/a"},
        {"n": 2, "title": "my_report <v2> *final*.pdf, p. 4", "url": ""},
    ]
    section = sources_section("What is it?", sources)
    assert "1. [Page (draft)](https://example.org/a)" in section
    assert "2. my_report \\<v2\\> \\*final\\*.pdf, p. 4" in section


# --- Console --------------------------------------------------------------------------------------


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_console_research_of_my_documents(alice: User) -> None:
    alices_documents(alice)
    with world() as w:
        judge_passages_by_content(w)
        done = processes.manage(
            "research",
            TOPIC,
            "--yes",
            "--user",
            "alice",
            "--sources",
            "docs",
            env=processes.process_env(**w.env()),
        )
        searches = len(w.searxng.requests)
    assert done.returncode == 0, done.stderr
    assert searches == 0
    assert re.search(rf"^\d+\. {re.escape(MEMO)}, p\. 2$", done.stdout, re.M), done.stdout
    topic = Topic.objects.get(owner=alice)
    assert topic.sources == Topic.Sources.DOCS and topic.status == Topic.Status.COMPLETED
