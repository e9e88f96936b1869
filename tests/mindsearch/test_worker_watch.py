"""A killed worker's topic is resumed by a live worker within 10 s, by heartbeat, not the minute job."""

from __future__ import annotations

import time

import psutil
import pytest
from django.contrib.auth.models import User
from django_q.models import Schedule
from django_q.status import Stat
from django_q.tasks import async_task

from research.models import Topic
from research.pipeline.run import is_running_somewhere
from tests.reliability.runs import wait_until
from tests.support import processes
from tests.support.world import TOPIC, world

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def kill_tree(pid: int) -> None:
    family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for member in family:
        member.kill()
    psutil.wait_procs(family, timeout=10)


def test_a_killed_workers_topic_is_resumed_within_10_s_of_a_live_worker(alice: User) -> None:
    Schedule.objects.all().delete()  # not the once-a-minute job: the watcher alone
    with world(llm_latency=1.5) as w:
        env = processes.process_env(**w.env(), LOG_LEVEL="WARNING")
        topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
        with processes.qcluster(env) as first:
            async_task("research.tasks.plan", topic.pk)
            # Planned is not yet running: under load the run's task starts a while after the plan.
            began = Topic.objects.filter(pk=topic.pk, status=Topic.Status.RUNNING, subqueries__isnull=False)
            wait_until(began.exists, 120, "the run never began")
            kill_tree(first.pid)
        topic.refresh_from_db()
        assert topic.status == Topic.Status.RUNNING and not is_running_somewhere(topic.pk)
        silent_since = topic.heartbeat_at
        assert silent_since is not None
        clusters_before = {stat.cluster_id for stat in Stat.get_all()}
        with processes.qcluster(env):
            wait_until(
                lambda: {stat.cluster_id for stat in Stat.get_all()} - clusters_before,
                120,
                "no worker reported",
            )
            alive_at = time.monotonic()
            # Resumed: a new run holds the topic's lock (or has already finished it).
            wait_until(
                lambda: is_running_somewhere(topic.pk) or Topic.objects.get(pk=topic.pk).is_finished,
                60,
                "the topic was never resumed",
            )
            resumed_after = time.monotonic() - alive_at
            wait_until(
                lambda: Topic.objects.get(pk=topic.pk).is_finished, 180, "the resumed topic did not finish"
            )
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert topic.heartbeat_at is not None and topic.heartbeat_at > silent_since
    assert resumed_after <= 10, f"resumed {resumed_after:.1f} s after the worker was alive"
