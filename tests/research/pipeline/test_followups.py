"""The follow-up thread of a finished topic: asked through the workflow (limits, state), answered
by the worker from the topic's sources or with a new search (research/pipeline/followup.py),
streamed, cited with the topic's numbering extended, and part of the topic everywhere — the
page, the share link, the citation cards, Markdown/DOCX export and the archive."""

from __future__ import annotations

import io
import json
import re
import zipfile
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research import archive, export, progress, workflow
from research.archive.checks import ArchiveError
from research.models import Document, FollowUp, LLMCall, Report, ShareLink, SubQuery, Topic, TopicImage
from research.pipeline import followup as followups
from research.pipeline.followup import answer_pending, report_sections
from research.tasks import resume_stalled_followups
from tests.research.pipeline.test_citation_report import researched
from tests.support.fakes import html_page
from tests.support.world import World

pytestmark = pytest.mark.django_db

COVERED = "Where is Mixture of Tokens used?"
NEW_PAGE = (
    "arcade-history",
    "Arcade token history: who minted them",
    "arcade minted history",
    9,
    "Arcade tokens were minted by Chuck E. Cheese and by Namco in the 1980s. "
    "Collectors value the brass tokens of closed arcades most.",
)


def completed_topic(owner: User) -> Topic:
    """A finished topic with a two-source report, written without running the pipeline."""
    topic = Topic.objects.create(owner=owner, question="Mixture of Tokens", status=Topic.Status.COMPLETED)
    subquery = SubQuery.objects.create(topic=topic, text="Mixture of Tokens")
    first = Document.objects.create(
        topic=topic,
        title="MoT paper",
        url="https://example.org/mot",
        text="Mixture of Tokens mixes tokens from different examples in groups before each expert.",
        fetched_via=Document.FetchedVia.READER,
    )
    second = Document.objects.create(
        topic=topic,
        title="MoT uses",
        url="https://example.org/uses",
        text="Mixture of Tokens is used in language model pretraining and reduces training cost.",
        fetched_via=Document.FetchedVia.READER,
    )
    sources = [
        {"n": 1, "title": "MoT paper", "url": first.url, "document_id": first.pk, "fetched_via": "reader"},
        {"n": 2, "title": "MoT uses", "url": second.url, "document_id": second.pk, "fetched_via": "reader"},
    ]
    markdown = (
        "# Mixture of Tokens\n\n## Введение\n\nMoT mixes tokens [1].\n\n## Применение\n\n"
        "It is used in pretraining [2].\n\n## Источники\n\n1. x\n2. y\n"
    )
    Report.objects.create(topic=topic, markdown=markdown, sources=sources)
    assert subquery.pk
    return topic


def test_a_follow_ups_context_asks_its_question_with_the_topics_picture(alice: User) -> None:
    topic = completed_topic(alice)
    TopicImage.objects.create(
        topic=topic,
        data=b"x",
        content_type="image/png",
        width=1,
        height=1,
        sha256="0" * 64,
        labels=["lake"],
        entities=["Baikal"],
    )
    ctx = followups.FollowUpContext.for_topic(topic)
    ctx.followup_question = "How deep is it?"
    assert isinstance(ctx, followups.FollowUpContext) and ctx.image_labels == ["lake", "Baikal"]
    assert ctx.asked == "How deep is it?"  # a prompt quotes the user's own words
    assert ctx.question == "How deep is it? (lake, Baikal)"  # search sees the picture's labels too


# --- Asking: the workflow's checks ---------------------------------------------------------------


def test_only_a_completed_topic_with_a_report_takes_follow_ups(alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question="q", status=Topic.Status.RUNNING)
    with pytest.raises(workflow.Refused):
        workflow.ask_followup(topic, question="What else?")
    assert not FollowUp.objects.exists()


def test_a_question_is_checked_for_length_and_emptiness(alice: User, settings: Any) -> None:
    settings.RESEARCH_FOLLOWUP_MAX_CHARS = 50
    topic = completed_topic(alice)
    with pytest.raises(workflow.BadQuestion, match="at most 50 characters"):
        workflow.ask_followup(topic, question="x" * 51)
    with pytest.raises(workflow.BadQuestion):
        workflow.ask_followup(topic, question="   ")
    followup = workflow.ask_followup(topic, question="  Where   is it used? ")
    assert (followup.question, followup.position, followup.status) == ("Where is it used?", 1, "queued")


def test_one_follow_up_at_a_time_and_at_most_the_limit(alice: User, settings: Any) -> None:
    settings.RESEARCH_MAX_FOLLOWUPS = 2
    topic = completed_topic(alice)
    first = workflow.ask_followup(topic, question="First?")
    with pytest.raises(workflow.Refused, match="being answered"):
        workflow.ask_followup(topic, question="Second?")
    FollowUp.objects.filter(pk=first.pk).update(status=FollowUp.Status.FAILED)
    workflow.ask_followup(topic, question="Second?")
    FollowUp.objects.update(status=FollowUp.Status.COMPLETED)
    with pytest.raises(workflow.OverLimit, match="at most 2 follow-up questions"):
        workflow.ask_followup(topic, question="Third?")


def test_a_follow_up_being_answered_counts_as_an_active_topic(alice: User, settings: Any) -> None:
    settings.RESEARCH_MAX_ACTIVE_TOPICS = 1
    topic = completed_topic(alice)
    workflow.ask_followup(topic, question="First?")
    with pytest.raises(workflow.OverLimit):
        workflow.start_topic(Topic(question="Another topic"), alice)
    other = completed_topic(alice)
    with pytest.raises(workflow.OverLimit):
        workflow.ask_followup(other, question="And here?")


def test_expand_names_a_heading_of_the_report(alice: User) -> None:
    topic = completed_topic(alice)
    assert report_sections(topic.report.markdown) == ["Введение", "Применение"]
    with pytest.raises(workflow.BadQuestion):
        workflow.ask_followup(topic, section="Источники")
    followup = workflow.ask_followup(topic, section="Применение")
    assert followup.kind == FollowUp.Kind.EXPAND and followup.section == "Применение"
    assert "Применение" in followup.question


# --- Answering: the worker --------------------------------------------------------------------------


def test_a_covered_question_is_answered_from_the_topics_sources(alice: User, loopback: World) -> None:
    topic = researched(alice)
    count = len(topic.report.sources)
    calls_before = LLMCall.objects.filter(topic=topic).count()
    searches_before = len(loopback.searxng.requests)
    followup = workflow.ask_followup(topic, question=COVERED)
    assert answer_pending(topic.pk) == [followup.pk]
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.COMPLETED, followup.error
    assert not followup.searched and followup.subquery is None and followup.sources == []
    assert len(loopback.searxng.requests) == searches_before  # no new search
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", followup.answer)}
    assert cited and cited <= set(range(1, count + 1))
    assert "[99]" not in followup.answer and "Источники" not in followup.answer
    assert followup.citations and all(1 <= c["n"] <= count for c in followup.citations)
    # What it cost is the topic's: LLM calls tied to it, the answer under the follow-up stage.
    calls = LLMCall.objects.filter(topic=topic)
    assert calls.count() > calls_before and calls.filter(stage="followup").exists()
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED


def add_page(loopback: World) -> None:
    """A page the topic never found, which SearXNG returns for 'arcade' and the reader reads."""
    loopback.script.pages.append(NEW_PAGE)
    slug, title, _words, _score, text = NEW_PAGE
    article = f"<article><h1>{title}</h1><p>{text}</p></article>"
    loopback.web.routes[("GET", f"/pages/{slug}")] = html_page(title, article)
    real = loopback.script.queries

    def queries(user: str) -> str:
        if "arcade" in user.lower():
            return "ЗАПРОС: arcade minted history\nЗАПРОС: arcade history"
        return real(user)

    loopback.script.queries = queries  # type: ignore[method-assign]
    loopback.script.answer = first_sentences  # type: ignore[method-assign]


def first_sentences(user: str) -> str:
    """An answer that states the first sentence of each source it was sent, citing it."""
    blocks = re.findall(r"^\[(\d+)\] .*?\n.*?\n\n(.*?)(?=\n\n---\n\n|\nДАННЫЕ>>>)", user, re.M | re.S)
    lines = []
    for n, text in blocks:
        plain = " ".join(line for line in text.splitlines() if not line.startswith("#"))
        sentence = re.split(r"(?<=[.!?])\s", plain.strip(), maxsplit=1)[0]
        lines.append(f"{sentence.rstrip('.')} [{n}].")
    return "\n\n".join(lines)


def test_a_question_the_sources_do_not_cover_is_searched_and_numbered_after_them(
    alice: User, alice_client: Client, loopback: World
) -> None:
    topic = researched(alice)
    count = len(topic.report.sources)
    add_page(loopback)
    followup = workflow.ask_followup(topic, question="Who minted arcade tokens?")
    answer_pending(topic.pk)
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.COMPLETED, followup.error
    subquery = followup.subquery
    assert followup.searched and subquery is not None and subquery.origin == SubQuery.Origin.FOLLOWUP
    assert subquery.search_queries.exists()
    new = followup.sources
    assert new and new[0]["n"] == count + 1 and "Arcade token history" in new[0]["title"]
    assert f"[{count + 1}]" in followup.answer
    # The new source's card shows its passage, under the thread's numbering.
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert f'id="source-{count + 1}"' in page and 'data-cite-base="followups/' in page
    article = page.split('class="markdown followup-answer"', 1)[1].split("</article>", 1)[0]
    links = re.findall(r'href="#source-(\d+)"', article)
    index = links.index(str(count + 1))
    card = alice_client.get(reverse("followup_citation_card", args=[topic.pk, followup.pk, index]))
    assert card.status_code == 200
    text = card.content.decode()
    assert "Arcade token history" in text
    assert "<mark>Arcade</mark> <mark>tokens</mark> were <mark>minted</mark>" in text
    # A later follow-up numbers after this one's sources; the deep-rounds table is not touched.
    assert followups.next_number(followups.numbered_sources(topic)) == count + len(new) + 1


def test_a_failed_follow_up_says_so_and_keeps_the_thread(
    alice: User, alice_client: Client, settings: Any
) -> None:
    settings.SEARXNG_URL = ""
    settings.AITUNNEL_API_KEY = ""
    topic = completed_topic(alice)
    first = workflow.ask_followup(topic, question="Where is Mixture of Tokens used?")
    answer_pending(topic.pk)
    first.refresh_from_db()
    assert first.status == FollowUp.Status.COMPLETED, first.error
    assert "[2]" in first.answer  # the extractive answer cites the source it quotes
    Document.objects.filter(topic=topic).delete()
    second = workflow.ask_followup(topic, question="Who minted arcade tokens?")
    answer_pending(topic.pk)
    second.refresh_from_db()
    assert second.status == FollowUp.Status.FAILED and "no sources to answer from" in second.error
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "could not be answered" in page and first.answer.split("[")[0][:40] in page
    # Another question may be asked after a failure.
    assert 'id="followup-form"' in page


def test_the_answer_is_streamed_into_the_follow_up(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = researched(alice)
    seen: list[tuple[str, str]] = []
    real = progress.save_followup_draft

    def recording(topic_id: int, followup_id: int, text: str) -> int:
        version = real(topic_id, followup_id, text)
        row = FollowUp.objects.get(pk=followup_id)
        seen.append((row.status, row.draft))
        return version

    monkeypatch.setattr(progress, "save_followup_draft", recording)
    followup = workflow.ask_followup(topic, question=COVERED)
    answer_pending(topic.pk)
    followup.refresh_from_db()
    assert seen and all(status == FollowUp.Status.RUNNING for status, _text in seen)
    assert seen[-1][1].startswith(followup.answer[:20])
    assert followup.draft == ""  # the finished answer replaces the text so far


def test_a_follow_up_whose_worker_died_is_queued_again(alice: User, settings: Any) -> None:
    settings.RESUME_STALLED_AFTER_SECONDS = 5
    topic = completed_topic(alice)
    followup = workflow.ask_followup(topic, question="Where?")
    from datetime import timedelta

    from django.utils import timezone

    FollowUp.objects.filter(pk=followup.pk).update(
        status=FollowUp.Status.RUNNING, heartbeat_at=timezone.now() - timedelta(seconds=60)
    )
    assert resume_stalled_followups() == [followup.pk]
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.QUEUED and followup.heartbeat_at is None


# --- Pages, share link, export, archive ------------------------------------------------------------


def answered(topic: Topic) -> FollowUp:
    followup = workflow.ask_followup(topic, question="Where is Mixture of Tokens used?")
    answer_pending(topic.pk)
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.COMPLETED, followup.error
    return followup


def test_the_page_asks_and_refuses_with_the_text_kept(
    alice: User, alice_client: Client, bob_client: Client, settings: Any
) -> None:
    settings.RESEARCH_FOLLOWUP_MAX_CHARS = 30
    topic = completed_topic(alice)
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert 'id="followup-form"' in page and '<option value="Применение">' in page
    url = reverse("followup_create", args=[topic.pk])
    too_long = alice_client.post(url, {"question": "Where is Mixture of Tokens used in 2025?"})
    assert too_long.status_code == 400
    body = too_long.content.decode()
    assert "at most 30 characters" in body and "Where is Mixture of Tokens used in 2025?</textarea>" in body
    assert bob_client.post(url, {"question": "Mine?"}).status_code == 404
    asked = alice_client.post(url, {"question": "Where is it used?"})
    followup = FollowUp.objects.get()
    assert asked.status_code == 302 and asked["Location"].endswith(f"#followup-{followup.pk}")
    detail = reverse("topic_detail", args=[topic.pk])
    page = alice_client.get(detail, HTTP_ACCEPT_LANGUAGE="ru").content.decode()
    assert "Where is it used?" in page and "Ждёт ответа" in page


def test_the_share_link_shows_the_answered_thread_read_only(alice: User) -> None:
    topic = completed_topic(alice)
    followup = answered(topic)
    FollowUp.objects.create(topic=topic, position=2, question="A pending one", status=FollowUp.Status.QUEUED)
    _link, token = ShareLink.issue(topic)
    page = Client().get(reverse("shared_report", args=[token])).content.decode()
    assert followup.question in page and "followup-answer" in page
    assert "A pending one" not in page and "followup-form" not in page and "expand-form" not in page
    cards = re.findall(r'href="#source-(\d+)"', page.split("followup-answer", 1)[1])
    assert cards
    card = Client().get(reverse("shared_followup_citation_card", args=[token, followup.pk, 0]))
    assert card.status_code == 200 and "example.org" in card.content.decode()


def test_markdown_and_docx_exports_carry_the_thread(alice: User) -> None:
    topic = completed_topic(alice)
    followup = answered(topic)
    new = {"n": 3, "title": "Arcade history", "url": "https://example.org/arcade", "document_id": None}
    FollowUp.objects.filter(pk=followup.pk).update(sources=[new])
    markdown = export.report_markdown(topic)
    assert "## Уточняющие вопросы" in markdown  # the report's language (Russian), not the interface's
    assert f"### 1. {followup.question}" in markdown and followup.answer.strip() in markdown
    assert "- \\[3\\] [Arcade history](https://example.org/arcade)" in markdown
    docx = export.report_docx(topic)
    with zipfile.ZipFile(io.BytesIO(docx)) as document:
        xml = document.read("word/document.xml").decode()
    # The new source keeps its number in the document (a numbered list would restart at 1).
    assert followup.question in xml and "[3] " in xml and "Arcade history" in xml


def test_the_archive_round_trip_keeps_the_thread_and_refuses_a_forged_one(alice: User, bob: User) -> None:
    topic = completed_topic(alice)
    followup = answered(topic)
    data = json.loads(archive.dumps(archive.topic_data(topic)))
    assert [row["question"] for row in data["followups"]] == [followup.question]
    copy = archive.import_topic(data, bob)
    [imported] = copy.followups.all()
    assert (imported.question, imported.answer, imported.citations) == (
        followup.question,
        followup.answer,
        followup.citations,
    )
    bad = json.loads(json.dumps(data))
    bad["followups"][0]["citations"][0]["n"] = 40
    with pytest.raises(ArchiveError, match="not a follow-up question"):
        archive.import_topic(bad, bob)
    pending = json.loads(json.dumps(data))
    pending["followups"][0]["status"] = "running"
    with pytest.raises(ArchiveError):
        archive.import_topic(pending, bob)
    assert Topic.objects.filter(owner=bob).count() == 1  # nothing of the refused ones saved


# --- The websocket ---------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"])
async def test_the_socket_sends_the_follow_up_as_it_grows_then_the_answered_thread(alice: User) -> None:
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator

    from tests.research.pipeline.stages.answer.test_live_report import application, receive_all

    topic = await database_sync_to_async(completed_topic)(alice)
    followup = await database_sync_to_async(workflow.ask_followup)(topic, question="Where is it used?")
    comm = WebsocketCommunicator(application, f"/ws/topics/{topic.pk}/")
    comm.scope["user"] = alice
    comm.scope["cookies"] = {}
    assert (await comm.connect())[0]
    await comm.send_json_to({"since": 0})
    await receive_all(comm)
    await database_sync_to_async(FollowUp.objects.filter(pk=followup.pk).update)(status="running")
    text = "It is used <script>alert(1)</script> in"
    await database_sync_to_async(progress.save_followup_draft)(topic.pk, followup.pk, text)
    grown = await receive_all(comm)
    assert f'id="followup-{followup.pk}" hx-swap-oob="true"' in grown
    assert "It is used" in grown and "<script" not in grown  # sanitised like the report
    await database_sync_to_async(FollowUp.objects.filter(pk=followup.pk).update)(
        status="completed", answer="It is used in pretraining [2].", draft=""
    )
    message = "Follow-up %(number)s answered"
    await database_sync_to_async(progress.record_event)(topic, followups.STAGE, message, args={"number": 1})
    answered = await receive_all(comm)
    assert 'id="thread" hx-swap-oob="true"' in answered and 'href="#source-2"' in answered
    await comm.disconnect()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_progress_and_event_log_fold_once_the_report_is_ready(alice: User, alice_client: Client) -> None:
    running = Topic.objects.create(owner=alice, question="Still running", status=Topic.Status.RUNNING)
    page = alice_client.get(reverse("topic_detail", args=[running.pk])).content.decode()
    assert '<details class="work-panel" id="work-progress" open>' in page
    assert (
        '<section class="card thread" id="thread" hx-swap-oob="true" aria-labelledby="thread-title" hidden>'
        in page
    )
    done = completed_topic(alice)
    page = alice_client.get(reverse("topic_detail", args=[done.pk])).content.decode()
    assert '<details class="work-panel" id="work-progress">' in page  # folded: the report leads
    assert page.index('id="report"') < page.index('id="thread"') < page.index('id="progress"')


def test_the_task_answers_the_topics_queue_and_a_stopping_worker_hands_it_back(
    alice: User, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_q.models import OrmQ

    from mindsearch import lifecycle
    from research import tasks

    settings.SEARXNG_URL = ""
    settings.AITUNNEL_API_KEY = ""
    topic = completed_topic(alice)
    followup = workflow.ask_followup(topic, question="Where is Mixture of Tokens used?")
    monkeypatch.setattr(lifecycle, "stopping", lambda: True)
    queued = OrmQ.objects.count()
    assert tasks.followup(followup.pk) == []
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.QUEUED and OrmQ.objects.count() == queued + 1
    monkeypatch.setattr(lifecycle, "stopping", lambda: False)
    assert tasks.followup(followup.pk) == [followup.pk]
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.COMPLETED and followup.answer
    assert tasks.followup(10**9) == []  # a follow-up deleted meanwhile: nothing to do


def test_a_stopping_worker_leaves_a_follow_up_another_worker_is_answering(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextlib import contextmanager

    from mindsearch import lifecycle
    from research import tasks

    topic = completed_topic(alice)
    followup = workflow.ask_followup(topic, question="Where is Mixture of Tokens used?")
    FollowUp.objects.filter(pk=followup.pk).update(status=FollowUp.Status.RUNNING)

    @contextmanager
    def held_elsewhere(topic_id: int) -> Any:
        yield False

    monkeypatch.setattr(tasks, "topic_lock", held_elsewhere)
    monkeypatch.setattr(lifecycle, "stopping", lambda: True)
    assert tasks.followup(followup.pk) == []
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.RUNNING  # still the other worker's, its heartbeat going


def alice_client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_staff_see_the_thread_in_the_admin_with_the_topics_cost(alice: User) -> None:
    staff = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(staff)
    topic = completed_topic(alice)
    followup = answered(topic)
    call = LLMCall.objects.create(user=alice, topic=topic, stage="followup", model="m", prompt_tokens=7)
    LLMCall.objects.filter(pk=call.pk).update(created_at=followup.finished_at)  # while it was answered
    page = client.get(reverse("topic_detail", args=[topic.pk]))
    assert page.status_code == 404  # staff see the admin, not other people's topics
    thread = alice_client_for(alice).get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "LLM: 1 call, 7 tokens" in thread  # the follow-up's own cost, in its thread
    change = client.get(reverse("admin:research_topic_change", args=[topic.pk])).content.decode()
    assert followup.question in change and "1 calls" in change
    # The thread is shown read-only: no field of a follow-up to edit, no row to add.
    assert 'name="followups-0-question"' not in change and "followups-__prefix__" not in change
    listing = client.get(reverse("admin:research_followup_changelist")).content.decode()
    assert followup.question in listing
    detail = client.get(reverse("admin:research_followup_change", args=[followup.pk]))
    assert detail.status_code == 200 and followup.answer[:30] in detail.content.decode()


def test_a_question_with_markup_is_shown_as_text(alice: User, alice_client: Client) -> None:
    topic = completed_topic(alice)
    payload = '<img src=x onerror="alert(1)">Where?'
    workflow.ask_followup(topic, question=payload)
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert payload not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;Where?" in page


@pytest.mark.django_db(transaction=True)
def test_a_follow_up_waits_while_another_run_holds_the_topic(alice: User, settings: Any) -> None:
    """Two tasks for one topic never answer at once: the one that finds the lock taken leaves its
    follow-up queued, and the holder's run takes it before letting go."""
    import threading

    from django.db import connections

    from research import tasks
    from research.pipeline.run import LOCK_NAMESPACE

    settings.SEARXNG_URL = ""
    settings.AITUNNEL_API_KEY = ""
    topic = completed_topic(alice)
    followup = workflow.ask_followup(topic, question="Where is Mixture of Tokens used?")
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", [LOCK_NAMESPACE, topic.pk])
            held.set()
            release.wait(30)
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_NAMESPACE, topic.pk])
        connections["default"].close()

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(10)
    try:
        assert tasks.followup(followup.pk) == []
        followup.refresh_from_db()
        assert followup.status == FollowUp.Status.QUEUED
    finally:
        release.set()
        thread.join(10)
    assert answer_pending(topic.pk) == [followup.pk]
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.COMPLETED


def test_a_follow_up_on_a_topic_over_my_documents_is_cached_for_its_owner_alone(
    alice: User, loopback: World
) -> None:
    from research.models import CacheEntry

    topic = completed_topic(alice)
    Topic.objects.filter(pk=topic.pk).update(sources=Topic.Sources.BOTH)
    topic.refresh_from_db()
    answered(topic)
    entries = CacheEntry.objects.filter(description__startswith="followup:")
    assert entries.exists() and all(entry.owner_id == alice.pk for entry in entries)


def test_a_follow_up_with_nothing_to_say_fails_instead_of_an_empty_answer(alice: User, settings: Any) -> None:
    settings.SEARXNG_URL = ""
    settings.AITUNNEL_API_KEY = ""
    topic = completed_topic(alice)
    Document.objects.filter(topic=topic).update(text="* * *")
    followup = workflow.ask_followup(topic, question="Where is Mixture of Tokens used?")
    answer_pending(topic.pk)
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.FAILED and "No answer could be written" in followup.error
    assert followup.answer == ""


def test_a_follow_up_on_a_topic_with_a_picture_keeps_what_it_showed_and_its_privacy(
    alice: User, loopback: World
) -> None:
    """The picture's labels join the follow-up as they joined the topic's question, its
    description reaches the model as data, and every answer is cached for the owner alone."""
    from research.models import CacheEntry, TopicImage

    topic = completed_topic(alice)  # web only: without the picture nothing would be private
    TopicImage.objects.create(
        topic=topic, data=b"x", content_type="image/png", width=1, height=1, sha256="0" * 64,
        analysis=TopicImage.Analysis.DONE, labels=["Kazan Kremlin"], description="A white fortress.",
    )  # fmt: skip
    answered(topic)
    asked = [r.body.decode() for r in loopback.llm.requests]
    followup_asks = [body for body in asked if "Where is Mixture of Tokens used?" in body]
    assert followup_asks and all("Kazan Kremlin" in body for body in followup_asks)
    assert any("A white fortress." in body for body in followup_asks)
    entries = CacheEntry.objects.filter(created_at__gte=topic.created_at)
    assert entries.exists() and all(entry.owner_id == alice.pk for entry in entries)


def test_a_short_follow_up_is_answered_in_the_topics_language() -> None:
    russian = Topic(question="Какие модели смешивают токены?")
    assert followups.answer_language("GPT-4o?", russian) == "русский"
    assert followups.answer_language("What about its cost?", russian).startswith("английский")


def test_the_share_link_does_not_show_what_a_follow_up_cost(
    alice: User, alice_client: Client, loopback: World
) -> None:
    topic = completed_topic(alice)
    answered(topic)
    own = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    _link, token = ShareLink.issue(topic)
    shared = Client().get(reverse("shared_report", args=[token])).content.decode()

    def meta(page: str) -> str:
        return page.split('class="muted followup-meta"', 1)[1].split("</p>", 1)[0]

    assert "LLM: " in meta(own) and "LLM: " not in meta(shared)


def test_an_unexpected_error_is_logged_not_shown(alice: User, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("connection to 10.0.0.5 refused: password authentication failed")

    monkeypatch.setattr(followups, "_answer", broken)
    topic = completed_topic(alice)
    followup = workflow.ask_followup(topic, question="What else?")
    answer_pending(topic.pk)
    followup.refresh_from_db()
    assert followup.status == FollowUp.Status.FAILED
    assert "10.0.0.5" not in followup.error and "server log" in followup.error
