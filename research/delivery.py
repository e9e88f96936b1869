"""Delivering what changed in a scheduled topic: by e-mail and by signed webhook.

`deliver` makes one `Delivery` row per channel and version (a unique constraint: a re-run of the
hook never sends twice) and hands each to a worker (`send`). A failed try is tried again after
DELIVERY_RETRY_BASE_SECONDS × 4ⁿ (1, 4, 16… minutes) by the minute's `retry_due`, up to
DELIVERY_MAX_ATTEMPTS; then it is given up and the owner is told once (`notify_owner`).

E-mail goes only to an address its owner verified (mindsearch/email_address.py), in the topic's
language, with a text and an HTML part, the report's link and an unsubscribe link that works
without signing in (and the one-click List-Unsubscribe header of RFC 8058).
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.core import signing
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django_q.tasks import async_task

from mindsearch.clients import webhook
from mindsearch.email_address import absolute, mail_configured, verified_address
from research import versions
from research.models import Delivery, Report, Topic, TopicSchedule

log = logging.getLogger(__name__)

UNSUBSCRIBE_SALT = "mindsearch.unsubscribe"


class DeliveryError(Exception):
    """A delivery could not be made now; the message says why."""


def check_webhook_address(url: str) -> None:
    """Refuse a webhook address deliveries must never go to (DeliveryError with the reason)."""
    try:
        webhook.check_address(url)
    except webhook.WebhookError as exc:
        raise DeliveryError(str(exc)) from None


# --- Making deliveries ----------------------------------------------------------------------------


def channels_of(schedule: TopicSchedule) -> list[str]:
    found: list[str] = []
    if schedule.email and mail_configured() and verified_address(schedule.owner):
        found.append(Delivery.Channel.EMAIL)
    if schedule.webhook_url:
        found.append(Delivery.Channel.WEBHOOK)
    return found


def deliver(schedule: TopicSchedule, topic: Topic) -> list[Delivery]:
    """One delivery per channel of the schedule for this version, each sent by a worker."""
    made = []
    for channel in channels_of(schedule):
        item, created = Delivery.objects.get_or_create(schedule=schedule, topic=topic, channel=channel)
        if created:
            made.append(item)
            transaction.on_commit(partial(async_task, "research.delivery.send", item.pk, group="delivery"))
    return made


def retry_due() -> int:
    """Hand every pending delivery whose next try has come to a worker again."""
    due = Delivery.objects.filter(status=Delivery.Status.PENDING, next_try_at__lte=timezone.now())
    ids = list(due.values_list("id", flat=True)[:50])
    for pk in ids:
        Delivery.objects.filter(pk=pk).update(next_try_at=None)  # not handed out twice
        async_task("research.delivery.send", pk, group="delivery")
    return len(ids)


def send(delivery_id: int) -> str:
    """Try one delivery once; returns its status after the try. The row is claimed (its try
    counted) in one short transaction and the outcome saved in another: the mail or the POST,
    up to its timeout, holds no lock and no transaction open."""
    with transaction.atomic():
        item = (
            Delivery.objects.select_for_update(skip_locked=True)
            .select_related("schedule", "topic", "schedule__owner")
            .filter(pk=delivery_id, status=Delivery.Status.PENDING)
            .first()
        )
        if item is None:
            return "gone"
        item.attempts += 1
        item.next_try_at = None  # claimed: not handed out again while this try runs
        item.save(update_fields=["attempts", "next_try_at"])
    try:
        _send(item)
    except Exception as exc:  # every failure is retried, then given up: none is lost silently
        with transaction.atomic():
            _retry_or_give_up(item, str(exc) or type(exc).__name__)
            item.save()
    else:
        item.status, item.sent_at, item.last_error = Delivery.Status.SENT, timezone.now(), ""
        item.save(update_fields=["status", "sent_at", "last_error"])
    return item.status


def _send(item: Delivery) -> None:
    if item.channel == Delivery.Channel.EMAIL:
        address = verified_address(item.schedule.owner)
        if not address:
            raise DeliveryError("the owner's e-mail address is not verified")
        news_email(item.schedule, item.topic, address).send()
    else:
        body = json.dumps(webhook_body(item.schedule, item.topic), ensure_ascii=False).encode()
        webhook.post(item.schedule.webhook_url, body, item.schedule.webhook_secret, "topic.version")


def _retry_or_give_up(item: Delivery, error: str) -> None:
    item.last_error = error[:2000]
    if item.attempts < settings.DELIVERY_MAX_ATTEMPTS:
        pause = settings.DELIVERY_RETRY_BASE_SECONDS * 4 ** (item.attempts - 1)
        item.next_try_at = timezone.now() + timedelta(seconds=pause)
        return
    item.status, item.next_try_at = Delivery.Status.GIVEN_UP, None
    channel = item.get_channel_display()
    schedule = item.schedule
    schedule.last_error = translation.gettext(
        "Delivery by %(channel)s was given up after %(n)s tries: %(error)s"
    ) % {
        "channel": channel,
        "n": item.attempts,
        "error": error,
    }
    schedule.save(update_fields=["last_error"])
    if item.channel != Delivery.Channel.EMAIL:  # a failing mailer cannot mail that it fails
        transaction.on_commit(lambda: notify_owner(schedule.pk, schedule.last_error))


# --- What is sent ---------------------------------------------------------------------------------


def unsubscribe_token(schedule: TopicSchedule) -> str:
    return signing.dumps({"s": schedule.pk}, salt=UNSUBSCRIBE_SALT)


def unsubscribe(token: str) -> TopicSchedule | None:
    """Stop e-mails of the schedule the token names; None for a bad token or a gone schedule."""
    try:
        data = signing.loads(token, salt=UNSUBSCRIBE_SALT)
    except signing.BadSignature:
        return None
    schedule = TopicSchedule.objects.filter(pk=data.get("s")).first()
    if schedule is not None and schedule.email:
        schedule.email = False
        schedule.save(update_fields=["email"])
    return schedule


def news_context(schedule: TopicSchedule, topic: Topic) -> dict[str, Any]:
    report = Report.objects.filter(topic=topic).first()
    changes = (report.changes if report is not None else None) or {}
    unsubscribe_link = absolute(reverse("schedule_unsubscribe", args=[unsubscribe_token(schedule)]))
    return {
        "topic": topic,
        **versions.changes_context(changes),
        "report_link": absolute(reverse("topic_detail", args=[topic.pk])),
        "unsubscribe_link": unsubscribe_link,
    }


def news_email(schedule: TopicSchedule, topic: Topic, address: str) -> EmailMultiAlternatives:
    context = news_context(schedule, topic)
    with translation.override(topic.language if topic.language in ("ru", "en") else "en"):
        subject = translation.gettext("What changed: %(question)s") % {"question": topic.question[:120]}
        message = EmailMultiAlternatives(
            subject=" ".join(subject.split()),
            body=render_to_string("email/changes.txt", context),
            to=[address],
            headers={
                "List-Unsubscribe": f"<{context['unsubscribe_link']}>",
                "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
            },
        )
        message.attach_alternative(render_to_string("email/changes.html", context), "text/html")
    return message


def webhook_body(schedule: TopicSchedule, topic: Topic) -> dict[str, Any]:
    report = Report.objects.filter(topic=topic).first()
    return {
        "event": "topic.version",
        "topic": {"id": topic.pk, "series": versions.series_of(topic), "question": topic.question},
        "report_url": absolute(reverse("topic_detail", args=[topic.pk])),
        "finished_at": topic.finished_at.isoformat() if topic.finished_at else None,
        "changes": (report.changes if report is not None else None) or {},
    }


# --- Telling the owner of trouble -----------------------------------------------------------------


def notify_failure(schedule_id: int) -> None:
    schedule = TopicSchedule.objects.filter(pk=schedule_id).first()
    if schedule is not None:
        notify_owner(schedule.pk, schedule.last_error)


def notify_owner(schedule_id: int, reason: str) -> bool:
    """One e-mail to the owner about trouble with a schedule (when they have a verified address;
    the topic page shows the same reason in any case). True when mailed."""
    schedule = TopicSchedule.objects.select_related("owner").filter(pk=schedule_id).first()
    if schedule is None or not mail_configured():
        return False
    address = verified_address(schedule.owner)
    topic = (
        Topic.objects.filter(pk=schedule.series).first()
        or Topic.objects.filter(series=schedule.series).first()
    )
    if not address or topic is None:
        return False
    context = {
        "topic": topic,
        "reason": reason,
        "report_link": absolute(reverse("topic_detail", args=[topic.pk])),
    }
    with translation.override(topic.language if topic.language in ("ru", "en") else "en"):
        subject = translation.gettext("Scheduled research needs attention: %(question)s") % {
            "question": topic.question[:120]
        }
        message = EmailMultiAlternatives(
            subject=" ".join(subject.split()),
            body=render_to_string("email/trouble.txt", context),
            to=[address],
        )
    try:
        message.send()
    except Exception:  # the page says it too; a mailer that is down is not a failure to retry
        log.warning("could not mail schedule %s's owner about: %s", schedule_id, reason, exc_info=True)
        return False
    return True
