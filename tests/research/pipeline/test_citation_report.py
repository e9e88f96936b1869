"""The citation check in a run and in front of the reader: the answer asked again when most
citations are unsupported, the verdicts stored, marked on the report and share pages (English
and Russian), returned by the API with their passages, and carried through a topic archive."""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from mindsearch.models import ApiToken
from research import archive
from research.archive.checks import ArchiveError
from research.models import Citation, Document, LLMCall, Report, RunEvent, ShareLink, Topic
from research.pipeline.run import plan_topic, run_topic
from tests.support.world import TOPIC, ScriptedLLM, World, citecheck_reply

pytestmark = pytest.mark.django_db

FIRST = (
    "# Mixture of Tokens\n\n## Введение\n\n"
    "The moon is made of green cheese [1]. Arcade cabinets were banned in Norway in 1990 [2]. "
    "Mixture of Tokens mixes tokens from different examples in groups [1]."
)
SECOND = (
    "# Mixture of Tokens\n\n## Введение\n\n"
    "Mixture of Tokens mixes tokens from different examples in groups [1]. "
    "Mixture of Tokens avoids discrete routing and token dropping [1]."
)
WORSE = "# Mixture of Tokens\n\nThe moon is made of green cheese [1]. Owls hunt at night [2]."


def researched(owner: User, **fields: Any) -> Topic:
    topic = Topic.objects.create(
        owner=owner, question=fields.pop("question", TOPIC), auto_approve=True, **fields
    )
    if not plan_topic(topic.pk):
        topic.set_status(Topic.Status.QUEUED)
    run_topic(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED, topic.error
    return topic


@dataclass
class AnswersInTurn(ScriptedLLM):
    """Writes the given answers in turn (the last one from then on) and keeps the answer requests;
    its verifier backs claims about Mixture of Tokens, or answers nonsense when told to."""

    answers: list[str] = field(default_factory=list)
    answer_requests: list[str] = field(default_factory=list)
    nonsense_verifier: bool = False

    def answer(self, user: str) -> str:
        self.answer_requests.append(user)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def citecheck(self, user: str) -> str:
        if self.nonsense_verifier:
            return 'Sure, here you go: [{"id": 1, "verdict": "suppo'
        return citecheck_reply(user, lambda claim, passage: "Tokens" in claim)


def script_answers(loopback: World, *answers: str, nonsense_verifier: bool = False) -> list[str]:
    """The world's LLM becomes an `AnswersInTurn` of these answers; returns its answer requests."""
    script = AnswersInTurn(
        pages=loopback.script.pages, answers=list(answers), nonsense_verifier=nonsense_verifier
    )
    loopback.use_script(script)
    return script.answer_requests


def messages(topic: Topic) -> list[str]:
    return list(RunEvent.objects.filter(topic=topic, stage="citecheck").values_list("message", flat=True))


# --- In the run -----------------------------------------------------------------------------------


def test_mostly_unsupported_citations_ask_again_and_the_better_answer_is_kept(
    alice: User, loopback: World
) -> None:
    requests = script_answers(loopback, FIRST, SECOND)
    topic = researched(alice)
    assert len(requests) == 2
    # The second request carries the first answer's verdicts.
    assert "The moon is made of green cheese." in requests[1] and "не подтверждается" in requests[1]
    assert "green cheese" not in requests[0]
    report = topic.report
    assert "avoids discrete routing" in report.markdown and "green cheese" not in report.markdown
    citations = list(report.citations.all())
    assert [(c.n, c.verdict, c.method) for c in citations] == [
        (1, "supported", "llm"),
        (1, "supported", "llm"),
    ]
    assert all(c.passage and c.local_verdict for c in citations)
    lines = messages(topic)
    assert lines[0].startswith("Citations checked: 1 of 3 supported")
    assert "2 of 3 citations are not supported by their sources: asking the LLM once more" in lines[1]
    assert lines[-1] == "Kept the second answer: 2 of 2 citations supported"
    calls = LLMCall.objects.filter(topic=topic)
    assert calls.filter(stage="answer").count() == 2
    assert calls.filter(stage="citecheck", cache_kind="citation_checks").count() == 2


def test_a_worse_second_answer_is_not_kept(alice: User, loopback: World) -> None:
    script_answers(loopback, FIRST, WORSE)
    topic = researched(alice)
    assert "green cheese" in topic.report.markdown and "Owls" not in topic.report.markdown
    assert topic.report.citations.count() == 3
    assert messages(topic)[-1] == "Kept the first answer: 1 of 3 citations supported"


def test_a_verifier_answering_nonsense_leaves_the_local_verdicts(alice: User, loopback: World) -> None:
    script_answers(loopback, SECOND, nonsense_verifier=True)
    topic = researched(alice)
    citations = list(topic.report.citations.all())
    assert len(citations) == 2
    assert {c.method for c in citations} <= {"local", "lexical"}
    assert all(c.verdict == c.local_verdict for c in citations)


def test_without_an_llm_the_extractive_report_is_checked_locally(alice: User, settings: Any) -> None:
    from tests.support.world import loopback_world

    with loopback_world(settings) as world:
        settings.AITUNNEL_API_KEY = ""
        settings.AITUNNEL_MODEL = ""
        topic = researched(alice)
    citations = list(topic.report.citations.all())
    assert citations and {c.method for c in citations} <= {"local", "lexical"}
    # Quotes of the sources themselves: their own sources support them.
    assert all(c.verdict == "supported" for c in citations), [(c.sentence, c.verdict) for c in citations]
    assert not world.llm.requests


# --- In front of the reader ---------------------------------------------------------------------------


def report_with_citations(owner: User) -> Topic:
    topic = Topic.objects.create(
        owner=owner,
        question="What is Mixture of Tokens?",
        status=Topic.Status.COMPLETED,
        finished_at=timezone.now(),
    )
    document = Document.objects.create(
        topic=topic,
        url="https://example.org/mot",
        title="MoT",
        text="Tokens are mixed.",
        fetched_via="reader",
    )
    sources = [
        {"n": 1, "title": "MoT", "url": document.url, "document_id": document.pk, "fetched_via": "reader"}
    ]
    report = Report.objects.create(
        topic=topic,
        markdown="# Answer\n\nTokens are mixed [1]. The moon is cheese [1]. Routing is learned [1].\n\n"
        "## Sources\n\n1. MoT",
        sources=sources,
    )
    rows = [
        (0, "Tokens are mixed.", "supported", "Tokens are mixed across examples."),
        (1, "The moon is cheese.", "unsupported", "Tokens are mixed across examples."),
        (2, "Routing is learned.", "weak", "Routing weights are trained."),
    ]
    for index, sentence, verdict, passage in rows:
        Citation.objects.create(
            report=report, sentence_index=index, sentence=sentence, n=1, verdict=verdict,
            local_verdict=verdict, method="local", score=0.5, passage=passage,
        )  # fmt: skip
    return topic


def test_the_report_page_marks_each_citation_and_counts_them(alice: User, alice_client: Client) -> None:
    topic = report_with_citations(alice)
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "1 of 3 citations supported by their sources" in page
    assert "1 not supported" in page and "1 weakly supported" in page
    assert page.count('class="citation citation-supported"') == 1
    assert '<span class="citation-flag citation-flag-unsupported">not supported</span>' in page
    assert '<span class="citation-flag citation-flag-weak">weak support</span>' in page
    assert 'title="Source 1 does not support this sentence"' in page
    # The doubtful ones are listed with the passage they were compared with.
    assert "Citations the sources do not fully support" in page
    assert "“The moon is cheese.”" in page and "Routing weights are trained." in page


def test_the_shared_page_shows_the_same_marks_in_russian(alice: User) -> None:
    topic = report_with_citations(alice)
    _link, token = ShareLink.issue(topic)
    page = Client().get(reverse("shared_report", args=[token]), HTTP_ACCEPT_LANGUAGE="ru").content.decode()
    assert "Источники подтверждают 1 из 3 ссылок" in page
    assert "не подтверждено" in page
    assert 'class="citation citation-unsupported"' in page


def test_a_report_from_before_the_check_shows_no_count(alice: User, alice_client: Client) -> None:
    topic = report_with_citations(alice)
    Citation.objects.all().delete()
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "citations supported" not in page and "citation-flag" not in page
    assert 'href="#source-1"' in page


def test_the_api_returns_each_verdict_with_its_passage(alice: User) -> None:
    topic = report_with_citations(alice)
    _row, token = ApiToken.issue(alice, "tests")
    response = Client().get(f"/api/topics/{topic.pk}/report", headers={"Authorization": f"Bearer {token}"})
    data = response.json()
    assert data["citation_counts"] == {"total": 3, "supported": 1, "weak": 1, "unsupported": 1}
    first = data["citations"][1]
    assert isinstance(first.pop("id"), int)
    assert first == {
        "sentence_index": 1,
        "sentence": "The moon is cheese.",
        "n": 1,
        "verdict": "unsupported",
        "local_verdict": "unsupported",
        "method": "local",
        "score": 0.5,
        "coverage": 0.0,
        "similarity": None,
        "passage": "Tokens are mixed across examples.",
        "note": "",
    }
    schema = Client().get("/api/openapi.json").json()["components"]["schemas"]
    assert schema["CitationOut"]["properties"]["verdict"]["$ref"].endswith("CitationVerdict")
    assert set(schema["CitationVerdict"]["enum"]) == {"supported", "weak", "unsupported"}


# --- In a topic archive ---------------------------------------------------------------------------


def test_citations_travel_with_the_archive(alice: User, bob: User, loopback: World) -> None:
    topic = researched(alice)
    original = list(topic.report.citations.values_list("sentence_index", "n", "verdict", "method", "passage"))
    assert original
    copy = archive.import_archive(io.BytesIO(archive.export_topic(topic)), bob)
    assert (
        list(copy.report.citations.values_list("sentence_index", "n", "verdict", "method", "passage"))
        == original
    )
    assert list(copy.report.citations.values_list("created_at", flat=True)) == list(
        topic.report.citations.values_list("created_at", flat=True)
    )


def data_of(topic: Topic) -> dict[str, Any]:
    return json.loads(archive.dumps(archive.topic_data(topic)))


def test_an_archive_from_before_the_check_still_imports(alice: User, bob: User) -> None:
    data = data_of(report_with_citations(alice))
    del data["citations"]
    copy = archive.import_topic(data, bob)
    assert copy.report and not copy.report.citations.exists()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d.update(citations="x"), "is not a list"),
        (lambda d: d["citations"][0].update(verdict="maybe"), "invalid verdict"),
        (lambda d: d["citations"][0].update(n=5), "checks a source the report does not have"),
        (lambda d: d["citations"][1].update(sentence_index=0), "have the same"),
        (lambda d: d.update(report=None), "citation checks but no report"),
    ],
)
def test_broken_citation_rows_are_refused(alice: User, bob: User, change: Any, reason: str) -> None:
    data = data_of(report_with_citations(alice))
    change(data)
    with pytest.raises(ArchiveError, match=reason):
        archive.import_topic(data, bob)
    assert not Topic.objects.filter(owner=bob).exists()


def test_the_archive_zip_holds_the_citations(alice: User) -> None:
    topic = report_with_citations(alice)
    with zipfile.ZipFile(io.BytesIO(archive.export_topic(topic))) as zf:
        data = json.loads(zf.read("topic.json"))
    assert [row["verdict"] for row in data["citations"]] == ["supported", "unsupported", "weak"]
