"""A scheduled run's time filter covers the period since the last run when the question allows
(research/schedules.py, `move_window`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from research import schedules, tasks
from research.models import Report, SubQuery, Topic, TopicSchedule

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def queued_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks, "async_task", lambda *args, **kwargs: None)


def version(
    owner: User, question: str, time_range: str, days_ago: float, previous: Topic | None = None
) -> Topic:
    topic = Topic.objects.create(
        owner=owner,
        question=question,
        time_range=time_range,
        status=Topic.Status.COMPLETED,
        series=(previous.series or previous.pk) if previous else None,
        previous_version=previous,
    )
    Topic.objects.filter(pk=topic.pk).update(created_at=timezone.now() - timedelta(days=days_ago))
    Report.objects.create(topic=topic, markdown="A fact [1].\n", sources=[])
    SubQuery.objects.create(topic=topic, position=1, text="tokens")
    topic.refresh_from_db()
    return topic


def scheduled_run(owner: User, latest: Topic) -> Topic:
    schedule, _created = TopicSchedule.objects.update_or_create(
        series=latest.series or latest.pk,
        defaults={"owner": owner, "next_run_at": timezone.now(), "email": False},
    )
    assert schedules.run_due() == 1
    schedule.refresh_from_db()
    assert schedule.last_topic is not None and schedule.last_topic.previous_version_id == latest.pk
    return schedule.last_topic


@pytest.mark.parametrize(
    "chosen, days_ago, searched",
    [
        ("day", 7, "week"),  # a weekly run of a "past day" topic searches the week since
        ("day", 1.01, "day"),  # a daily one stays a day (the scheduler's minutes are allowed for)
        ("day", 2, "week"),  # a day's retries later: the days since the last run
        ("week", 7, "week"),
        ("month", 7, "month"),  # a wider range chosen is kept
        ("week", 31, "year"),  # a month since the last run: no window narrower than a year covers it
        ("month", 400, ""),  # more than a year: any time
        ("", 7, ""),  # any time stays any time: the whole web, read afresh
    ],
)
def test_the_window_reaches_back_to_the_last_run(
    alice: User, chosen: str, days_ago: float, searched: str
) -> None:
    first = version(alice, "Tokenizer news", chosen, days_ago)
    assert scheduled_run(alice, first).time_range == searched


def test_the_chosen_range_comes_back_once_runs_are_as_often_as_it(alice: User) -> None:
    first = version(alice, "Tokenizer news", "day", 8)
    second = version(alice, "Tokenizer news", "week", 1.0, previous=first)  # widened when it ran
    assert scheduled_run(alice, second).time_range == "day"


@pytest.mark.parametrize(
    "question, time_range",
    [
        ("Tokenizer releases in 2023", ""),  # dates the question asks about stay those dates
        ("Tokenizer news this week", "week"),  # relative words are read on each run's own day
    ],
)
def test_a_question_that_names_its_period_keeps_it(alice: User, question: str, time_range: str) -> None:
    first = version(alice, question, time_range, 40)
    assert scheduled_run(alice, first).time_range == time_range


def test_the_route_stage_reads_the_moved_window_as_the_run_s_period(alice: User) -> None:
    """The search's date filter (`period_start`) follows the moved range on the run's day."""
    from research.pipeline import timeparse
    from research.pipeline.stages import route

    first = version(alice, "Tokenizer news", "day", 7)
    running = scheduled_run(alice, first)
    today = timezone.localdate(running.created_at)
    chosen = route.Route(route.Domain.GENERAL, False, False)
    route._save_route(
        running, chosen, Topic.Route.SEARCH, timeparse.parse_period(running.question, today), today
    )
    assert running.period_start is not None
    assert running.period_start <= timezone.localdate(first.created_at)
