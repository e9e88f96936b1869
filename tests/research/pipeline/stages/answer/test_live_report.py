"""The report written live: the answer stage streams the LLM's text into a `ReportDraft` (throttled),
the page and the websocket show it as it grows, a reload mid-stream shows the text so far, and
the finished report replaces it; a stream that breaks off never leaves half a report."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research import progress
from research.models import Report, ReportDraft, RunEvent, Topic
from research.pipeline.run import plan_topic, run_topic
from research.pipeline.stages import answer
from research.pipeline.stages.answer import report_writer
from research.routing import websocket_urlpatterns
from tests.support.fakes import Fault, Pace
from tests.support.world import TOPIC, World, loopback_world, prompt_kind

CHAT = "/v1/chat/completions"


def answer_tokens(messages: list[dict], text: str) -> int:
    """Only the report takes time to write (about 1.2 s); every other answer comes at once."""
    return 60 if prompt_kind(messages[0]["content"]) == "answer" else 0


@pytest.fixture
def slow_writer(settings: Any) -> Iterator[World]:
    with loopback_world(settings, llm_pace=Pace(tokens_per_second=50, tokens=answer_tokens)) as w:
        yield w


class Recorder:
    """A run listener like the console's: every event, and every piece of the report's text."""

    def __init__(self) -> None:
        self.events: list[RunEvent] = []
        self.texts: list[str] = []
        self.on_event: Any = None

    def __call__(self, event: RunEvent) -> None:
        self.events.append(event)
        if self.on_event:
            self.on_event(event)

    def report_text(self, text: str) -> None:
        self.texts.append(text)


@pytest.fixture
def drafts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every draft saved, with its version, as the page would read it."""
    saved: list[tuple[str, int]] = []
    real = progress.save_draft

    def recording(topic_id: int, text: str) -> int:
        version = real(topic_id, text)
        saved.append((ReportDraft.objects.get(topic_id=topic_id).text, version))
        return version

    monkeypatch.setattr(progress, "save_draft", recording)
    return saved


def research(owner: User, recorder: Recorder) -> Topic:
    topic = Topic.objects.create(owner=owner, question=TOPIC, auto_approve=True)
    plan_topic(topic.pk, [recorder])
    topic.refresh_from_db()
    if topic.status == Topic.Status.AWAITING_APPROVAL:
        topic.set_status(Topic.Status.QUEUED)
    run_topic(topic.pk, [recorder])
    topic.refresh_from_db()
    return topic


@pytest.mark.django_db
def test_the_report_is_saved_as_it_grows_then_replaced_by_the_checked_report(
    alice: User, slow_writer: World, drafts: list[tuple[str, int]]
) -> None:
    recorder = Recorder()
    topic = research(alice, recorder)
    assert topic.status == Topic.Status.COMPLETED
    final_text = recorder.texts[-1]
    # The console's listener heard every piece (about four characters each)…
    assert len(recorder.texts) >= len(final_text) // 4 - 1
    assert all(final_text.startswith(text) for text in recorder.texts)
    # …the page's draft was saved far less often (throttled), growing, each a prefix of the answer,
    # and the whole text last.
    assert 3 <= len(drafts) < len(recorder.texts) / 5, len(drafts)
    texts = [text for text, _version in drafts]
    assert all(final_text.startswith(text) for text in texts)
    assert [len(t) for t in texts] == sorted(len(t) for t in texts) and texts[-1] == final_text
    assert [version for _text, version in drafts] == list(range(1, len(drafts) + 1))
    # The finished report (citations cleaned, sources listed) replaced the draft.
    assert not ReportDraft.objects.filter(topic=topic).exists()
    report = Report.objects.get(topic=topic)
    assert "[99]" in final_text and "[99]" not in report.markdown
    assert "## Источники" in report.markdown


@pytest.mark.django_db
def test_a_cached_answer_appears_at_once_as_one_draft(
    alice: User, slow_writer: World, drafts: list[tuple[str, int]]
) -> None:
    research(alice, Recorder())
    first_run = len(drafts)
    recorder = Recorder()
    topic = research(alice, recorder)
    assert topic.status == Topic.Status.COMPLETED
    assert len(drafts) == first_run + 1  # the whole cached text in one go
    assert recorder.texts == [drafts[-1][0]]


@pytest.mark.django_db
def test_a_stream_cut_once_is_written_again_in_full(
    alice: User, slow_writer: World, drafts: list[tuple[str, int]]
) -> None:
    recorder = Recorder()

    def cut_the_answer(event: RunEvent) -> None:
        if event.stage == answer.STAGE and event.done == 0:  # "Writing the report…"
            slow_writer.llm.inject(Fault.cut_stream(12, "drop", path=CHAT))

    recorder.on_event = cut_the_answer
    topic = research(alice, recorder)
    final_text = recorder.texts[-1]
    texts = recorder.texts
    restarts = [i for i in range(1, len(texts)) if len(texts[i]) < len(texts[i - 1])]
    assert len(restarts) == 1 and len(texts[restarts[0] - 1]) == 11 * 4  # cut after 11 pieces
    report = Report.objects.get(topic=topic)
    assert report.model == "test-model"
    assert report_writer.clean_citations(final_text, len(report.sources)) in report.markdown


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["drop", "end", "error"])
def test_a_stream_cut_every_time_leaves_no_half_report(
    alice: User, slow_writer: World, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mindsearch.clients import llm

    monkeypatch.setattr(llm, "BACKOFF_SECONDS", 0.01)
    recorder = Recorder()

    def cut_the_answer(event: RunEvent) -> None:
        if event.stage == answer.STAGE and event.done == 0:
            slow_writer.llm.inject(*(Fault.cut_stream(12, how, path=CHAT) for _ in range(llm.MAX_ATTEMPTS)))

    recorder.on_event = cut_the_answer
    topic = research(alice, recorder)
    half = recorder.texts[-1]
    assert 0 < len(half) < 60  # the LLM got some way every time, then broke off
    assert topic.status == Topic.Status.COMPLETED
    report = Report.objects.get(topic=topic)
    assert report.model == ""  # the extractive engine wrote it, said so, and the half text is gone
    assert half not in report.markdown
    assert not ReportDraft.objects.filter(topic=topic).exists()
    warnings = [e.message for e in recorder.events if e.level == RunEvent.Level.WARNING]
    assert any("could not write the report" in message and "4 attempts" in message for message in warnings)


# --- The page --------------------------------------------------------------------------------------

PARTIAL = (
    "# Mixture of Tokens\n\n## Введение\n\nMixture of Tokens — непрерывная альтернатива MoE [1]."
    "\n\n<script>alert('x')</script><img src=x onerror=alert(1)> [evil](javascript:alert(1)) and mo"
)


@pytest.mark.django_db
def test_a_reload_mid_stream_shows_the_text_so_far_sanitised(alice: User, alice_client: Client) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC, status=Topic.Status.RUNNING)
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert 'data-state="waiting"' in page
    progress.save_draft(topic.pk, PARTIAL)
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert 'data-state="writing"' in page
    assert "<h2>Введение</h2>" in page and "непрерывная альтернатива MoE [1]." in page
    card = page.split('id="report"')[1].split("</section>")[0]
    assert "<script" not in card and "onerror" not in card and "javascript:" not in card
    assert card.rstrip().endswith("</article>") and "and mo" in card
    # The text grows: the next reload shows more (the page's own fragment cache does not hide it).
    progress.save_draft(topic.pk, PARTIAL + "re text.")
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "and more text." in page


@pytest.mark.django_db
def test_a_draft_is_never_shown_once_the_run_has_ended(alice: User, alice_client: Client) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC, status=Topic.Status.RUNNING)
    progress.save_draft(topic.pk, PARTIAL)
    topic.fail("The worker stopped")
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "непрерывная альтернатива" not in page
    assert "The run failed before a report was written." in page


@pytest.mark.django_db
def test_a_finished_report_leads_the_page_and_the_title_says_so(alice: User, alice_client: Client) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC, status=Topic.Status.COMPLETED)
    Report.objects.create(topic=topic, markdown="# Done\n\nText [1].\n\n## Sources\n\n1. x", sources=[])
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "<title>Report ready · " in page
    assert page.index('id="report"') < page.index('id="plan"') < page.index('id="progress"')
    assert '<details class="work-panel" id="work-plan">' in page  # folded
    assert '<details class="work-panel" id="work-sources">' in page


# --- The websocket ---------------------------------------------------------------------------------

application = URLRouter(websocket_urlpatterns)


async def receive_all(comm: WebsocketCommunicator, quiet: float = 0.7) -> str:
    chunks = []
    while not await comm.receive_nothing(timeout=quiet):
        chunks.append(await comm.receive_from())
    return "".join(chunks)


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"])
async def test_the_socket_sends_the_draft_on_connect_and_as_it_grows(alice: User) -> None:
    topic = await database_sync_to_async(Topic.objects.create)(
        owner=alice, question=TOPIC, status=Topic.Status.RUNNING
    )
    await database_sync_to_async(progress.save_draft)(topic.pk, "# Title\n\nFirst words")
    comm = WebsocketCommunicator(application, f"/ws/topics/{topic.pk}/")
    comm.scope["user"] = alice
    comm.scope["cookies"] = {}
    assert (await comm.connect())[0]
    await comm.send_json_to({"since": 0})
    first = await receive_all(comm)
    assert 'id="report"' in first and "First words" in first and 'data-state="writing"' in first
    await database_sync_to_async(progress.save_draft)(topic.pk, "# Title\n\nFirst words, then <b>more</b>")
    grown = await receive_all(comm)
    assert "First words, then <b>more</b>" in grown and grown.count('id="report"') == 1
    await database_sync_to_async(progress.drop_draft)(topic.pk)
    dropped = await receive_all(comm)
    assert 'data-state="waiting"' in dropped and "First words" not in dropped
    await comm.disconnect()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
