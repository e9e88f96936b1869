"""Background tasks (django-q2). They take ids, never model instances.

While a run is alive it holds its topic's lock and refreshes the topic's heartbeat every
HEARTBEAT_SECONDS, even inside one long call. A worker that is stopping hands its topic back
(`mindsearch.lifecycle`): the run stops before its next outside call, with everything received
saved, and the topic goes back to the queue for the next worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from typing import TypeVar

from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models import QuerySet
from django.utils import timezone
from django_q.tasks import async_task

from mindsearch import fairq, lifecycle
from research.models import FollowUp, Topic
from research.pipeline import cache
from research.pipeline.followup import answer_pending
from research.pipeline.run import is_running_somewhere, plan_topic, run_topic, topic_lock
from research.schedules import after_run

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 2.0
LIVE = (Topic.Status.RUNNING, Topic.Status.PLANNING)
T = TypeVar("T")


def _unless_stopping(
    work: Callable[[], T], alive: Callable[[], AbstractContextManager[None]], give_back: Callable[[], T]
) -> T:
    """`work` with its heartbeat `alive`; when the worker is stopping — before it began (the task
    was fetched before the stop) or while it runs — `give_back` leaves it to the next worker."""
    if lifecycle.stopping():
        return give_back()
    try:
        with alive():
            return work()
    except BaseException as exc:
        if not lifecycle.is_stop(exc):
            raise
        return give_back()


def plan(topic_id: int) -> None:
    def give_back() -> bool:
        hand_back(topic_id)
        return False

    if _unless_stopping(lambda: plan_topic(topic_id), lambda: heartbeat(topic_id), give_back):
        run(topic_id)


def run(topic_id: int) -> str:
    status = _unless_stopping(
        lambda: run_topic(topic_id), lambda: heartbeat(topic_id), lambda: hand_back(topic_id)
    )
    if status in (Topic.Status.COMPLETED, Topic.Status.FAILED, Topic.Status.CANCELLED):
        after_run(topic_id)  # what changed since the previous version; a schedule's delivery
    return status


def followup(followup_id: int) -> list[int]:
    """Answer a follow-up: every queued follow-up of its topic, in order, under the topic's lock
    (a task that finds the lock taken leaves its follow-up to the run holding it)."""
    topic_id = FollowUp.objects.filter(pk=followup_id).values_list("topic_id", flat=True).first()
    if topic_id is None:
        return []

    def give_back() -> list[int]:
        hand_back_followups(topic_id)
        return []

    return _unless_stopping(lambda: answer_pending(topic_id), lambda: followup_heartbeat(topic_id), give_back)


def hand_back_followups(topic_id: int) -> None:
    """Queue a topic's follow-up being answered again; the next worker starts it afresh (a search
    it had begun continues from its saved rows). Not while another worker holds the topic: its
    follow-ups are that worker's to answer."""
    with topic_lock(topic_id) as locked:
        if not locked:
            return
        moved = (
            FollowUp.objects.filter(topic_id=topic_id)
            .pending()
            .update(status=FollowUp.Status.QUEUED, heartbeat_at=None)
        )
    first = FollowUp.objects.filter(topic_id=topic_id).pending().order_by("position").first()
    if moved and first is not None:
        _queue_followup(first.pk, f"hand back follow-up {first.pk}")
        log.info("worker stopping: follow-ups of topic %s handed back to the queue", topic_id)


def followup_heartbeat(topic_id: int) -> AbstractContextManager[None]:
    """Refresh the heartbeat of the topic's follow-up being answered while it goes on."""
    running = FollowUp.objects.filter(topic_id=topic_id, status=FollowUp.Status.RUNNING)
    return _beating(running, f"followup-heartbeat-{topic_id}")


def enqueue_followup(followup: FollowUp) -> None:
    transaction.on_commit(lambda: _queue_followup(followup.pk, f"follow-up {followup.pk}"))


def _queue_followup(followup_id: int, name: str) -> None:
    """Follow-ups go through the fair queue: one account answers one at a time (mindsearch/fairq.py)."""
    owner_id = FollowUp.objects.filter(pk=followup_id).values_list("topic__owner_id", flat=True).first()
    fairq.submit(fairq.FOLLOWUPS, owner_id, "research.tasks.followup", followup_id, task_name=name)


def resume_stalled_followups() -> list[int]:
    """Re-queue follow-ups whose worker died while answering them (silent heartbeat, topic lock
    free), as `resume_stalled_topics` does for runs."""
    silent_since = timezone.now() - timedelta(seconds=settings.RESUME_STALLED_AFTER_SECONDS)
    stalled = FollowUp.objects.filter(status=FollowUp.Status.RUNNING, heartbeat_at__lt=silent_since)
    resumed = []
    for row in stalled:
        if is_running_somewhere(row.topic_id):
            continue
        again = FollowUp.objects.filter(pk=row.pk, status=row.status, heartbeat_at=row.heartbeat_at)
        if not again.update(status=FollowUp.Status.QUEUED, heartbeat_at=None):
            continue
        log.warning("resuming follow-up %s of topic %s", row.pk, row.topic_id)
        _queue_followup(row.pk, f"resume follow-up {row.pk}")
        resumed.append(row.pk)
    return resumed


def hand_back(topic_id: int) -> str:
    """Queue the topic again as it stands (the next worker continues from what is saved)."""
    topic = Topic.objects.filter(pk=topic_id).first()
    if topic is None or topic.is_finished or topic.status == Topic.Status.AWAITING_APPROVAL:
        return topic.status if topic else ""
    task = "research.tasks.plan" if topic.status == Topic.Status.PLANNING else "research.tasks.run"
    if topic.status == Topic.Status.RUNNING:
        topic.set_status(Topic.Status.QUEUED)
    Topic.objects.filter(pk=topic_id).update(heartbeat_at=None)  # waiting in the queue again
    async_task(task, topic_id, task_name=f"hand back topic {topic_id}")
    log.info("worker stopping: topic %s handed back to the queue", topic_id)
    return topic.status


def heartbeat(topic_id: int) -> AbstractContextManager[None]:
    """Refresh the topic's heartbeat from a thread of its own while the run goes on."""
    return _beating(Topic.objects.filter(pk=topic_id, status__in=LIVE), f"heartbeat-{topic_id}")


@contextmanager
def _beating(rows: QuerySet, name: str) -> Iterator[None]:
    """Set `heartbeat_at` of these rows every HEARTBEAT_SECONDS from a thread named `name`, even
    while the caller is inside one long call."""
    done = threading.Event()

    def beat() -> None:
        try:
            while not done.wait(HEARTBEAT_SECONDS):
                try:
                    rows.update(heartbeat_at=timezone.now())
                except Exception:  # the database may be restarting; the run will see it too
                    log.warning("could not refresh the heartbeat: %s", name, exc_info=True)
                    close_old_connections()
        finally:
            close_old_connections()

    thread = threading.Thread(target=beat, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=HEARTBEAT_SECONDS * 2)


def enqueue_plan(topic: Topic) -> None:
    transaction.on_commit(
        lambda: async_task("research.tasks.plan", topic.pk, task_name=f"plan topic {topic.pk}")
    )


def enqueue_run(topic: Topic) -> None:
    transaction.on_commit(
        lambda: async_task("research.tasks.run", topic.pk, task_name=f"run topic {topic.pk}")
    )


def resume_stalled_topics() -> list[int]:
    """Re-queue topics whose run died with its worker (killed, host lost, restarted).

    A live run holds the topic's advisory lock and beats every HEARTBEAT_SECONDS; a topic that
    started planning or running (it has a heartbeat) whose lock is free and that has been silent
    for RESUME_STALLED_AFTER_SECONDS has no run behind it, so it is queued again and resumes.
    Topics waiting in the queue have no heartbeat (none yet, or cleared when queued again).
    Every worker's watcher calls this every few seconds (mindsearch/worker.py).
    """
    silent_since = timezone.now() - timedelta(seconds=settings.RESUME_STALLED_AFTER_SECONDS)
    stalled = Topic.objects.filter(status__in=LIVE, heartbeat_at__lt=silent_since)
    resumed = []
    for topic in stalled:
        if is_running_somewhere(topic.pk):
            continue
        log.warning("resuming topic %s, silent since %s", topic.pk, topic.heartbeat_at)
        task = "research.tasks.plan" if topic.status == Topic.Status.PLANNING else "research.tasks.run"
        # Only the caller that moves the topic out of its silent state queues it: two workers'
        # watchers may look at the same moment.
        queued = Topic.objects.filter(pk=topic.pk, status=topic.status, heartbeat_at=topic.heartbeat_at)
        new_status = Topic.Status.QUEUED if topic.status == Topic.Status.RUNNING else topic.status
        if not queued.update(status=new_status, heartbeat_at=None, updated_at=timezone.now()):
            continue
        async_task(task, topic.pk, task_name=f"resume topic {topic.pk}")
        resumed.append(topic.pk)
    resume_stalled_followups()
    return resumed


def purge_expired_cache() -> int:
    return cache.purge_expired()
