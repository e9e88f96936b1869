"""Plan editing in one place: the page's plan actions go through `research.workflow`, which
checks the topic's state under its row lock. An edit that races an approval waits for it and is
refused, instead of changing a plan the worker is about to run; a move is one statement."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from research import workflow
from research.models import SubQuery, Topic

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
