"""The run loop: route, plan, wait for the user's approval, then each stage in turn.

The route stage only decides (`Topic.route`); the loop dispatches on its decision: a question
that needs no search goes to the owner's documents (`local_rag`), then to the direct answer
(`direct`) — each hands over to the next by storing the next route when it cannot answer — and
every other question to the plan and the search stages.

Every stage reads the rows of the stage before, skips what is already done and saves as it goes,
so running a topic again — after a crash, a kill or a re-queue — continues where it stopped.
A PostgreSQL advisory lock per topic keeps two workers from running one topic at once; the lock
dies with its connection, so a killed worker never leaves a topic locked.

A deep topic repeats the search-to-scored-summaries stages once per round until `deep` says
the rounds found little new; the report is then written from all of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext_noop

from research.models import Report, RunEvent, Topic
from research.pipeline import overlap, private, read_and_summarise
from research.pipeline.context import Cancelled, RunContext, StageError
from research.pipeline.stage import Outcome, StageName
from research.pipeline.stages import (
    answer,
    deep,
    domain,
    plan,
    queries,
    route,
    score_hits,
    score_summaries,
    search,
    summarise,
    vision,
    years,
)
from research.pipeline.stages.answer import direct, local_rag

log = logging.getLogger(__name__)


@runtime_checkable
class Stage(Protocol):
    """What the loop calls: a module with its `STAGE` and `run(ctx) -> Outcome` (stages/)."""

    STAGE: StageName

    def run(self, ctx: RunContext) -> Outcome: ...


# One round: what each sub-query not yet done needs, up to its scored summaries.
ROUND_STAGES: tuple[Stage, ...] = (
    queries,
    search,
    years,
    score_hits,
    read_and_summarise,  # read, each page summarised as it is saved
    summarise,
    score_summaries,
)
# The branches of a question that needs no search, tried in turn: each runs when `Topic.route`
# names it (its ROUTE) and stores the next route when it cannot answer.
ANSWER_BRANCHES = (local_rag, direct)
# Every stage a topic's run may call, in the order they first come.
STAGES: tuple[Stage, ...] = (
    vision,
    route,
    *ANSWER_BRANCHES,
    domain,
    plan,
    overlap,
    *ROUND_STAGES,
    deep,
    answer,
)
LOCK_NAMESPACE = 7_301  # first key of pg_try_advisory_lock(int, int): "research topic"

Listener = Callable[[RunEvent], None]


def plan_topic(topic_id: int, listeners: list[Listener] | None = None) -> bool:
    """Plan a topic; True when it goes straight on (auto-approve), False when it waits for review."""
    with topic_lock(topic_id) as locked:
        if not locked:
            return False
        topic = Topic.objects.get(pk=topic_id)
        if topic.status != Topic.Status.PLANNING:
            return topic.status == Topic.Status.QUEUED
        topic.set_status(Topic.Status.PLANNING, heartbeat_at=timezone.now())
        ctx = RunContext.for_topic(topic, listeners)
        if not _guarded(ctx, lambda: _route_then_plan(ctx)):
            return False
        if topic.status == Topic.Status.COMPLETED:  # answered directly, nothing to plan
            return False
        if topic.auto_approve:
            topic.set_status(Topic.Status.QUEUED)
            return True
        topic.set_status(Topic.Status.AWAITING_APPROVAL)
        ctx.emit(StageName.PLAN, gettext_noop("Waiting for you to review and approve the plan"), args={})
        return False


def run_topic(topic_id: int, listeners: list[Listener] | None = None) -> str:
    """Run the approved plan to a report; returns the topic's final status."""
    with topic_lock(topic_id) as locked:
        topic = Topic.objects.get(pk=topic_id)
        if not locked or topic.status not in (Topic.Status.QUEUED, Topic.Status.RUNNING):
            return topic.status
        ctx = RunContext.for_topic(topic, listeners)
        topic.set_status(
            Topic.Status.RUNNING,
            started_at=topic.started_at or timezone.now(),
            heartbeat_at=timezone.now(),
            llm_model=ctx.model,
        )
        if _guarded(ctx, lambda: _run_stages(ctx)):
            topic.set_status(Topic.Status.COMPLETED, finished_at=timezone.now(), stage="")
            ctx.emit(StageName.DONE, gettext_noop("The report is ready"), args={})
        return topic.status


def _route_then_plan(ctx: RunContext) -> None:
    private.check_before_planning(ctx)
    _stage(ctx, vision)  # the picture's labels join the question before it is routed
    if _answered_without_search(ctx):
        _answered_directly(ctx)
        return
    _stage(ctx, domain)  # domain data before the web
    _stage(ctx, plan)


def _answered_without_search(ctx: RunContext) -> bool:
    """Route the topic, then run the branch its stored route names; True when one answered it.
    When the branches hand it over to the search, the route line says so then."""
    _stage(ctx, route)
    routed = ctx.topic.route
    for branch in ANSWER_BRANCHES:
        if ctx.topic.route == branch.ROUTE and _stage(ctx, branch) is Outcome.ANSWERED:
            return True
    if routed != ctx.topic.route == Topic.Route.SEARCH:
        route.announce_search(ctx)
    return False


def _answered_directly(ctx: RunContext) -> None:
    now = timezone.now()
    model = Report.objects.filter(topic=ctx.topic).values_list("model", flat=True).first() or ""
    ctx.topic.set_status(
        Topic.Status.COMPLETED,
        started_at=ctx.topic.started_at or now,
        finished_at=now,
        stage="",
        llm_model=model,
    )
    ctx.emit(StageName.DONE, gettext_noop("The answer is ready"), args={})


def _run_stages(ctx: RunContext) -> None:
    if _answered_without_search(ctx):  # a copy of a topic that was answered directly
        return
    _stage(ctx, domain)
    while True:
        _round(ctx)
        if _stage(ctx, deep) is not Outcome.ANOTHER_ROUND:
            break
    _stage(ctx, answer)


def _round(ctx: RunContext) -> None:
    stages = ROUND_STAGES
    if overlap.applies(ctx):  # queries, search and scoring per sub-query, overlapped
        _stage(ctx, overlap)
        stages = tuple(stage for stage in ROUND_STAGES if stage not in overlap.COVERS)
    drive(ctx, stages)


def drive(ctx: RunContext, stages: Iterable[Stage], *, show: bool = True) -> None:
    """Each of `stages` in turn, their outcomes read as a round reads them. A follow-up's search
    (`followup.py`) is driven here too, with `show=False`: its topic is finished, and its stage
    stays the one shown."""
    for stage in stages:
        if _stage(ctx, stage, show=show) is Outcome.SEARCH_AGAIN:  # years added sub-queries
            _stage(ctx, search, show=show)


def _stage(ctx: RunContext, stage: Stage, *, show: bool = True) -> Outcome:
    ctx.check_cancelled()
    if show and ctx.topic.stage != stage.STAGE:
        ctx.topic.set_status(ctx.topic.status, stage=stage.STAGE)
    return stage.run(ctx)


def _guarded(ctx: RunContext, work: Callable[[], None]) -> bool:
    """Run a step; a stage error or a cancel ends the topic with a clear message instead of a crash."""
    try:
        work()
    except Cancelled:
        ctx.emit(StageName.CANCELLED, gettext_noop("Cancelled"), args={})
        return False
    except StageError as exc:
        ctx.topic.fail(str(exc))
        stage = StageName(ctx.topic.stage) if ctx.topic.stage in StageName.values else StageName.RUN
        if exc.i18n_args is not None:  # a msgid: the event keeps it for the page to translate
            ctx.emit(stage, exc.msgid, args=exc.i18n_args, level=RunEvent.Level.ERROR)
        else:
            ctx.emit(stage, str(exc), level=RunEvent.Level.ERROR)
        return False
    return True


@contextmanager
def topic_lock(topic_id: int) -> Iterator[bool]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_NAMESPACE, topic_id])
        locked = cursor.fetchone()[0]
    try:
        yield locked
    finally:
        if locked:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_NAMESPACE, topic_id])


def is_running_somewhere(topic_id: int) -> bool:
    """True while some process holds the topic's lock, i.e. a run is alive."""
    with topic_lock(topic_id) as locked:
        return not locked
