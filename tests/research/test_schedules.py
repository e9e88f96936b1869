"""Scheduled research and its deliveries (research/schedules.py, research/delivery.py), with a
real SMTP server (aiosmtpd) and a webhook receiver on loopback."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.module_loading import import_string

from mindsearch.clients import webhook
from mindsearch.models import EmailAddress
from research import delivery, schedules, tasks
from research.models import Delivery, LLMCall, Report, SubQuery, Topic, TopicSchedule
from tests.support.fakes import FakeService, Request, Response, html_page
from tests.support.world import World

pytestmark = pytest.mark.django_db

NEW_PAGE = (
    "mot-benchmark",
    "Mixture of Tokens benchmark 2026",
    "mixture tokens что такое применение используется улучшения improvements смесь токенов",
    10,
    "A 2026 benchmark measured Mixture of Tokens decoding three times faster on long documents. "
    "The speed-up held across model sizes.",
)
DROPPED_SLUG = "mot-uses"


class Inbox:
    """What the loopback SMTP server received, as parsed messages."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd's name
        self.messages.append(message_from_bytes(envelope.content, policy=policy.default))
        return "250 Message accepted for delivery"

    def text(self, message: EmailMessage) -> str:
        part = message.get_body(preferencelist=("plain",))
        return part.get_content() if part is not None else ""


@pytest.fixture
def inbox(settings: Any) -> Iterator[Inbox]:
    """A real SMTP server on a free loopback port, with Django's SMTP backend pointed at it."""
    handler = Inbox()
    with socket.socket() as probe:  # aiosmtpd checks it is up by connecting: it needs a real port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.MINDSEARCH_PUBLIC_URL = "http://testserver"
    yield handler
    controller.stop()


Work = Callable[..., Any]


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Callable) -> Work:
    """`worker(fn, *args)` calls fn; the tasks it queues for a worker run at once, in this
    thread, when their transaction commits (and those they queue, in turn)."""

    def run_now(name: str, *args: Any, **kwargs: Any) -> None:
        import_string(name)(*args)

    monkeypatch.setattr(tasks, "async_task", run_now)
    monkeypatch.setattr(delivery, "async_task", run_now)

    def work(function: Callable[..., Any], *args: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return function(*args)

    return work


def verified(user: User, email: str = "alice@example.org") -> None:
    EmailAddress.objects.create(user=user, email=email, verified_at=timezone.now())


def one_claim_per_source(user: str) -> str:
    """A report that states each source's first sentence, citing it: a claim per page."""
    blocks = re.findall(r"^\[(\d+)\] [^\n]*\n[^\n]*\n\n(.+?)(?=\n\n\[\d+\] |\n\n\S+:|\Z)", user, re.M | re.S)
    lines = []
    for n, text in blocks:
        first = re.split(r"(?<=[.!?])\s", re.sub(r"^#.*\n+", "", text.strip()).strip(), maxsplit=1)[0]
        lines.append(f"{first.rstrip('.')} [{n}].")
    return "# Mixture of Tokens\n\n" + " ".join(lines) + "\n"


def researched(owner: User, world: World) -> Topic:
    world.script.answer = one_claim_per_source  # type: ignore[method-assign]
    topic = Topic.objects.create(owner=owner, question="Расскажи об Mixture of Tokens", auto_approve=True)
    tasks.plan(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED, topic.error
    return topic


def change_the_web(world: World) -> None:
    """One page gone (its claim must go), one new page with a new fact (its claim must come)."""
    dropped = next(page for page in world.script.pages if page[0] == DROPPED_SLUG)
    world.script.pages.remove(dropped)
    world.script.pages.append(NEW_PAGE)
    slug, title, _keywords, _score, text = NEW_PAGE
    world.web.routes[("GET", f"/pages/{slug}")] = html_page(title, f"<h1>{title}</h1><p>{text}</p>")
    url = f"{world.web.url}pages/{slug}?utm_source=searx"
    reader = world.reader.fallback
    assert reader is not None

    def read(request: Request) -> Any:
        if request.path.endswith(url) or url in request.raw_path:
            return Response(200, f"Title: {title}\n\nMarkdown Content:\n# {title}\n\n{text}")
        return reader(request)

    world.reader.fallback = read


def run_schedule(schedule: TopicSchedule, worker: Work) -> Topic:
    TopicSchedule.objects.filter(pk=schedule.pk).update(next_run_at=timezone.now() - timedelta(seconds=1))
    assert worker(schedules.run_due) == 1
    schedule.refresh_from_db()
    assert schedule.last_topic is not None
    return Topic.objects.get(pk=schedule.last_topic.pk)


def test_a_weekly_topic_reports_exactly_what_changed_and_mails_it_once(
    alice: User, loopback: World, inbox: Inbox, worker: Work
) -> None:
    verified(alice)
    first = researched(alice, loopback)
    schedule = schedules.save_schedule(
        first, alice, every=TopicSchedule.Every.WEEK, email=True, webhook_url="", deliver_unchanged=False
    )
    assert schedule.next_run_at > timezone.now() + timedelta(days=6)
    change_the_web(loopback)

    second = run_schedule(schedule, worker)
    assert second.status == Topic.Status.COMPLETED, second.error
    assert (second.series, second.previous_version_id) == (first.pk, first.pk)
    changes = Report.objects.get(topic=second).changes
    assert changes is not None
    added = [claim["text"] for claim in changes["claims"]["added"]]
    removed = [claim["text"] for claim in changes["claims"]["removed"]]
    assert added == [
        "A 2026 benchmark measured Mixture of Tokens decoding three times faster on long documents."
    ]
    assert len(removed) == 1 and "pretraining" in removed[0], removed
    assert changes["claims"]["changed"] == []

    # Only what is new cost model calls: the plan and the queries came from the cache.
    fresh = list(LLMCall.objects.filter(topic=second, cache_hit=False).values_list("stage", flat=True))
    assert "plan" not in fresh and "queries" not in fresh, fresh
    assert fresh.count("summarise") == 1, fresh
    assert LLMCall.objects.filter(topic=second, cache_hit=True).exists()

    assert len(inbox.messages) == 1
    mail = inbox.messages[0]
    assert mail["To"] == "alice@example.org" and "Что изменилось" in mail["Subject"]  # the topic's language
    body = inbox.text(mail)
    assert "three times faster on long documents" in body and "pretraining" in body
    assert mail.get_body(preferencelist=("html",)) is not None
    link = re.search(r"http://testserver(/unsubscribe/\S+/)", body)
    assert link is not None and str(mail["List-Unsubscribe"]).strip() == f"<http://testserver{link.group(1)}>"
    anonymous = Client()
    assert "Stop these e-mails?" in anonymous.get(link.group(1)).content.decode()
    assert anonymous.post(link.group(1)).status_code == 200
    schedule.refresh_from_db()
    assert schedule.email is False

    # Nothing new on the web: the next version changes nothing and nothing is sent.
    schedule.email = True
    schedule.save()
    third = run_schedule(schedule, worker)
    assert third.status == Topic.Status.COMPLETED
    third_changes = Report.objects.get(topic=third).changes
    assert third_changes is not None and third_changes["empty"] is True
    assert len(inbox.messages) == 1
    assert not Delivery.objects.filter(topic=third).exists()


def completed_version(owner: User) -> tuple[Topic, TopicSchedule]:
    first = Topic.objects.create(owner=owner, question="q", status=Topic.Status.COMPLETED)
    Report.objects.create(
        topic=first,
        markdown="Old fact [1].\n",
        sources=[{"n": 1, "title": "A", "url": "https://a.example/", "document_id": None}],
    )
    second = Topic.objects.create(
        owner=owner, question="q", status=Topic.Status.COMPLETED, series=first.pk, previous_version=first
    )
    Report.objects.create(
        topic=second,
        markdown="A brand new fact about tokens [1].\n",
        sources=[{"n": 1, "title": "B", "url": "https://b.example/", "document_id": None}],
    )
    schedule = TopicSchedule.objects.create(
        owner=owner,
        series=first.pk,
        next_run_at=timezone.now() + timedelta(days=7),
        last_topic=second,
        email=False,
    )
    return second, schedule


def test_a_webhook_receives_a_signed_delivery(alice: User, settings: Any, worker: Work) -> None:
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = True  # the receiver is on loopback
    second, schedule = completed_version(alice)
    with FakeService({("POST", "/hook"): lambda request: Response(204)}) as receiver:
        schedules.save_schedule(
            second,
            alice,
            every="week",
            email=False,
            webhook_url=f"{receiver.url}hook",
            deliver_unchanged=False,
        )
        schedule.refresh_from_db()
        worker(schedules.after_run, second.pk)
        assert len(receiver.requests) == 1
    request = receiver.requests[0]
    headers = {name.lower(): value for name, value in request.headers.items()}
    assert webhook.verify(schedule.webhook_secret, request.body, headers["x-mindsearch-signature"])
    assert not webhook.verify("another secret", request.body, headers["x-mindsearch-signature"])
    payload = request.json()
    assert payload["event"] == "topic.version" and payload["topic"]["id"] == second.pk
    assert payload["changes"]["claims"]["added"][0]["text"] == "A brand new fact about tokens."
    assert Delivery.objects.get(topic=second).status == Delivery.Status.SENT


def test_a_failing_receiver_is_retried_then_given_up_with_one_notice(
    alice: User, settings: Any, inbox: Inbox, worker: Work
) -> None:
    settings.DELIVERY_MAX_ATTEMPTS = 3
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = True  # the receiver is on loopback
    verified(alice)
    second, schedule = completed_version(alice)
    with FakeService({("POST", "/hook"): lambda request: Response(500, "down")}) as receiver:
        schedule.webhook_url, schedule.webhook_secret = f"{receiver.url}hook", "s" * 64
        schedule.save()
        worker(schedules.after_run, second.pk)
        item = Delivery.objects.get(topic=second)
        assert (item.status, item.attempts) == (Delivery.Status.PENDING, 1)
        assert item.next_try_at is not None and item.next_try_at > timezone.now() + timedelta(seconds=50)
        for _try in range(4):
            Delivery.objects.filter(pk=item.pk, status="pending").update(next_try_at=timezone.now())
            worker(delivery.retry_due)
        assert len(receiver.requests) == 3
    item.refresh_from_db()
    assert (item.status, item.attempts) == (Delivery.Status.GIVEN_UP, 3)
    assert "HTTP 500" in item.last_error
    assert len(inbox.messages) == 1 and "требует внимания" in inbox.messages[0]["Subject"]
    schedule.refresh_from_db()
    assert "given up after 3 tries" in schedule.last_error


def test_failed_scheduled_runs_are_retried_later_and_told_once(
    alice: User, inbox: Inbox, worker: Work
) -> None:
    verified(alice)
    second, schedule = completed_version(alice)
    second.fail("The search service is down.")
    worker(schedules.after_run, second.pk)
    schedule.refresh_from_db()
    first_pause = schedule.next_run_at - timezone.now()
    assert schedule.failures == 1 and timedelta(minutes=55) < first_pause <= timedelta(hours=1)
    worker(schedules.after_run, second.pk)
    schedule.refresh_from_db()
    assert schedule.failures == 2 and schedule.next_run_at - timezone.now() > timedelta(hours=1, minutes=55)
    assert len(inbox.messages) == 1
    assert "The search service is down." in inbox.text(inbox.messages[0])


def test_a_due_schedule_respects_the_owners_limits_and_running_versions(
    alice: User, settings: Any, worker: Work, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks, "async_task", lambda *args, **kwargs: None)  # queued, not run
    second, schedule = completed_version(alice)
    SubQuery.objects.create(topic=second, position=1, text="tokens")
    settings.RESEARCH_MAX_ACTIVE_TOPICS = 1
    Topic.objects.create(owner=alice, question="another", status=Topic.Status.RUNNING)
    TopicSchedule.objects.filter(pk=schedule.pk).update(next_run_at=timezone.now())
    assert schedules.run_due() == 0
    schedule.refresh_from_db()
    assert schedule.failures == 1 and schedule.last_error and schedule.next_run_at > timezone.now()

    Topic.objects.filter(status=Topic.Status.RUNNING).delete()
    TopicSchedule.objects.filter(pk=schedule.pk).update(next_run_at=timezone.now(), paused=True)
    assert schedules.run_due() == 0
    TopicSchedule.objects.filter(pk=schedule.pk).update(paused=False)
    assert schedules.run_due() == 1
    schedule.refresh_from_db()
    third = schedule.last_topic
    assert (
        third is not None and third.status == Topic.Status.QUEUED and third.previous_version_id == second.pk
    )
    TopicSchedule.objects.filter(pk=schedule.pk).update(next_run_at=timezone.now())
    assert schedules.run_due() == 0  # the newest version is still running: it waits
    schedule.refresh_from_db()
    assert schedule.last_topic_id == third.pk and schedule.next_run_at > timezone.now()

    Topic.objects.filter(owner=alice).delete()
    TopicSchedule.objects.filter(pk=schedule.pk).update(next_run_at=timezone.now())
    schedules.run_due()
    assert not TopicSchedule.objects.filter(pk=schedule.pk).exists()


def test_next_time_keeps_the_day_of_the_month_where_it_can() -> None:
    jan31 = datetime(2027, 1, 31, 9, 0, tzinfo=UTC)
    assert schedules.next_time("month", jan31) == datetime(2027, 2, 28, 9, 0, tzinfo=UTC)
    assert schedules.next_time("month", datetime(2026, 12, 5, tzinfo=UTC)) == datetime(2027, 1, 5, tzinfo=UTC)
    assert schedules.next_time("day", jan31) == jan31 + timedelta(days=1)
    assert schedules.next_time("week", jan31, "0 6 * * 1") == datetime(2027, 2, 1, 6, 0, tzinfo=UTC)
    with pytest.raises(ValueError):
        schedules.check_cron("every tuesday")


def test_the_schedule_form_on_the_topic_page(alice: User, alice_client: Client, settings: Any) -> None:
    settings.EMAIL_BACKEND, settings.EMAIL_HOST = "django.core.mail.backends.smtp.EmailBackend", ""
    second, schedule = completed_version(alice)
    schedule.delete()
    page = alice_client.get(reverse("topic_detail", args=[second.pk])).content.decode()
    assert "Keep it current" in page and "cannot send e-mail" in page
    assert 'name="cron"' not in page  # staff only
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False
    refused = alice_client.post(
        reverse("schedule_save", args=[second.pk]),
        {"every": "day", "email": "on", "webhook_url": "http://127.0.0.1:9/hook"},
    )
    assert refused.status_code == 400 and "Deliveries cannot go there" in refused.content.decode()
    assert not TopicSchedule.objects.exists()
    saved = alice_client.post(reverse("schedule_save", args=[second.pk]), {"every": "day", "email": "on"})
    assert saved.status_code == 302
    schedule = TopicSchedule.objects.get()
    assert schedule.series == second.series and schedule.every == "day"
    alice_client.post(reverse("schedule_pause", args=[second.pk]))
    schedule.refresh_from_db()
    assert schedule.paused
    assert "paused" in alice_client.get(reverse("topic_detail", args=[second.pk])).content.decode()


def test_the_operator_sees_and_pauses_every_schedule(alice: User, admin_client: Client) -> None:
    _second, schedule = completed_version(alice)
    listing = admin_client.get(reverse("admin:research_topicschedule_changelist"))
    assert listing.status_code == 200 and str(schedule.series) in listing.content.decode()
    admin_client.post(
        reverse("admin:research_topicschedule_changelist"),
        {"action": "pause", "_selected_action": [schedule.pk]},
    )
    schedule.refresh_from_db()
    assert schedule.paused


def test_the_admin_names_each_schedules_topic_and_the_deliveries(alice: User, admin_client: Client) -> None:
    second, _schedule = completed_version(alice)
    Topic.objects.filter(pk=second.pk).update(question="Where do puffins nest in winter?")
    listing = admin_client.get(reverse("admin:research_topicschedule_changelist")).content.decode()
    assert "Where do puffins nest in winter?" in listing
    index = admin_client.get(reverse("admin:index")).content.decode()
    assert ">Deliveries<" in index and "Deliverys" not in index


def test_an_address_is_verified_by_the_link_mailed_to_it(
    alice: User, alice_client: Client, inbox: Inbox
) -> None:
    response = alice_client.post(reverse("email_settings"), {"email": "alice@example.org"})
    assert response.status_code == 302
    assert len(inbox.messages) == 1
    link = re.search(r"http://testserver(/email/verify/\S+/)", inbox.text(inbox.messages[0]))
    assert link is not None
    assert EmailAddress.objects.get(user=alice).verified is False
    # Asking again at once does not mail again.
    again = alice_client.post(reverse("email_settings"), {"email": "alice@example.org"})
    assert again.status_code == 400 and len(inbox.messages) == 1
    assert "Address confirmed" in Client().get(link.group(1)).content.decode()
    assert EmailAddress.objects.get(user=alice).verified is True
    assert Client().get("/email/verify/forged-token/").status_code == 400
    # A changed address needs its own link.
    EmailAddress.objects.filter(user=alice).update(sent_at=None)
    alice_client.post(reverse("email_settings"), {"email": "new@example.org"})
    assert EmailAddress.objects.get(user=alice).verified is False
    assert Client().get(link.group(1)).status_code == 400
