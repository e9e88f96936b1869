"""Answered from your documents: a question that needs no web search, asked by someone with
documents, is answered from them — through the real route and answer stages, the scripted LLM
and the private_loopback services; cited by file name and page like every private source."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext

from research.event_text import I18N_KEY, render
from research.models import Citation, Document, Report, RunEvent, SubQuery, Topic
from research.pipeline.run import plan_topic
from tests.research.pipeline.test_private_sources import MEMO, PHRASE, alices_documents
from tests.support.world import World

NO_SEARCH = '{"domain": "general", "needs_search": false}'
QUESTION = f"How much did the lattice protocol cut training cost in the {PHRASE}?"


pytestmark = pytest.mark.usefixtures("media_root")


@pytest.fixture
def private_loopback(private_loopback: World) -> World:
    """A world where the router says no search is needed."""
    private_loopback.script.route = lambda user: NO_SEARCH  # type: ignore[method-assign]
    return private_loopback


def ask(owner: User, question: str = QUESTION) -> Topic:
    topic = Topic.objects.create(owner=owner, question=question, auto_approve=True)
    plan_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def answer_requests(w: World) -> list[str]:
    return [
        r.body.decode()
        for r in w.llm.requests
        if "Исходный запрос" in r.body.decode() and "Источники" in r.body.decode()
    ]


def branch_events(topic: Topic) -> list[RunEvent]:
    return list(RunEvent.objects.filter(topic=topic, stage="answer").order_by("seq"))


@pytest.mark.django_db
def test_a_question_without_search_is_answered_from_the_users_documents(
    alice: User, alice_client: Client, private_loopback: World
) -> None:
    alices_documents(alice)
    topic = ask(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert not private_loopback.searxng.requests and not private_loopback.reader.requests  # no web at all
    assert not SubQuery.objects.filter(topic=topic).exists()  # no plan

    documents = Document.objects.filter(topic=topic)
    assert documents.exists() and set(documents.values_list("fetched_via", flat=True)) == {"private"}
    report = Report.objects.get(topic=topic)
    assert report.model == "test-model"
    # The page that answers, cited by name and page (its neighbour, the cover page, came along).
    memo = next(source for source in report.sources if source["title"].startswith(MEMO))
    assert memo["title"] == f"{MEMO}, pp. 1–2" and memo["pages"] == [1, 2]
    assert memo["url"] == "" and memo["fetched_via"] == "private"
    assert f"{memo['n']}. {MEMO}, pp. 1–2" in report.markdown
    assert any(source["title"].startswith("Lab notes.md") for source in report.sources)
    # The LLM wrote it from the passages, marked as the user's documents.
    # (Asked again when the answer comes in the other language than the question: same sources.)
    requests = answer_requests(private_loopback)
    assert requests and all("41 percent" in r and "(документ пользователя)" in r for r in requests)
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", report.markdown.split("## ")[-2])}
    assert cited and Citation.objects.filter(report=report).exists()  # checked like any report

    # The event log says which branch was taken.
    lines = [event.message for event in branch_events(topic)]
    assert any(line.startswith("No web search needed: answering from your documents (") for line in lines)
    assert not any("Answered directly" in line for line in lines)

    # The page shows the private source, and its citation card opens the document at the passage.
    html = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert f"{MEMO}, pp. 1–2" in html
    cards = [alice_client.get(reverse("citation_card", args=[topic.pk, i])) for i in range(len(cited))]
    assert all(card.status_code == 200 for card in cards)
    assert any("/documents/" in card.content.decode() for card in cards)


@pytest.mark.django_db
def test_the_branch_line_reads_in_russian(alice: User, private_loopback: World) -> None:
    alices_documents(alice)
    topic = ask(alice)
    event = next(e for e in branch_events(topic) if e.message.startswith("No web search needed"))
    with translation.override("ru"):
        line = render(event.data[I18N_KEY], gettext)
    assert line != event.message and "документ" in line


@pytest.mark.django_db
def test_the_direct_answer_stays_without_documents_that_match(
    alice: User, bob: User, private_loopback: World
) -> None:
    alices_documents(alice)
    private_loopback.script.direct = lambda user: "2 + 2 = **4**."  # type: ignore[method-assign]
    topic = ask(alice, "Сколько будет 2+2?")
    assert topic.status == Topic.Status.COMPLETED
    assert topic.report.markdown == "2 + 2 = **4**." and not Document.objects.filter(topic=topic).exists()
    lines = [event.message for event in branch_events(topic)]
    assert lines == [
        "None of your 2 documents matches the question: answering it directly",
        "Answered directly: this message needs no search",
    ]
    # Someone without documents gets the direct answer as before, and so does small talk.
    topic = ask(bob)
    assert topic.report.markdown == "2 + 2 = **4**." and topic.report.sources == []
    assert [event.message for event in branch_events(topic)] == [
        "Answered directly: this message needs no search"
    ]
    topic = ask(alice, "Привет! Спасибо!")
    assert topic.status == Topic.Status.COMPLETED and topic.report.sources == []
    assert not Document.objects.filter(topic=topic).exists()
    assert not answer_requests(private_loopback)


@pytest.mark.django_db
def test_a_run_stopped_before_the_report_takes_the_passages_it_saved(
    alice: User, private_loopback: World
) -> None:
    alices_documents(alice)
    topic = ask(alice)
    saved = sorted(Document.objects.filter(topic=topic).values_list("pk", flat=True))
    assert saved
    # As if the worker died after saving the passages, before the report.
    Report.objects.filter(topic=topic).delete()
    Topic.objects.filter(pk=topic.pk).update(status=Topic.Status.PLANNING, domain="")
    plan_topic(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert sorted(Document.objects.filter(topic=topic).values_list("pk", flat=True)) == saved
    assert Report.objects.filter(topic=topic).count() == 1
