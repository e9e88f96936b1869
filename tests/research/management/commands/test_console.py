"""`manage.py research "QUESTION" --yes`: the whole pipeline in the foreground, report printed."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from research.models import Report, SubQuery, Topic
from tests.support import processes
from tests.support.world import TOPIC, world

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_console_research_prints_a_sectioned_cited_report(alice: User) -> None:
    with world() as w:
        done = processes.manage(
            "research", TOPIC, "--yes", "--user", "alice", env=processes.process_env(**w.env())
        )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for stage in ("queries", "search", "score_hits", "read", "summarise", "score_summaries", "answer"):
        assert re.search(rf"{stage}\s+\[#+\]", out), stage
    assert "Written by model test-model" in out
    assert "## Введение" in out and "## Заключение" in out and "## Источники" in out
    topic = Topic.objects.get(owner=alice)
    assert topic.status == Topic.Status.COMPLETED
    # The printed citations point at the highest-scored pages, listed with their URLs.
    report = Report.objects.get(topic=topic)
    top = report.sources[0]
    assert top["score"] == max(source["score"] for source in report.sources)
    assert f"1. [{top['title']}]({top['url']})" in out


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_console_at_a_saved_point_and_hands_the_topic_to_the_queue(
    alice: User, stop: signal.Signals, tmp_path: Any
) -> None:
    """Ctrl-C in the middle of the search: the run stops before its next call, with what it got
    saved, the topic waits in the queue for a worker, and the console says so — no traceback."""
    from django_q.models import OrmQ

    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with world(llm_latency=1.0) as w, out.open("w") as stdout, err.open("w") as stderr:
        console = subprocess.Popen(
            [sys.executable, "manage.py", "research", TOPIC, "--yes", "--user", "alice"],
            cwd=processes.ROOT,
            env=processes.process_env(**w.env()),
            stdout=stdout,
            stderr=stderr,
        )
        try:
            deadline = time.monotonic() + 120
            while not re.search(r"queries\s+\[#+", out.read_text()):  # a sub-query's queries are saved
                running = console.poll() is None and time.monotonic() < deadline
                assert running, out.read_text() + err.read_text()
                time.sleep(0.1)
            console.send_signal(stop)
            assert console.wait(30) == 130
        finally:
            processes.stop(console)
    said = err.read_text()
    assert "Traceback" not in said, said
    topic = Topic.objects.get(owner=alice)
    assert f"Stopped: topic #{topic.pk} (queued) is saved where it stood" in said, said
    assert topic.status == Topic.Status.QUEUED and topic.heartbeat_at is None
    assert [task.task["func"] for task in OrmQ.objects.all()] == ["research.tasks.run"]
    assert topic.subqueries.filter(search_queries__isnull=False).exists()  # kept, not asked again


def test_console_needs_a_terminal_or_yes(alice: User) -> None:
    with world() as w:
        done = processes.manage("research", TOPIC, "--user", "alice", env=processes.process_env(**w.env()))
    assert done.returncode != 0
    assert "--yes" in done.stderr
    assert Topic.objects.get(owner=alice).status == Topic.Status.AWAITING_APPROVAL


def test_console_names_a_missing_user(db: None) -> None:
    done = processes.manage("research", "anything", "--yes", "--user", "nobody", env=processes.process_env())
    assert done.returncode != 0
    assert "No user named 'nobody'" in done.stderr


def test_console_deep_mode_prints_its_rounds(alice: User) -> None:
    from tests.support.deep_world import QUESTION, deep_world

    with deep_world() as w:
        env = processes.process_env(**w.env())
        done = processes.manage("research", QUESTION, "--yes", "--mode", "deep", "--user", "alice", env=env)
    assert done.returncode == 0, done.stderr
    assert "Round 2: 3 new sub-queries" in done.stdout
    assert "Stopped searching after round 4: growth 0.00 is under 0.1" in done.stdout
    assert Topic.objects.get(owner=alice).rounds.count() == 4


def test_console_answers_a_greeting_without_searching(alice: User) -> None:
    with world() as w:
        done = processes.manage(
            "research", "Привет!", "--user", "alice", env=processes.process_env(**w.env())
        )
        assert not w.searxng.requests
    assert done.returncode == 0, done.stderr
    assert "Здравствуйте! Задайте тему для исследования." in done.stdout


def test_console_topic_is_in_the_questions_language(alice: User) -> None:
    """Created through the workflow, as the page and the API create theirs."""
    with world() as w:
        processes.manage(
            "research", "What is Mixture of Tokens?", "--user", "alice", env=processes.process_env(**w.env())
        )
    assert Topic.objects.get(owner=alice).language == "en"


def test_console_plan_edits_go_through_the_workflow(alice: User, monkeypatch: pytest.MonkeyPatch) -> None:
    from io import StringIO

    from research.management.commands.research import Command
    from research.models import SubQuery

    topic = Topic.objects.create(owner=alice, question=TOPIC, status=Topic.Status.AWAITING_APPROVAL)
    first = SubQuery.objects.create(topic=topic, text="one", position=0)
    SubQuery.objects.create(topic=topic, text="two", position=1)
    command = Command(stdout=StringIO(), stderr=StringIO())
    monkeypatch.setattr("builtins.input", lambda prompt="": "one, edited")
    command._apply(topic, list(topic.subqueries.order_by("position")), "e 1")
    first.refresh_from_db()
    assert (first.text, first.origin) == ("one, edited", SubQuery.Origin.USER)
    # Once the plan is approved, the console can no longer change it behind the worker's back.
    topic.set_status(Topic.Status.QUEUED)
    command._apply(topic, list(topic.subqueries.order_by("position")), "d 2")
    assert topic.subqueries.count() == 2
    assert command.stderr.getvalue()


@pytest.mark.parametrize("refusal", ["active topics", "plan size"])
def test_console_approval_meets_the_pages_refusals(
    alice: User, settings: Any, monkeypatch: pytest.MonkeyPatch, refusal: str
) -> None:
    """The reviewed plan is approved through the workflow: over a limit the console says why,
    exits non-zero and runs nothing; the plan stays for review."""
    from research.management.commands import research as console

    settings.RESEARCH_MAX_ACTIVE_TOPICS, settings.RESEARCH_MAX_SUBQUERIES = 2, 3
    count = 4 if refusal == "plan size" else 1

    def planned(topic_id: int, listeners: Any) -> bool:
        topic = Topic.objects.get(pk=topic_id)
        SubQuery.objects.bulk_create(
            SubQuery(topic=topic, text=f"part {n}", position=n) for n in range(count)
        )
        topic.set_status(Topic.Status.AWAITING_APPROVAL)
        if refusal == "active topics":  # two more started on the page while the plan was reviewed
            for _n in range(2):
                Topic.objects.create(owner=alice, question="Another", status=Topic.Status.RUNNING)
        return False

    def not_run(topic_id: int, listeners: Any) -> str:
        raise AssertionError("a refused plan must not run")

    monkeypatch.setattr(console, "plan_topic", planned)
    monkeypatch.setattr(console, "run_topic", not_run)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt="": "")  # Enter: approve as planned
    message = "already have 2 topics" if refusal == "active topics" else "at most 3 sub-queries"
    with pytest.raises(CommandError, match=f"was not approved: .*{message}"):
        call_command("research", "How do tides work?", "--user", "alice", stdout=StringIO())
    topic = Topic.objects.get(owner=alice, question="How do tides work?")
    assert topic.status == Topic.Status.AWAITING_APPROVAL


def planned_for_review(topic_id: int, listeners: Any) -> bool:
    """`plan_topic` as the console calls it, planning one sub-query for the user's review."""
    topic = Topic.objects.get(pk=topic_id)
    SubQuery.objects.create(topic=topic, text="one", position=0)
    topic.set_status(Topic.Status.AWAITING_APPROVAL)
    return False


def test_ctrl_c_at_the_plan_review_leaves_the_plan_waiting_on_its_page(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    from research.management.commands import research as console

    def ctrl_c(prompt: str = "") -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(console, "plan_topic", planned_for_review)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", ctrl_c)
    with pytest.raises(CommandError, match="waits for review on its page") as stopped:
        call_command("research", "How do tides work?", "--user", "alice", stdout=StringIO())
    assert stopped.value.returncode == 130
    assert Topic.objects.get(owner=alice).status == Topic.Status.AWAITING_APPROVAL


def test_console_approval_runs_the_plan_in_its_own_process(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_q.models import OrmQ

    from research.management.commands import research as console

    ran: list[str] = []

    def run(topic_id: int, listeners: Any) -> str:
        ran.append(Topic.objects.get(pk=topic_id).status)
        raise CommandError("stop here")

    monkeypatch.setattr(console, "plan_topic", planned_for_review)
    monkeypatch.setattr(console, "run_topic", run)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt="": "")
    with pytest.raises(CommandError, match="stop here"):
        call_command("research", "How do tides work?", "--user", "alice", stdout=StringIO())
    assert ran == [Topic.Status.QUEUED] and not OrmQ.objects.exists()  # run here, not by a worker
