"""Plan editing in one place: the page's plan actions go through `research.workflow`, which
checks the topic's state under its row lock. An edit that races an approval waits for it and is
refused, instead of changing a plan the worker is about to run; a move is one statement."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import QuerySet
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from mindsearch.models import ApiToken
from research import workflow
from research.models import SubQuery, Topic
from tests.api.conftest import ApiClient

HTMX = {"HX-Request": "true"}
TEXTS = ["What is it?", "Where is it used?", "How was it improved?"]


def awaiting(owner: User) -> tuple[Topic, list[SubQuery]]:
    topic = Topic.objects.create(
        owner=owner, question="What is Mixture of Tokens?", status="awaiting_approval"
    )
    rows = [SubQuery.objects.create(topic=topic, position=n, text=text) for n, text in enumerate(TEXTS)]
    return topic, rows


def plan(topic: Topic) -> list[str]:
    return list(topic.subqueries.order_by("position", "id").values_list("text", flat=True))


@contextmanager
def approval_in_progress(topic: Topic, holds_for: float = 0.5) -> Iterator[None]:
    """Another request approving the plan: it holds the topic's row lock with the status set
    to queued, not yet committed, for `holds_for` seconds."""
    locked, release = threading.Event(), threading.Event()

    def approve() -> None:
        try:
            with transaction.atomic():
                row = Topic.objects.select_for_update().get(pk=topic.pk)
                row.status = Topic.Status.QUEUED
                row.save(update_fields=["status"])
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    approver = threading.Thread(target=approve)
    approver.start()
    assert locked.wait(10), "the approving transaction did not start"
    timer = threading.Timer(holds_for, release.set)
    timer.start()
    try:
        yield
    finally:
        release.set()
        timer.cancel()
        approver.join(10)


RACING_ACTIONS = [
    ("subquery_update", 0, {"text": "Changed while approved"}),
    ("subquery_delete", 1, {}),
    ("subquery_move", 2, {"direction": "up"}),
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("action", "row", "data"), RACING_ACTIONS, ids=[a for a, _r, _d in RACING_ACTIONS])
def test_a_plan_action_racing_an_approval_waits_for_it_and_changes_nothing(
    alice_client: Client, alice: User, action: str, row: int, data: dict[str, str]
) -> None:
    topic, rows = awaiting(alice)
    with approval_in_progress(topic):
        response = alice_client.post(reverse(action, args=[topic.pk, rows[row].pk]), data, headers=HTMX)
    assert response.status_code == 404
    assert plan(topic) == TEXTS
    assert SubQuery.objects.filter(topic=topic, origin=SubQuery.Origin.USER).count() == 0


@pytest.mark.django_db(transaction=True)
def test_workflow_steps_refuse_a_plan_approved_while_they_waited(alice: User) -> None:
    topic, rows = awaiting(alice)
    steps = [
        lambda: workflow.update_subquery(topic, rows[0].pk, "Changed"),
        lambda: workflow.delete_subquery(topic, rows[1].pk),
        lambda: workflow.move_subquery(topic, rows[2].pk, up=True),
        lambda: workflow.replace_plan(topic, [(rows[0].pk, "Changed")]),
    ]
    for step in steps:
        Topic.objects.filter(pk=topic.pk).update(status=Topic.Status.AWAITING_APPROVAL)
        with approval_in_progress(topic, holds_for=0.2), pytest.raises(workflow.Refused):
            step()
    assert plan(topic) == TEXTS


@pytest.mark.django_db
def test_a_move_renumbers_the_plan_in_one_statement(alice_client: Client, alice: User) -> None:
    topic, _rows = awaiting(alice)
    extra = [SubQuery.objects.create(topic=topic, position=n, text=f"More {n}") for n in range(3, 8)]
    with CaptureQueriesContext(connection) as queries:
        response = alice_client.post(
            reverse("subquery_move", args=[topic.pk, extra[-1].pk]), {"direction": "up"}, headers=HTMX
        )
    assert response.status_code == 200
    updates = [
        q["sql"] for q in queries.captured_queries if q["sql"].startswith('UPDATE "research_subquery"')
    ]
    assert len(updates) == 1, updates
    assert plan(topic) == [*TEXTS, "More 3", "More 4", "More 5", "More 7", "More 6"]
    assert list(topic.subqueries.order_by("position").values_list("position", flat=True)) == list(range(8))


@pytest.mark.django_db
def test_a_move_at_either_end_keeps_the_order(alice: User) -> None:
    topic, rows = awaiting(alice)
    workflow.move_subquery(topic, rows[0].pk, up=True)
    workflow.move_subquery(topic, rows[2].pk, up=False)
    assert plan(topic) == TEXTS


@pytest.mark.django_db
def test_steps_refuse_a_sub_query_of_another_topic(alice: User, bob: User) -> None:
    topic, _rows = awaiting(alice)
    other_topic, others = awaiting(bob)
    with pytest.raises(workflow.NotInPlan):
        workflow.update_subquery(topic, others[0].pk, "Mine now")
    with pytest.raises(workflow.NotInPlan):
        workflow.delete_subquery(topic, others[0].pk)
    with pytest.raises(workflow.NotInPlan):
        workflow.move_subquery(topic, others[0].pk, up=True)
    assert plan(other_topic) == TEXTS


@pytest.mark.django_db
def test_an_edit_makes_the_sub_query_the_users_own_only_when_its_text_changed(alice: User) -> None:
    topic, rows = awaiting(alice)
    workflow.update_subquery(topic, rows[0].pk, rows[0].text)
    workflow.update_subquery(topic, rows[1].pk, "Which products use it?")
    origins = list(topic.subqueries.order_by("position").values_list("origin", flat=True))
    assert origins == [SubQuery.Origin.LLM, SubQuery.Origin.USER, SubQuery.Origin.LLM]


@pytest.mark.django_db
def test_the_console_approves_through_the_step_without_queueing_a_worker(alice: User) -> None:
    from django_q.models import OrmQ

    topic, _rows = awaiting(alice)
    workflow.approve_plan(topic, queue=False)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.QUEUED and not OrmQ.objects.exists()
    with pytest.raises(workflow.Refused):  # approved once, as on the page
        workflow.approve_plan(topic, queue=False)


@pytest.mark.django_db
def test_deleting_a_topic_takes_its_rows_in_any_state(alice: User) -> None:
    for status in (Topic.Status.AWAITING_APPROVAL, Topic.Status.RUNNING, Topic.Status.COMPLETED):
        topic, _rows = awaiting(alice)
        Topic.objects.filter(pk=topic.pk).update(status=status)
        workflow.delete_topic(topic)
        assert not Topic.objects.filter(pk=topic.pk).exists()
        assert not SubQuery.objects.filter(topic_id=topic.pk).exists()
        workflow.delete_topic(topic)  # a second tab's delete finds nothing left


# --- One path: a user's action writes a plan or a status only through research/workflow.py -------

OURS = ("mindsearch", "research", "retrieval", "mcphub", "tests")


def _writer() -> str:
    """The module that called the models' save path: the first of our frames outside
    research/models.py (whose `Topic.set_status` and `Topic.fail` are save paths themselves)."""
    for frame in inspect.stack()[2:]:
        module = str(frame.frame.f_globals.get("__name__", ""))
        if module.split(".")[0] in OURS and module != "research.models":
            return module
    return "?"


@pytest.fixture
def writers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Who writes a topic's status, deletes a topic, or writes its plan, through the models' own
    save paths: `Topic.save` with its status, `Topic.delete`, `SubQuery.save`/`delete`, and the
    querysets' bulk writes of either."""
    found: list[str] = []

    def spy(original: Callable[..., Any], writes: Callable[..., bool]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if writes(self, *args, **kwargs):
                found.append(_writer())
            return original(self, *args, **kwargs)

        return call

    def status_saved(row: Topic, *_args: Any, update_fields: Any = None, **_kwargs: Any) -> bool:
        return update_fields is None or "status" in update_fields

    def plan_or_topic(rows: QuerySet, *_args: Any, **kwargs: Any) -> bool:
        return rows.model is SubQuery or (rows.model is Topic and (not kwargs or "status" in kwargs))

    monkeypatch.setattr(Topic, "save", spy(Topic.save, status_saved))
    monkeypatch.setattr(Topic, "delete", spy(Topic.delete, lambda *_a, **_k: True))
    monkeypatch.setattr(SubQuery, "save", spy(SubQuery.save, lambda *_a, **_k: True))
    monkeypatch.setattr(SubQuery, "delete", spy(SubQuery.delete, lambda *_a, **_k: True))
    for method in ("update", "delete", "bulk_create", "bulk_update"):
        monkeypatch.setattr(QuerySet, method, spy(getattr(QuerySet, method), plan_or_topic))
    return found


@pytest.mark.django_db
def test_the_spy_names_the_module_that_writes(alice: User, writers: list[str]) -> None:
    """It can fail: a write from outside the workflow is named by its module (this one)."""
    topic, rows = awaiting(alice)
    topic.set_status(Topic.Status.QUEUED)
    SubQuery.objects.filter(pk=rows[0].pk).update(text="x")
    rows[1].delete()
    Topic.objects.filter(pk=topic.pk).update(status=Topic.Status.CANCELLED)
    assert writers[-4:] == [__name__] * 4


@pytest.mark.django_db
def test_the_pages_and_the_api_write_a_plan_or_a_status_only_through_the_workflow(
    alice: User, alice_client: Client, writers: list[str]
) -> None:
    """Every entry point edits a plan and moves a topic through `research.workflow`, under the
    topic's row lock and within the fair-use limits; none writes the rows itself."""
    _row, token = ApiToken.issue(alice, "tests")
    api = ApiClient(token)
    topic, rows = awaiting(alice)
    writers.clear()
    pages = [
        ("subquery_add", [topic.pk], {"text": "A new one"}),
        ("subquery_update", [topic.pk, rows[0].pk], {"text": "Changed"}),
        ("subquery_move", [topic.pk, rows[2].pk], {"direction": "up"}),
        ("subquery_delete", [topic.pk, rows[1].pk], {}),
    ]
    for name, args, data in pages:
        assert alice_client.post(reverse(name, args=args), data, headers=HTMX).status_code == 200, name
    kept = [{"id": pk, "text": text} for pk, text in topic.subqueries.values_list("pk", "text")]
    assert api.put(f"/api/topics/{topic.pk}/plan", {"subqueries": kept}).status_code == 200
    assert api.post(f"/api/topics/{topic.pk}/plan/approve").status_code == 200
    assert api.post(f"/api/topics/{topic.pk}/cancel").status_code == 200
    assert alice_client.post(reverse("topic_rerun", args=[topic.pk])).status_code == 302
    assert alice_client.post(reverse("topic_cancel", args=[topic.pk])).status_code == 302
    assert api.post(f"/api/topics/{topic.pk}/rerun").status_code == 200
    assert alice_client.post(reverse("topic_delete", args=[topic.pk])).status_code == 302
    other, _rows = awaiting(alice)
    writers_before = len(writers)
    assert api.delete(f"/api/topics/{other.pk}").status_code == 204
    assert len(writers) > writers_before and not Topic.objects.filter(pk__in=[topic.pk, other.pk]).exists()
    assert writers and set(writers) - {__name__} == {"research.workflow"}
