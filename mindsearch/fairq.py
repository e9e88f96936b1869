"""The fair queue: one account's heavy background jobs never fill the worker.

django-q2 hands tasks to free workers first in, first out, with no idea whose they are: four
slow PDFs of one user took both workers, and another user's plan waited two minutes behind
them. A heavy job is queued through `submit` as `run(kind, owner, func, *args)`, which starts
`func` only once it holds

- one of its owner's FAIR_QUEUE_PER_USER slots of its kind (FILES: indexing a document,
  importing an archive; FOLLOWUPS: answering a topic's follow-ups), and,
- for FILES, one of FAIR_QUEUE_HEAVY_WORKERS slots shared by every account (all workers but
  one by default), so plans and research runs, which are never held back, find a worker.

Slots are PostgreSQL advisory locks held by the worker's connection while the job runs: a
worker that dies lets them go with its connection. A job that finds no free slot goes back into
the queue, where workers see it again FAIR_QUEUE_RETRY_SECONDS later (longer the more often it
waited, up to MAX_RETRY_SECONDS), and its worker is free at once for whatever comes next.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.tasks import async_task

log = logging.getLogger(__name__)

FILES, FOLLOWUPS = "files", "followups"
KINDS = (FILES, FOLLOWUPS)
# Kinds that also take one of the heavy slots every account shares.
SHARED = (FILES,)
MAX_RETRY_SECONDS = 20.0
DEFERRED = "deferred"


def submit(kind: str, owner_id: int | None, func: str, *args: Any, task_name: str = "") -> None:
    """Queue `func(*args)` as a heavy job of `owner_id` (None: nobody's, e.g. a deleted user's)."""
    _queue(kind, owner_id, func, args, task_name, deferred=0)


def run(kind: str, owner_id: int | None, func: str, *args: Any, deferred: int = 0, name: str = "") -> Any:
    """The task the worker runs: `func(*args)` once the job holds its slots, else queued again."""
    with slots(kind, owner_id) as held:
        if held:
            return import_string(func)(*args)
    _queue(kind, owner_id, func, args, name, deferred=deferred + 1)
    return DEFERRED


@contextmanager
def slots(kind: str, owner_id: int | None) -> Iterator[bool]:
    """True while this connection holds one of the owner's slots of `kind` (and a shared heavy
    slot for a shared kind); False, holding nothing, when every slot it needs is taken."""
    with ExitStack() as stack:
        held = owner_id is None or stack.enter_context(
            _one_of(f"{kind}.user", owner_id, settings.FAIR_QUEUE_PER_USER)
        )
        if held and kind in SHARED:
            held = stack.enter_context(_one_of("heavy", None, settings.FAIR_QUEUE_HEAVY_WORKERS))
        if not held:
            stack.close()
        yield held


@contextmanager
def _one_of(name: str, owner_id: int | None, count: int) -> Iterator[bool]:
    """Try `count` advisory locks in turn (slots `name`.0…); hold the first one free."""
    for slot in range(count):
        key = (f"mindsearch.fairq.{name}.{slot}", owner_id or 0)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s), %s::integer)", key)
            if not cursor.fetchone()[0]:
                continue
        try:
            yield True
        finally:
            with suppress(DatabaseError), connection.cursor() as cursor:  # a lost connection let it go
                cursor.execute("SELECT pg_advisory_unlock(hashtext(%s), %s::integer)", key)
        return
    yield False


class _Later(ORM):
    """django-q2's ORM broker, but the task is visible to workers only `seconds` from now (the
    broker hands out rows whose lock time has passed)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(list_key=Conf.CLUSTER_NAME)
        self.seconds = seconds

    def enqueue(self, task: str) -> int:
        visible = timezone.now() + timedelta(seconds=self.seconds)
        return self.get_connection().create(key=self.list_key, payload=task, lock=visible).pk


def _queue(kind: str, owner_id: int | None, func: str, args: tuple, name: str, *, deferred: int) -> None:
    options: dict[str, Any] = {"task_name": name or f"{kind} {func}", "deferred": deferred, "name": name}
    if deferred:
        wait = min(settings.FAIR_QUEUE_RETRY_SECONDS * deferred, MAX_RETRY_SECONDS)
        options["broker"] = _Later(wait)
    async_task("mindsearch.fairq.run", kind, owner_id, func, *args, **options)
