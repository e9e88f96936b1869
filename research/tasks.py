"""Background tasks (django-q2). They take ids, never model instances."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from research.models import Topic
from research.pipeline import cache
from research.pipeline.run import is_running_somewhere, plan_topic, run_topic

log = logging.getLogger(__name__)


def plan(topic_id: int) -> None:
    if plan_topic(topic_id):
        run(topic_id)


def run(topic_id: int) -> str:
    return run_topic(topic_id)


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

    A live run holds the topic's advisory lock; a topic that started planning or running (it has
    a heartbeat) whose lock is free and that has been silent for a while has no run behind it,
    so it is queued again and resumes. Topics still waiting in the queue have no heartbeat yet.
    """
    silent_since = timezone.now() - timedelta(seconds=settings.RESUME_STALLED_AFTER_SECONDS)
    stalled = Topic.objects.filter(
        status__in=(Topic.Status.RUNNING, Topic.Status.PLANNING), heartbeat_at__lt=silent_since
    )
    resumed = []
    for topic in stalled:
        if is_running_somewhere(topic.pk):
            continue
        log.warning("resuming topic %s, silent since %s", topic.pk, topic.heartbeat_at)
        task = "research.tasks.plan" if topic.status == Topic.Status.PLANNING else "research.tasks.run"
        if topic.status == Topic.Status.RUNNING:
            topic.set_status(Topic.Status.QUEUED)
        topic.heartbeat_at = timezone.now()
        topic.save(update_fields=["heartbeat_at"])
        async_task(task, topic.pk, task_name=f"resume topic {topic.pk}")
        resumed.append(topic.pk)
    return resumed


def purge_expired_cache() -> int:
    return cache.purge_expired()
