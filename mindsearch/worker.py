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
from typing import Any

import psutil
from django.db import close_old_connections
from django.dispatch import receiver
from django_q import cluster as q_cluster
from django_q.signals import post_spawn

from mindsearch import lifecycle

log = logging.getLogger(__name__)

# How long a worker's run in flight may take to reach a saved point before it is ended.
WORKER_STOP_GRACE_SECONDS = 10
WATCH_INTERVAL_SECONDS = 2.0


class GracefulSentinel(q_cluster.Sentinel):
    def __init__(self, *args: Any, start: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, start=False, **kwargs)
        # The main process tells the sentinel to stop (stop_event); pusher and monitor inherit
        # this and stop when the sentinel says so; workers install their own handler.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if start:
            self.start()

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


def watch_stalled_topics(stop: threading.Event) -> None:
    """Resume silent topics every WATCH_INTERVAL_SECONDS; sample the service figures each minute."""
    from mindsearch.metrics import SAMPLE_EVERY_SECONDS, record_samples
    from research.tasks import resume_stalled_topics

    sampled = 0.0
    while not stop.wait(WATCH_INTERVAL_SECONDS):
        try:
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
