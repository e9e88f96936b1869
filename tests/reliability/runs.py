"""Helpers for the fault matrix: a topic researched in-process against the loopback world."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
from django.contrib.auth.models import User

from research.models import Document, Hit, HitScore, RunEvent, SearchQuery, SubQuery, Summary, Topic
from research.pipeline.run import plan_topic, run_topic
from tests.support.fakes import FakeService, Request, Response, Route
from tests.support.world import TOPIC


def research(owner: User, **fields: Any) -> Topic:
    """Plan (auto-approved) and run a topic to its end; the topic as it ended."""
    topic = Topic.objects.create(
        owner=owner, question=fields.pop("question", TOPIC), auto_approve=True, **fields
    )
    if plan_topic(topic.pk):
        run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def warnings_of(topic: Topic, stage: str | None = None) -> list[str]:
    events = RunEvent.objects.filter(topic=topic, level=RunEvent.Level.WARNING)
    if stage:
        events = events.filter(stage=stage)
    return list(events.order_by("seq").values_list("message", flat=True))


def row_counts(topic: Topic) -> dict[str, int]:
    """What a run has saved so far, stage by stage."""
    return {
        "subqueries": SubQuery.objects.filter(topic=topic).count(),
        "search_queries": SearchQuery.objects.filter(subquery__topic=topic).count(),
        "hits": Hit.objects.filter(topic=topic).count(),
        "hit_scores": HitScore.objects.filter(hit__topic=topic).count(),
        "documents": Document.objects.filter(topic=topic).count(),
        "summaries": Summary.objects.filter(document__topic=topic).count(),
    }


# --- Real worker processes --------------------------------------------------------------------


def wait_until(condition: Callable[[], object], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.1)


def kill_tree(pid: int) -> None:
    """SIGKILL a process and all its children at once, as the OOM killer or a lost host would."""
    proc = psutil.Process(pid)
    family = [proc, *proc.children(recursive=True)]
    for member in family:
        member.kill()
    psutil.wait_procs(family, timeout=10)


def is_finished(topic_id: int) -> bool:
    return Topic.objects.get(pk=topic_id).is_finished


@dataclass
class Ledger:
    """When a loopback service answered each request, keyed by what was asked.

    Wrapping every route of a FakeService, it tells answered calls (whose answer left the
    service) from calls in flight at a given moment. `slow` makes chosen requests wait before
    they are answered, which holds a run in the middle of a stage.
    """

    service: FakeService
    key: Callable[[Request], str]
    slow: Callable[[Request], bool] = lambda request: False
    delay: float = 3.0
    answered: dict[str, list[float]] = field(default_factory=dict)
    held: list[float] = field(default_factory=list)  # when each held request arrived
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.service.routes = {name: self._wrap(route) for name, route in self.service.routes.items()}
        if self.service.fallback is not None:
            self.service.fallback = self._wrap(self.service.fallback)

    def _wrap(self, route: Route) -> Route:
        def recorded(request: Request) -> Response:
            if self.slow(request):
                self.held.append(request.arrived)
                time.sleep(self.delay)
            response = route(request)
            with self._lock:
                self.answered.setdefault(self.key(request), []).append(time.monotonic())
            return response

        return recorded

    def asked(self) -> Counter:
        return Counter(self.key(request) for request in self.service.requests)

    def repaid(self, before: float) -> list[str]:
        """Requests answered before `before` that were nevertheless asked again."""
        return [
            key
            for key, count in self.asked().items()
            if count > 1 and min(self.answered.get(key, [float("inf")])) < before
        ]
