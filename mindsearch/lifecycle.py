"""Clean stops: how a worker process learns it is being stopped, and how its work hands back.

A django-q worker process that gets SIGTERM (from its cluster, `docker stop`, systemd or a
kill of the whole process group) does not die at once: it marks itself stopping. The research
run in flight notices before its next outside call (`mindsearch.clients.ratelimit` asks here),
so it stops at a saved point — every answer already received is in the database — and
`research.tasks` hands the topic back to the queue. Calls already in flight are cancelled
(their answers were not saved yet; the next worker asks again). A run that still does not end
within the grace period is ended; the heartbeat watcher of a live worker resumes it then.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
import weakref
from types import FrameType

log = logging.getLogger(__name__)

_stopping = threading.Event()
_in_flight: weakref.WeakSet[asyncio.Task] = weakref.WeakSet()
_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()  # the loops calls were made on


class WorkerStopping(BaseException):
    """The worker is stopping: leave the run where it is saved. A BaseException, so that no
    stage's `except Exception` mistakes it for a failed call."""


def stopping() -> bool:
    return _stopping.is_set()


def request_stop() -> None:
    """Mark this process stopping and cancel the calls in flight (their answers were not saved)."""
    _stopping.set()
    _cancel_in_flight()


def raise_if_stopping() -> None:
    if _stopping.is_set():
        raise WorkerStopping


def track_call() -> None:
    """The current task is about to call an outside service: cancel it if the worker stops."""
    task = asyncio.current_task()
    if task is not None:
        _in_flight.add(task)
        _loops.add(task.get_loop())


def is_stop(exc: BaseException) -> bool:
    """Did this exception end a run because the worker is stopping?"""
    return isinstance(exc, WorkerStopping) or (isinstance(exc, asyncio.CancelledError) and _stopping.is_set())


def _cancel_in_flight() -> None:
    for _attempt in range(3):
        try:
            tasks = list(_in_flight)
            break
        except RuntimeError:  # another thread added one while we copied
            continue
    else:
        return
    for task in tasks:
        if not task.done():
            with contextlib.suppress(RuntimeError):  # its loop has closed
                task.get_loop().call_soon_threadsafe(task.cancel)


def install_worker_handlers(grace_seconds: float) -> None:
    """SIGTERM and SIGINT mark this worker process stopping; it ends itself after the grace.

    (Not with SIGALRM: django-q2 times its tasks with it.)"""

    def on_stop(signum: int, frame: FrameType | None) -> None:
        if _stopping.is_set():
            return
        name = signal.Signals(signum).name
        log.info("worker got %s: the run in flight hands back at its next saved point", name)
        request_stop()
        threading.Thread(target=_end_after, args=(grace_seconds,), daemon=True).start()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)


def _end_after(seconds: float) -> None:
    time.sleep(seconds)
    log.warning("worker still busy %.0f s after the stop: ending it (the topic resumes later)", seconds)
    faulthandler.dump_traceback(all_threads=True)
    _dump_tasks()
    os._exit(1)


def _dump_tasks() -> None:
    """What each coroutine of the run still waits on (the threads' stacks show only the loops)."""
    with contextlib.suppress(RuntimeError):  # a loop's tasks changed while they were listed
        for loop in list(_loops):
            for task in asyncio.all_tasks(loop):
                print(f"--- {task!r}", file=sys.stderr)
                task.print_stack(limit=12, file=sys.stderr)
    sys.stderr.flush()
