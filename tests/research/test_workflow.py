"""Plan editing in one place: the page's plan actions go through `research.workflow`, which
checks the topic's state under its row lock. An edit that races an approval waits for it and is
refused, instead of changing a plan the worker is about to run; a move is one statement."""

from __future__ import annotations

import ast
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
from tests.support.code import ROOT, application_modules, name_of

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


# --- One path: only the workflow and the run write a plan or a status ---------------------------

# Who may write sub-queries or a status, or delete a topic, besides the user's steps, and why.
WRITERS_ALLOWED = {
    "research/workflow.py": "the user's steps: under the topic's row lock, within the limits",
    "research/models.py": "`Topic.fail` and `Topic.set_status` themselves, which the allowed writers call",
    "research/pipeline/run.py": "the run loop moves the topic it holds the lock of from stage to stage",
    "research/pipeline/stages/plan.py": "the plan stage writes the plan the user then reviews",
    "research/pipeline/stages/deep.py": "a deep round adds the sub-queries of the next round",
    "research/pipeline/stages/years.py": "the per-year search adds one sub-query per year asked about",
    "research/pipeline/followup.py": "a follow-up's search runs as a sub-query of its own",
    "research/tasks.py": "a stopping worker hands its topic (or follow-up) back to the queue",
    "research/archive/": "an import restores a finished topic's rows (plan size checked by the workflow)",
    "retrieval/models.py": "an upload's own status (`UploadedDocument.fail`), not a topic's",
    "retrieval/ingest.py": "the ingest moves the upload it holds through its statuses, not a topic",
    "mindsearch/worker.py": "`broker.fail` marks a queued task failed, not a topic",
    "mindsearch/clients/reader.py": "`ReaderError.status` is an HTTP status code",
    "research/delivery.py": "a delivery's own status (`Delivery.status`), not a topic's",
}
# Methods that write rows when called on a manager, a queryset or a row.
WRITE_METHODS = {"create", "bulk_create", "get_or_create", "update_or_create", "update", "bulk_update"}
ROW_WRITES = {"save", "delete"}
# Queryset methods a write may be chained after: `topic.subqueries.filter(...).delete()`.
CHAINED = {"filter", "exclude", "all", "order_by", "select_for_update", "select_related", "only", "defer"}


def _receiver(node: ast.expr) -> ast.expr:
    """What a chain of queryset methods starts from: `topic.subqueries` of
    `topic.subqueries.filter(...).exclude(...)`."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CHAINED:
        node = node.func.value
    return node


def _manager_of(node: ast.expr, model: str) -> bool:
    """`node` is `model.objects`."""
    return isinstance(node, ast.Attribute) and node.attr == "objects" and name_of(node.value) == model


def _is_topic(node: ast.expr) -> bool:
    """`node` is, by its spelling, a topic or topics: a name with "topic" in it (`topic`,
    `locked_topic`, `self.topic`), a call of such a function (`_topic(request, id)`,
    `get_object_or_404(Topic, ...)`), or any chain of methods on `Topic.objects` (every
    `TopicQuerySet` method: `Topic.objects.for_user(u).active().get(pk=1)`). A heuristic: a
    topic held in a variable named otherwise goes unseen."""
    while isinstance(node, ast.Call):
        func = node.func
        if "topic" in name_of(func).lower() or any(name_of(arg) == "Topic" for arg in node.args):
            return True
        if not isinstance(func, ast.Attribute):
            return False
        node = func.value  # a method on a queryset or a row: look at what it is called on
    return _manager_of(node, "Topic") or "topic" in name_of(node).lower()


def _writes_plan_or_status(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "SubQuery"  # a new row, to be saved
    if not isinstance(func, ast.Attribute):
        return False
    receiver = _receiver(func.value)
    name = name_of(receiver)
    subqueries = name == "subqueries" or _manager_of(receiver, "SubQuery")
    return (
        func.attr in ("set_status", "fail")  # on any receiver
        or (func.attr in WRITE_METHODS and subqueries)
        or (func.attr in ROW_WRITES and (subqueries or "subquer" in name.lower()))
        or (func.attr == "update" and any(k.arg == "status" for k in call.keywords))  # on anything
        or (func.attr == "delete" and _is_topic(func.value))  # only `workflow.delete_topic` deletes a topic
    )


def _sets_status(node: ast.stmt) -> bool:
    """`x.status = ...` (or `x.status, y = ...`, `x.status: str = ...`) for any `x`."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    else:
        return False
    flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple | ast.List) else [t])]
    return any(isinstance(target, ast.Attribute) and target.attr == "status" for target in flat)


def plan_and_status_writes(source: str) -> list[int]:
    """The lines of `source` that write sub-queries or a status, or delete a topic."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if (isinstance(node, ast.Call) and _writes_plan_or_status(node))
        or (isinstance(node, ast.stmt) and _sets_status(node))
    )


def _allowed(relative: str) -> bool:
    return any(relative == allowed or relative.startswith(allowed) for allowed in WRITERS_ALLOWED)


def test_only_the_workflow_and_the_run_write_a_plan_or_a_status() -> None:
    """Every entry point (page, API, MCP, console, admin) edits a plan and moves a topic through
    `research.workflow`; a module that writes sub-queries or calls `set_status` itself skips the
    row lock and the fair-use limits."""
    found = {}
    for module in application_modules():
        relative = module.relative_to(ROOT).as_posix()
        lines = plan_and_status_writes(module.read_text())
        if lines and not _allowed(relative):
            found[relative] = lines
    assert not found, f"plan or status written outside research/workflow.py: {found}"
    missing = [allowed for allowed in WRITERS_ALLOWED if not (ROOT / allowed).exists()]
    assert not missing, f"allowed writers that no longer exist (renamed? update WRITERS_ALLOWED): {missing}"


@pytest.mark.parametrize(
    "line",
    [
        "topic.set_status(Topic.Status.QUEUED)",
        "SubQuery.objects.create(topic=topic, text='x')",
        "SubQuery.objects.bulk_create(rows)",
        "SubQuery.objects.filter(topic=topic).update(text='x')",
        "topic.subqueries.create(text='x')",
        "topic.subqueries.filter(round=1).delete()",
        "topic.subqueries.all().delete()",
        "subquery.save(update_fields=['text'])",
        "self.subquery.delete()",
        "SubQuery(topic=topic, text='x')",
        "Topic.objects.filter(pk=1).update(status='queued')",
        "Topic.objects.for_user(u).filter(pk=1).update(status='queued')",
        "Topic.objects.active().update(status='failed')",
        "queued.update(status=new_status, heartbeat_at=None)",
        "locked_topic.fail('boom')",
        "row.fail('boom')",
        "topic.status = Topic.Status.QUEUED",
        "self.topic.status = 'failed'",
        "row.status, row.finished_at = 'failed', None",
        "_topic(request, topic_id).delete()",
        "topic.delete()",
        "ctx.topic.delete()",
        "Topic.objects.filter(pk=1).delete()",
        "Topic.objects.for_user(u).matching('x').delete()",
        "Topic.objects.get(pk=1).delete()",
        "get_object_or_404(Topic, pk=1).delete()",
    ],
)
def test_the_guard_sees_every_way_of_writing(line: str) -> None:
    assert plan_and_status_writes(line) == [1]


@pytest.mark.parametrize(
    "line",
    [
        "topic.subqueries.filter(round=1).count()",
        "subquery.search_queries.create(text='x')",
        "Hit.objects.filter(subquery=subquery).delete()",
        "Topic.objects.filter(pk=1).update(heartbeat_at=None)",
        "topic.followups.all().delete()",
        "Topic.objects.get(pk=1).documents.all().delete()",
        "status = 'failed'",
        "topic.error = 'boom'",
    ],
)
def test_the_guard_leaves_other_rows_alone(line: str) -> None:
    assert plan_and_status_writes(line) == []
