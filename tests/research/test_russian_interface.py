"""The whole interface in Russian: a topic through plan review, its run and its report with a
citation check, a follow-up, a documents topic that finds nothing, and the status, documents,
document search and history pages — every word the interface adds is Russian.

A page fails on a Latin word outside what is not the interface's own: the user's text (the
question, the plan's sub-queries, a follow-up, file names), what research brought (queries, page
titles, quotes, the report and the answers), URLs, code, and the names of things that have no
Russian name (MindSearch, SearXNG, PDF…).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from lxml import html as lxml_html

from research import workflow
from research.models import Citation, Document, FollowUp, Hit, Report, RunEvent, SearchQuery, Summary, Topic
from research.pipeline.followup import answer_pending
from research.pipeline.run import plan_topic, run_topic
from retrieval.models import UploadedDocument
from tests.research.pipeline.test_citation_report import FIRST, script_answers
from tests.research.pipeline.test_private_sources import upload
from tests.support.world import TOPIC, World

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("media_root")]

# Names with no Russian form, and units and formats a Russian page writes in Latin letters.
NAMES = {
    "mindsearch", "searxng", "pdf", "docx", "md", "markdown", "rtf", "txt", "html", "odt", "epub",
    "csv", "json", "zip", "api", "mcp", "url", "llm", "id", "kb", "mb", "gb", "http", "https",
    "postgresql", "redis", "django", "openai", "ok", "utc", "e", "mail", "rss", "ms", "cron",
    "en", "ru", "jpeg", "png", "gif", "webp", "exif", "post", "open-meteo", "openstreetmap", "nominatim",
    "alpha", "vantage", "thesportsdb", "osrm", "openalex", "arxiv", "pubmed", "e-utilities", "crossref",
    "doi", "bibtex", "ris", "zotero", "endnote", "mendeley",
}  # fmt: skip
# Where the page shows someone else's words: the report, answers, quotes, code and links.
CONTENT = (
    "//script", "//style", "//code", "//pre", "//q", "//blockquote", "//a[starts-with(@href, 'http')]",
    "//*[contains(concat(' ', normalize-space(@class), ' '), ' markdown ')]",
)  # fmt: skip
ATTRIBUTES = ("title", "aria-label", "placeholder", "alt")
LATIN = re.compile(r"[A-Za-z][A-Za-z'’-]*")
QUOTED = re.compile(r"“[^”]*”|«[^»]*»|\"[^\"]*\"")
URL = re.compile(r"\b(?:https?://|www\.)\S+|\S+@\S+|\S+\.(?:org|com|net|ru|io)\S*")


def ru(client: Client, path: str) -> str:
    response = client.get(path, headers={"accept-language": "ru"})
    assert response.status_code == 200, (path, response.status_code)
    return response.content.decode()


def visible_text(page: str) -> list[str]:
    """The texts a reader sees or hears: the body's text and the attributes read aloud."""
    tree = lxml_html.fromstring(page)
    for path in CONTENT:
        for element in tree.xpath(path):
            element.drop_tree() if element.getparent() is not None else None
    texts = [" ".join(text.split()) for text in tree.xpath("//body//text()")]
    for name in ATTRIBUTES:
        texts += tree.xpath(f"//body//@{name}")
    texts += tree.xpath("//body//input[@type='submit' or @type='button']/@value")
    texts += tree.xpath("//title/text()")
    return [text for text in texts if text.strip()]


def theirs(topic: Topic) -> list[str]:
    """What is not the interface's: the user's words and what research brought, longest first."""
    strings: list[str] = [topic.question, topic.owner.username]
    strings += list(topic.subqueries.values_list("text", flat=True))
    strings += list(SearchQuery.objects.filter(subquery__topic=topic).values_list("text", flat=True))
    for title, url in Document.objects.filter(topic=topic).values_list("title", "url"):
        strings += [title, url]
    for title, snippet, engine in Hit.objects.filter(topic=topic).values_list("title", "snippet", "engine"):
        strings += [title, snippet, engine]
    strings += list(Summary.objects.filter(document__topic=topic).values_list("text", flat=True))
    for followup in FollowUp.objects.filter(topic=topic):
        strings += [followup.question, followup.answer, followup.section]
    for citation in Citation.objects.filter(report__topic=topic):
        strings += [citation.sentence, citation.passage, citation.note]  # the note: the model's words
    report = getattr(topic, "report", None)
    if report is not None:
        strings += [source.get("title", "") for source in report.sources]
        strings += report.markdown.splitlines()
    strings += [event.data.get("i18n", {}).get("args", {}).get(key, "") for event in topic.events.all()
                for key in ("query", "url", "title", "error")]  # fmt: skip
    strings += list(
        UploadedDocument.objects.filter(owner=topic.owner).values_list("original_name", flat=True)
    )
    return sorted({" ".join(str(s).split()) for s in strings if s and str(s).strip()}, key=len, reverse=True)


def english_words(page: str, own: Iterable[str] = (), words: Iterable[str] = ()) -> list[str]:
    """Each Latin word of the page's interface, with the text it stands in.

    `own` are whole strings that are not the interface's (removed where they occur); `words`
    are the user's own words, allowed anywhere (a question shortened in a title keeps them)."""
    own = list(own)
    allowed = NAMES | {word.lower() for word in words}
    found = []
    for text in visible_text(page):
        shown = text
        for phrase in own:
            if len(phrase) > 2:
                text = text.replace(phrase, " ")
        text = QUOTED.sub(" ", URL.sub(" ", text))
        found += [
            f"{word} ← {shown[:120]}"
            for word in LATIN.findall(text)
            if word.lower().strip("'’-") not in allowed
        ]
    return found


def assert_russian(pages: dict[str, str], topic: Topic, extra: Iterable[str] = ()) -> None:
    """No page shows an English word of its own; the failure lists each with its text."""
    user = [topic.question, topic.owner.username, *topic.subqueries.values_list("text", flat=True), *extra]
    user += list(FollowUp.objects.filter(topic=topic).values_list("question", flat=True))
    user += list(UploadedDocument.objects.filter(owner=topic.owner).values_list("original_name", flat=True))
    own, words = theirs(topic), users_words(*user)
    problems = [
        f"{where}: {line}" for where, page in pages.items() for line in english_words(page, own, words)
    ]
    assert not problems, "English in the Russian interface:\n" + "\n".join(dict.fromkeys(problems))


def users_words(*texts: str) -> set[str]:
    return {word.lower() for text in texts for word in LATIN.findall(text)}


# --- The checker itself ----------------------------------------------------------------------------


def test_the_checker_finds_english_and_lets_quotes_links_and_the_users_words_pass() -> None:
    page = (
        "<html><head><title>Тема</title></head><body><p>Готово: Waiting for approval</p>"
        "<p>Вопрос: Mixture of Tokens?</p><q>as the paper says</q><a href='https://x.org'>MoT paper</a>"
        "<code>SEARXNG_URL</code><button aria-label='Close'>×</button><p>Формат PDF, см. https://x.org/a</p>"
        "</body></html>"
    )
    found = [
        line.split(" ← ")[0] for line in english_words(page, ["as the"], users_words("Mixture of Tokens"))
    ]
    assert found == ["Waiting", "for", "approval", "Close"]


# --- The walk ----------------------------------------------------------------------------------------


def test_a_whole_topic_in_russian(alice: User, alice_client: Client, loopback: World) -> None:
    script_answers(loopback, FIRST)
    pages: dict[str, str] = {"home": ru(alice_client, reverse("home"))}
    topic = Topic.objects.create(owner=alice, question=TOPIC)
    assert plan_topic(topic.pk) is False
    detail = reverse("topic_detail", args=[topic.pk])
    pages["plan review"] = ru(alice_client, detail)

    running: dict[str, str] = {}

    def look(event: RunEvent) -> None:
        if event.stage in ("answer", "citecheck") and "running" not in running:
            running["running"] = ru(alice_client, detail)

    topic.set_status(Topic.Status.QUEUED)
    assert run_topic(topic.pk, [look]) == Topic.Status.COMPLETED
    pages.update(running)
    pages["completed"] = ru(alice_client, detail)
    assert "citation" in pages["completed"]  # the check ran: a page with verdicts
    followup = workflow.ask_followup(topic, question="Где используется Mixture of Tokens?")
    pages["follow-up asked"] = ru(alice_client, detail)
    answer_pending(topic.pk)
    followup.refresh_from_db()
    pages["follow-up answered"] = ru(alice_client, detail)
    pages["citation card"] = ru(alice_client, reverse("citation_card", args=[topic.pk, 1]))
    pages["history"] = ru(alice_client, reverse("topic_history"))
    pages["status"] = ru(alice_client, reverse("status"))
    assert_russian(pages, topic)


def test_a_documents_topic_that_finds_nothing_in_russian(
    alice: User, alice_client: Client, private_loopback: World
) -> None:
    upload(alice, b"## Garden\n\nTomatoes need six hours of sun and deep watering twice a week.",
           "Garden notes.md")  # fmt: skip
    topic = Topic.objects.create(owner=alice, question=TOPIC, sources=Topic.Sources.DOCS, auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.FAILED
    pages = {
        "failed": ru(alice_client, reverse("topic_detail", args=[topic.pk])),
        "documents": ru(alice_client, reverse("document_list")),
        "document search": ru(alice_client, reverse("document_search") + "?q=Mixture+of+Tokens"),
        "document search, nothing": ru(alice_client, reverse("document_search") + "?q=quantum"),
    }
    assert_russian(pages, topic, ["Mixture of Tokens", "quantum"])


def test_a_search_that_finds_nothing_and_a_follow_up_that_cannot_be_answered_in_russian(
    alice: User, alice_client: Client, loopback: World
) -> None:
    loopback.script.pages.clear()  # SearXNG finds nothing, for the run and for the follow-up
    topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.FAILED
    failed = ru(alice_client, reverse("topic_detail", args=[topic.pk]))
    assert "Ни по одному запросу плана ничего не нашлось" in failed

    answered = Topic.objects.create(owner=alice, question=TOPIC, status=Topic.Status.COMPLETED)
    Report.objects.create(topic=answered, markdown="# Mixture of Tokens\n\nИсточников нет.\n", sources=[])
    workflow.ask_followup(answered, question="Где используется Mixture of Tokens?")
    answer_pending(answered.pk)
    assert FollowUp.objects.get(topic=answered).status == FollowUp.Status.FAILED
    thread = ru(alice_client, reverse("topic_detail", args=[answered.pk]))
    assert "Ответить не из чего" in thread
    assert_russian({"failed run": failed}, topic)
    assert_russian({"failed follow-up": thread}, answered)
