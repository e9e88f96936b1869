"""The worker (`manage.py qcluster`): django-q2's cluster, stopped cleanly, with a heartbeat watcher.

django-q2 lets every process of the cluster die on SIGTERM: a `docker stop`, systemd or a kill
of the process group ended the research run in flight wherever it was, and the task waited for
the next start. Here, on SIGTERM or SIGINT to any of its processes:

- the main process tells the sentinel to stop (django-q2's own path);
- the sentinel ignores the signal itself, stops fetching tasks, and passes SIGTERM on to its
  workers (`mindsearch.lifecycle`): each run in flight stops before its next outside call and
  its topic is handed back to the queue; tasks already fetched are handed back unrun;
- the main process leaves only when every process of the cluster has, so that, when it is the
  last user of the embedded PostgreSQL, nothing is still writing when it stops the server.

A cluster takes a task off the queue only when one of its workers is free to start it. django-q2's
pusher fetched ahead (up to workers² tasks waiting in the cluster, one more blocked on the way
in), and a fetched task stays locked in the queue for `retry` (31 minutes): a worker killed with
SIGKILL, or a lost host, took the topics it had fetched but not started with it for that long
(tests/reliability/test_multihost.py found a topic stuck so). Now a task waits in the shared
queue, where any live worker takes it.

A watcher thread in the main process resumes, every few seconds, topics whose run died with
another worker (`research.tasks.resume_stalled_topics`): a live run refreshes its heartbeat,
holds its topic's lock, and a silent topic whose lock is free has no run behind it. Once a
minute it also records the service figures for the admin desk's charts (mindsearch/metrics.py).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from contextlib import suppress
from typing import Any

import psutil
from django.db import close_old_connections
from django.dispatch import receiver
from django_q import cluster as q_cluster
from django_q.brokers import Broker
from django_q.conf import Conf
from django_q.signals import post_execute_in_worker, post_spawn

from mindsearch import heartbeat, lifecycle

log = logging.getLogger(__name__)

# How long a worker's run in flight may take to reach a saved point before it is ended.
WORKER_STOP_GRACE_SECONDS = 10
WATCH_INTERVAL_SECONDS = 2.0


# Free workers of this cluster, shared by its processes (forked from the sentinel): the pusher
# takes one before fetching a task, a worker gives it back when its task has ended.
_free_workers: Any = None


class FetchWhenFree:
    """The cluster's broker, fetching only while a worker is free (one task per free worker)."""

    def __init__(self, broker: Broker, free: Any) -> None:
        self.broker = broker
        self.free = free

    def dequeue(self) -> list | None:
        if not self.free.acquire(timeout=Conf.POLL):
            return None  # every worker busy: the pusher looks again (and at its stop event)
        try:
            tasks = self.broker.dequeue()
        except BaseException:
            self.free.release()
            raise
        # One slot per task taken (BULK is 1); none taken, the slot is free again.
        for _ in range(1, len(tasks or [])):
            self.free.acquire()
        if not tasks:
            self.free.release()
        return tasks

    def fail(self, task_id: Any) -> None:
        """A task the pusher could not unpack never reaches a worker."""
        self.broker.fail(task_id)
        with suppress(ValueError):
            self.free.release()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.broker, name)


class GracefulSentinel(q_cluster.Sentinel):
    def __init__(self, *args: Any, start: bool = True, **kwargs: Any) -> None:
        global _free_workers
        super().__init__(*args, start=False, **kwargs)
        self.free_workers = q_cluster.get_mp_context().BoundedSemaphore(self.pool_size)
        _free_workers = self.free_workers
        # The main process tells the sentinel to stop (stop_event); pusher and monitor inherit
        # this and stop when the sentinel says so; workers install their own handler.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if start:
            self.start()

    def spawn_pusher(self) -> Any:
        return self.spawn_process(
            q_cluster.pusher, self.task_queue, self.event_out, FetchWhenFree(self.broker, self.free_workers)
        )

    def reincarnate(self, process: Any) -> None:
        # A worker that died in a task (its timer still counting down) frees its slot; one
        # ended on timeout (0), recycled (-2) or idle (-1) had freed it when its task ended.
        if process in self.pool and process.timer.value > 0:
            with suppress(ValueError):
                self.free_workers.release()
        super().reincarnate(process)

    def stop(self) -> None:
        for process in self.pool:
            if process.is_alive() and process.pid:
                os.kill(process.pid, signal.SIGTERM)
        super().stop()


class GracefulCluster(q_cluster.Cluster):
    def start(self) -> int:
        # Cluster.start names its sentinel class through the module: swap it for this start only.
        original = q_cluster.Sentinel
        q_cluster.Sentinel = GracefulSentinel
        try:
            return super().start()
        finally:
            q_cluster.Sentinel = original


@receiver(post_execute_in_worker)
def _worker_free(sender: Any, **kwargs: Any) -> None:
    """Sent in the worker process when its task has ended: the cluster may fetch another."""
    if _free_workers is not None:
        with suppress(ValueError):
            _free_workers.release()


@receiver(post_spawn)
def _worker_started(sender: Any, proc_name: str, **kwargs: Any) -> None:
    """Sent in each worker process as it starts (django-q2 sends it nowhere else)."""
    lifecycle.install_worker_handlers(WORKER_STOP_GRACE_SECONDS)


def run_cluster() -> None:
    """Run a cluster and the watcher until SIGTERM or SIGINT; return when all have stopped."""
    stop = threading.Event()
    cluster = GracefulCluster()  # installs django-q2's handlers; replaced just below

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    cluster.start()
    watcher = threading.Thread(target=watch_stalled_topics, args=(stop,), name="resume-watcher", daemon=True)
    watcher.start()
    while not stop.wait(0.5):
        if not cluster.sentinel.is_alive():
            log.error("the cluster's sentinel died; stopping")
            break
    log.info("stopping the worker: runs in flight hand back their topics")
    stop.set()
    children = psutil.Process().children(recursive=True)
    cluster.stop()
    _wait_for(children)
    watcher.join(timeout=WATCH_INTERVAL_SECONDS * 2)
    with suppress(Exception):  # the database may be gone already: the beat then lapses in a minute
        heartbeat.forget()


def watch_stalled_topics(stop: threading.Event) -> None:
    """Beat (mindsearch/heartbeat.py) and resume silent topics every WATCH_INTERVAL_SECONDS;
    sample the service figures each minute."""
    from mindsearch.metrics import SAMPLE_EVERY_SECONDS, record_samples
    from research.tasks import resume_stalled_topics

    sampled = 0.0
    with suppress(Exception):  # at once: django-q2's first stats may lapse before the first round
        heartbeat.beat()
    while not stop.wait(WATCH_INTERVAL_SECONDS):
        try:
            heartbeat.beat()
            resume_stalled_topics()
            if time.monotonic() - sampled >= SAMPLE_EVERY_SECONDS:
                sampled = time.monotonic()
                record_samples()
        except Exception:  # the database may be restarting: try again next time
            log.exception("could not look for stalled topics or record the service figures")
        finally:
            close_old_connections()


def _wait_for(children: list[psutil.Process]) -> None:
    """Workers orphaned by a sentinel killed outright still finish before we go."""
    _gone, alive = psutil.wait_procs(children, timeout=WORKER_STOP_GRACE_SECONDS + 5)
    for child in alive:
        child.kill()
