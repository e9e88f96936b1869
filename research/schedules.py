"""Topics researched again on a schedule.

A `TopicSchedule` names a topic's series (research/versions.py). Once a minute django-q2's
scheduler runs `run_due` (the schedule row is made by a migration): each schedule whose time has
come starts the newest version again through `workflow.rerun_topic` — the owner's limits apply
as to a click on *Research again*; unchanged inputs come from the cache, so a re-run pays only for
what is new. When that run ends (`after_run`, called by the worker's task), a completed one is
compared with the version before it and what changed is delivered (research/delivery.py); a
failed or refused one is tried again later, with a growing pause, and its owner is told once per
run of failures, never on every try.

The time filter of a scheduled run is moved to the period since the last run when the question
allows (`move_window`): a range the user chose (past day, week, month, year) searches that window
as of the new run, widened when more time than it covers has passed since the version before
began (a weekly run of a "past day" topic searches the past week, so nothing published in
between is missed; the chosen range again once runs come as often as it). A question that names
its own period keeps it — relative words ("this month", "the last 3 days") are read on the day
of each run, dates ("in 2023") stay the dates asked about. A topic with no range searches the
whole web as before (its pages are read afresh, research/versions.py): narrowing it to the days
since the last run would drop what the previous report stood on, and its "what changed" would
list all of it as no longer said.
"""

from __future__ import annotations

import calendar
import logging
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from research import delivery, versions, workflow
from research.models import Topic, TopicSchedule

log = logging.getLogger(__name__)

# A due schedule whose newest version is still running waits this long before it looks again.
BUSY_WAIT = timedelta(minutes=10)
# Pauses after failed runs: 1 h, 2 h, 4 h… at most a day.
RETRY_FIRST = timedelta(hours=1)
RETRY_MAX = timedelta(days=1)
# Schedules started per minute at most: a backlog (after downtime) is worked off gradually.
BATCH = 20


def schedule_of(topic: Topic) -> TopicSchedule | None:
    return TopicSchedule.objects.filter(series=versions.series_of(topic), owner_id=topic.owner_id).first()


def next_time(every: str, after: datetime, cron: str = "") -> datetime:
    """When a schedule runs next after `after`."""
    if cron:
        from croniter import croniter

        return croniter(cron, after).get_next(datetime)
    if every == TopicSchedule.Every.DAY:
        return after + timedelta(days=1)
    if every == TopicSchedule.Every.WEEK:
        return after + timedelta(weeks=1)
    year, month = (after.year + 1, 1) if after.month == 12 else (after.year, after.month + 1)
    return after.replace(year=year, month=month, day=min(after.day, calendar.monthrange(year, month)[1]))


def check_cron(cron: str) -> str:
    """The cron line, checked (ValueError with the reason when croniter cannot read it)."""
    cron = " ".join(cron.split())
    if not cron:
        return ""
    from croniter import croniter

    if not croniter.is_valid(cron):
        raise ValueError(_("Not a cron line: five fields, minute hour day month weekday."))
    return cron


def save_schedule(
    topic: Topic,
    user: User,
    *,
    every: str,
    email: bool,
    webhook_url: str,
    deliver_unchanged: bool,
    cron: str = "",
) -> TopicSchedule:
    """Create or change the schedule of the topic's series; the next run counts from now."""
    if webhook_url:
        delivery.check_webhook_address(webhook_url)
    now = timezone.now()
    with transaction.atomic():
        schedule, created = TopicSchedule.objects.select_for_update().get_or_create(
            series=versions.series_of(topic),
            defaults={"owner": topic.owner, "next_run_at": now},
        )
        changed_timing = created or schedule.every != every or schedule.cron != cron
        schedule.every, schedule.email, schedule.deliver_unchanged = every, email, deliver_unchanged
        schedule.webhook_url = webhook_url
        if user.is_staff:
            schedule.cron = cron
        if webhook_url and not schedule.webhook_secret:
            schedule.webhook_secret = secrets.token_hex(32)
        if changed_timing:
            schedule.next_run_at = next_time(schedule.every, now, schedule.cron)
        schedule.save()
    return schedule


def set_paused(schedule: TopicSchedule, paused: bool) -> None:
    schedule.paused = paused
    fields = ["paused"]
    if not paused and schedule.next_run_at < timezone.now():
        schedule.next_run_at = timezone.now()
        fields.append("next_run_at")
    schedule.save(update_fields=fields)


def run_due() -> int:
    """The minute's work (a django-q2 schedule): start every due schedule, retry deliveries
    whose time has come. Returns how many schedules were started."""
    started = 0
    now = timezone.now()
    for schedule_id in TopicSchedule.objects.due(now).values_list("id", flat=True)[:BATCH]:
        started += _start(schedule_id, now)
    delivery.retry_due()
    return started


def _start(schedule_id: int, now: datetime) -> int:
    with transaction.atomic():
        schedule = TopicSchedule.objects.select_for_update(skip_locked=True).filter(pk=schedule_id).first()
        if schedule is None or schedule.paused or schedule.next_run_at > now:
            return 0  # another worker has it, or it changed since
        latest = (
            Topic.objects.filter(pk=schedule.series).first()
            or Topic.objects.filter(series=schedule.series).first()
        )
        if latest is None:  # every version was deleted: so is the schedule
            schedule.delete()
            return 0
        latest = versions.latest_of(latest)
        if not latest.is_finished:
            schedule.next_run_at = now + BUSY_WAIT
            schedule.save(update_fields=["next_run_at"])
            return 0
        try:
            running = workflow.rerun_topic(latest)
        except workflow.Refused as refused:  # the owner's limits: another time
            _failed(schedule, refused.message, now)
            return 0
        if running.pk != latest.pk:  # a new version (a failed one resumes as it was)
            move_window(running, latest)
        schedule.last_topic, schedule.last_run_at = running, now
        schedule.next_run_at = next_time(schedule.every, now, schedule.cron)
        schedule.save(update_fields=["last_topic", "last_run_at", "next_run_at"])
    return 1


def after_run(topic_id: int) -> None:
    """A version's run has ended: record what changed and, for a scheduled run, deliver it or
    count the failure. Safe to call twice (deliveries are made once per version and channel)."""
    topic = Topic.objects.filter(pk=topic_id).select_related("previous_version").first()
    if topic is None or not topic.is_finished:
        return
    changes = versions.record_changes(topic) if topic.status == Topic.Status.COMPLETED else None
    schedule = TopicSchedule.objects.filter(last_topic_id=topic_id).first()
    if schedule is None:
        return
    if topic.status != Topic.Status.COMPLETED:
        _failed(schedule, topic.error or _("The run was cancelled."), timezone.now())
        return
    if schedule.failures or schedule.last_error:
        schedule.failures, schedule.failure_notified, schedule.last_error = 0, False, ""
        schedule.save(update_fields=["failures", "failure_notified", "last_error"])
    if versions.count(changes) or schedule.deliver_unchanged:
        delivery.deliver(schedule, topic)


def _failed(schedule: TopicSchedule, reason: str, now: datetime) -> None:
    """Try again after a growing pause; tell the owner of the first failure of a run of them."""
    schedule.failures += 1
    schedule.last_error = reason
    pause = min(RETRY_FIRST * 2 ** (schedule.failures - 1), RETRY_MAX)
    schedule.next_run_at = now + pause
    fields = ["failures", "last_error", "next_run_at"]
    if not schedule.failure_notified:
        schedule.failure_notified = True
        fields.append("failure_notified")
        transaction.on_commit(lambda: delivery.notify_failure(schedule.pk))
    schedule.save(update_fields=fields)
    log.info("scheduled research %s failed (%s); next try %s", schedule.pk, reason, schedule.next_run_at)


# --- The time filter, moved to the period since the last run ---------------------------------------

# SearXNG's windows, narrowest first, with how far back each reaches; an hour's leeway for the
# scheduler's minute and a retry's wait, so a daily run of a "past day" topic stays a day.
WINDOWS: tuple[tuple[str, timedelta], ...] = (
    ("day", timedelta(days=1)),
    ("week", timedelta(weeks=1)),
    ("month", timedelta(days=30)),
    ("year", timedelta(days=365)),
)
LEEWAY = timedelta(hours=1)


def window_since(elapsed: timedelta) -> str:
    """The narrowest window that reaches back `elapsed`; "" (any time) past a year."""
    for window, span in WINDOWS:
        if elapsed <= span + LEEWAY:
            return window
    return ""


def move_window(version: Topic, previous: Topic) -> None:
    """Give a scheduled version the time filter of the period since `previous` began, when its
    question allows (see the module's docstring). Called before the version's run is committed."""
    from research.pipeline import timeparse

    if timeparse.parse_period(version.question, timezone.localdate(version.created_at)) is not None:
        return  # the question's own period: the route stage reads it for this run's day
    chosen = (
        Topic.objects.filter(pk=versions.series_of(previous)).values_list("time_range", flat=True).first()
    )
    if not chosen:
        return  # any time: the whole web, read afresh
    needed = window_since(version.created_at - previous.created_at)
    order = [window for window, _span in WINDOWS] + [""]
    widest = max(chosen, needed, key=order.index)
    if widest != version.time_range:
        version.time_range = widest
        version.save(update_fields=["time_range", "updated_at"])
