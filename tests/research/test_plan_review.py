"""Plan review never loses work: every button of the plan form sends every field, so text typed
and not saved is saved by whatever is clicked next; a field that cannot be saved comes back with
its error beside it and everything else typed still in place."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import DjangoCaptureOnCommitCallbacks

from research.models import SubQuery, Topic

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def awaiting(owner: User) -> tuple[Topic, list[SubQuery]]:
    topic = Topic.objects.create(
        owner=owner, question="What is Mixture of Tokens?", status="awaiting_approval"
    )
    rows = [
        SubQuery.objects.create(topic=topic, position=position, text=text)
        for position, text in enumerate(["What is it?", "Where is it used?", "How was it improved?"])
    ]
    return topic, rows


def fields(rows: list[SubQuery], **typed: str) -> dict[str, str]:
    """What the plan form sends: every row's field (as typed) and the *Add* field."""
    data = {f"text-{row.pk}": typed.get(f"row{index}", row.text) for index, row in enumerate(rows)}
    data["text"] = typed.get("new", "")
    return data


def plan(topic: Topic) -> list[tuple[str, str]]:
    return list(topic.subqueries.order_by("position", "id").values_list("text", "origin"))


def test_approve_researches_the_unsaved_edits_and_the_unadded_sub_query(
    alice_client: Client, alice: User, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    topic, rows = awaiting(alice)
    data = fields(rows, row1="Which   products use it?", new="Who criticised it?")
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("plan_approve", args=[topic.pk]), data)
    assert response.status_code == 302
    topic.refresh_from_db()
    assert topic.status == Topic.Status.QUEUED
    assert plan(topic) == [
        ("What is it?", "llm"),
        ("Which products use it?", "user"),
        ("How was it improved?", "llm"),
        ("Who criticised it?", "user"),
    ]


def test_approve_with_an_emptied_field_shows_the_error_beside_it_and_keeps_every_typed_text(
    alice_client: Client, alice: User
) -> None:
    topic, rows = awaiting(alice)
    data = fields(rows, row0="   ", row2="Typed but never saved", new="Typed into Add")
    response = alice_client.post(reverse("plan_approve", args=[topic.pk]), data)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="sq-{0}" name="text-{0}"'.format(rows[0].pk) in html
    assert f'aria-describedby="sq-{rows[0].pk}-error"' in html
    assert f'id="sq-{rows[0].pk}-error" role="alert">A sub-query cannot be empty.' in html
    assert ">Typed but never saved</textarea>" in html
    assert ">Typed into Add</textarea>" in html
    topic.refresh_from_db()
    assert topic.status == Topic.Status.AWAITING_APPROVAL
    assert [text for text, _origin in plan(topic)] == [
        "What is it?",
        "Where is it used?",
        "How was it improved?",
    ]


def test_an_empty_add_answers_400_with_the_error_and_the_typed_rows(
    alice_client: Client, alice: User
) -> None:
    topic, rows = awaiting(alice)
    data = fields(rows, row0="Edited first")
    response = alice_client.post(reverse("subquery_add", args=[topic.pk]), data, headers=HTMX)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="new-subquery-error" role="alert">A sub-query cannot be empty.' in html
    assert ">Edited first</textarea>" in html
    assert topic.subqueries.count() == 3


def test_moving_a_row_saves_what_was_typed_in_others(alice_client: Client, alice: User) -> None:
    topic, rows = awaiting(alice)
    data = {**fields(rows, row0="First, edited", new="Not added yet"), "direction": "down"}
    response = alice_client.post(reverse("subquery_move", args=[topic.pk, rows[2].pk]), data, headers=HTMX)
    assert response.status_code == 200
    assert [text for text, _origin in plan(topic)] == [
        "First, edited",
        "Where is it used?",
        "How was it improved?",
    ]
    # The text typed into Add stays in its field.
    assert ">Not added yet</textarea>" in response.content.decode()
    up = {**fields(rows), "direction": "up"}
    alice_client.post(reverse("subquery_move", args=[topic.pk, rows[2].pk]), up, headers=HTMX)
    assert [text for text, _origin in plan(topic)][1] == "How was it improved?"


def test_deleting_a_row_ignores_its_own_empty_field_and_saves_the_others(
    alice_client: Client, alice: User
) -> None:
    topic, rows = awaiting(alice)
    data = fields(rows, row1="", row2="Third, edited")
    response = alice_client.post(reverse("subquery_delete", args=[topic.pk, rows[1].pk]), data, headers=HTMX)
    assert response.status_code == 200
    assert plan(topic) == [("What is it?", "llm"), ("Third, edited", "user")]


def test_save_saves_every_field_of_the_form(alice_client: Client, alice: User) -> None:
    topic, rows = awaiting(alice)
    data = fields(rows, row0="One", row2="Three")
    alice_client.post(reverse("subquery_update", args=[topic.pk, rows[0].pk]), data, headers=HTMX)
    assert [text for text, _origin in plan(topic)] == ["One", "Where is it used?", "Three"]


def test_an_emptied_plan_cannot_be_approved_and_says_why(alice_client: Client, alice: User) -> None:
    topic, rows = awaiting(alice)
    for row in rows:
        row.delete()
    response = alice_client.post(reverse("plan_approve", args=[topic.pk]), {"text": ""})
    assert response.status_code == 400
    assert "Add at least one sub-query" in response.content.decode()
    topic.refresh_from_db()
    assert topic.status == Topic.Status.AWAITING_APPROVAL
