"""Approving a plan is one workflow step in one transaction, the same for the page, the API, MCP
and the console: it approves exactly the plan the user was shown (with the page's edits), and a
plan changed elsewhere since it was shown is refused with a clear message and nothing saved."""

from __future__ import annotations

import asyncio
import json
import re
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from mcp.client import Client as McpClient

from mcphub import server as mcp_server
from mindsearch.models import ApiToken
from research import workflow
from research.models import SubQuery, Topic
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db

CHANGED = "The plan was changed elsewhere"


def awaiting(owner: User) -> tuple[Topic, list[SubQuery]]:
    topic = Topic.objects.create(
        owner=owner, question="What is Mixture of Tokens?", status="awaiting_approval"
    )
    rows = [
        SubQuery.objects.create(topic=topic, position=position, text=text)
        for position, text in enumerate(["What is it?", "Where is it used?"])
    ]
    return topic, rows


def texts(topic: Topic) -> list[str]:
    return list(topic.subqueries.order_by("position", "id").values_list("text", flat=True))


def status(topic: Topic) -> str:
    return Topic.objects.get(pk=topic.pk).status


def edit_elsewhere(topic: Topic, row: SubQuery) -> None:
    """Another tab, a script or the console edits the plan after it was shown."""
    workflow.update_subquery(topic, row.pk, "Changed in another tab")


def shown_version(client: Client, topic: Topic) -> str:
    page = client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    found = re.search(r'name="plan_version" value="([0-9a-f]+)"', page)
    assert found, "the plan form carries the version of the plan it shows"
    return found.group(1)


# --- The step ---------------------------------------------------------------------------------


def test_the_version_changes_with_any_change_of_the_plan(alice: User) -> None:
    topic, rows = awaiting(alice)
    versions = {topic.plan_version()}
    workflow.update_subquery(topic, rows[0].pk, "What is it, really?")
    versions.add(topic.plan_version())
    workflow.move_subquery(topic, rows[0].pk, up=False)
    versions.add(topic.plan_version())
    workflow.add_subquery(topic, "Who made it?")
    versions.add(topic.plan_version())
    workflow.delete_subquery(topic, rows[1].pk)
    versions.add(topic.plan_version())
    assert len(versions) == 5
    assert topic.plan_version() == Topic.objects.get(pk=topic.pk).plan_version()


def test_a_refused_approval_saves_none_of_the_edits(alice: User, settings: Any) -> None:
    """Edits and approval are one transaction: the limit refuses the approval after the edits
    were written, and they are rolled back with it."""
    settings.RESEARCH_MAX_ACTIVE_TOPICS = 1
    topic, rows = awaiting(alice)
    Topic.objects.create(owner=alice, question="Another", status=Topic.Status.RUNNING)
    shown = workflow.ShownPlan(topic.plan_version(), [(rows[1].pk, "Only this, edited"), (None, "New")])
    with pytest.raises(workflow.OverLimit):
        workflow.approve_plan(topic, shown)
    assert texts(topic) == ["What is it?", "Where is it used?"]
    assert status(topic) == Topic.Status.AWAITING_APPROVAL


# --- The page ---------------------------------------------------------------------------------


def test_the_page_approves_the_plan_it_shows_with_its_edits(
    alice_client: Client, alice: User, django_capture_on_commit_callbacks: Any
) -> None:
    topic, rows = awaiting(alice)
    data = {
        "plan_version": shown_version(alice_client, topic),
        f"text-{rows[0].pk}": "What is it, exactly?",
        f"text-{rows[1].pk}": rows[1].text,
        "text": "Who made it?",
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("plan_approve", args=[topic.pk]), data)
    assert response.status_code == 302
    assert status(topic) == Topic.Status.QUEUED
    assert texts(topic) == ["What is it, exactly?", "Where is it used?", "Who made it?"]


def test_the_page_refuses_a_plan_changed_in_another_tab(alice_client: Client, alice: User) -> None:
    topic, rows = awaiting(alice)
    version = shown_version(alice_client, topic)
    edit_elsewhere(topic, rows[1])
    data = {
        "plan_version": version,
        f"text-{rows[0].pk}": "Typed here",
        f"text-{rows[1].pk}": "Where is it used?",
        "text": "Typed into Add",
    }
    response = alice_client.post(
        reverse("plan_approve", args=[topic.pk]), data, headers={"HX-Request": "true"}
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert CHANGED in html and 'role="alert"' in html
    assert ">Changed in another tab</textarea>" in html  # the plan as it is now, to check again
    assert ">Typed into Add</textarea>" in html  # what was typed into Add is not lost
    assert status(topic) == Topic.Status.AWAITING_APPROVAL
    assert texts(topic) == ["What is it?", "Changed in another tab"]  # the other tab's edit kept


def test_the_page_in_russian_says_so_in_russian(alice_client: Client, alice: User) -> None:
    topic, rows = awaiting(alice)
    version = shown_version(alice_client, topic)
    workflow.delete_subquery(topic, rows[0].pk)
    data = {"plan_version": version, f"text-{rows[1].pk}": rows[1].text, "text": ""}
    response = alice_client.post(
        reverse("plan_approve", args=[topic.pk]),
        data,
        headers={"HX-Request": "true", "Accept-Language": "ru"},
    )
    assert response.status_code == 400
    assert "План изменили в другом месте" in response.content.decode()


# --- The API ----------------------------------------------------------------------------------


def test_the_api_approves_the_version_it_was_shown_and_refuses_a_changed_one(
    alice: User, django_capture_on_commit_callbacks: Any
) -> None:
    api = ApiClient(ApiToken.issue(alice, "tests")[1])
    topic, rows = awaiting(alice)
    version = api.get(f"/api/topics/{topic.pk}/plan").json()["version"]
    edit_elsewhere(topic, rows[0])
    refused = api.post(f"/api/topics/{topic.pk}/plan/approve?version={version}")
    assert refused.status_code == 409 and CHANGED in refused.json()["detail"]
    assert status(topic) == Topic.Status.AWAITING_APPROVAL
    fresh = api.get(f"/api/topics/{topic.pk}/plan").json()["version"]
    with django_capture_on_commit_callbacks(execute=True):
        approved = api.post(f"/api/topics/{topic.pk}/plan/approve?version={fresh}")
    assert approved.status_code == 200 and approved.json()["status"] == "queued"


# --- MCP --------------------------------------------------------------------------------------


def mcp_call(user: User, tool: str, arguments: dict[str, Any]) -> Any:
    """Call a tool of the MCP server in-process, as its stdio transport does for its user."""

    async def call() -> Any:
        token = mcp_server.stdio_user_id.set(user.pk)
        try:
            async with McpClient(mcp_server.server) as client:
                return await client.call_tool(tool, arguments)
        finally:
            mcp_server.stdio_user_id.reset(token)

    return asyncio.run(call())


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    answer: dict[str, Any] = json.loads(result.content[0].text)
    return answer


@pytest.mark.django_db(transaction=True)
def test_mcp_approves_the_version_it_was_shown_and_refuses_a_changed_one(alice: User) -> None:
    topic, rows = awaiting(alice)
    version = structured(mcp_call(alice, "get_plan", {"topic_id": topic.pk}))["version"]
    edit_elsewhere(topic, rows[0])
    refused = mcp_call(alice, "approve_plan", {"topic_id": topic.pk, "version": version})
    assert refused.is_error and CHANGED in refused.content[0].text
    assert status(topic) == Topic.Status.AWAITING_APPROVAL
    fresh = structured(mcp_call(alice, "get_plan", {"topic_id": topic.pk}))["version"]
    approved = structured(mcp_call(alice, "approve_plan", {"topic_id": topic.pk, "version": fresh}))
    assert approved["status"] == "queued"


# --- The console ------------------------------------------------------------------------------


def console_review(alice: User, monkeypatch: pytest.MonkeyPatch, meanwhile: Any) -> list[str]:
    """`manage.py research` plans (stubbed), shows the plan and approves on Enter; `meanwhile`
    runs while the plan is on screen. The statuses the run saw."""
    from research.management.commands import research as console

    def planned(topic_id: int, listeners: Any) -> bool:
        topic = Topic.objects.get(pk=topic_id)
        SubQuery.objects.create(topic=topic, text="one", position=0)
        topic.set_status(Topic.Status.AWAITING_APPROVAL)
        return False

    ran: list[str] = []

    def run(topic_id: int, listeners: Any) -> str:
        ran.append(Topic.objects.get(pk=topic_id).status)
        raise CommandError("stop here")

    def enter(prompt: str = "") -> str:
        meanwhile(Topic.objects.get(owner=alice))
        return ""

    monkeypatch.setattr(console, "plan_topic", planned)
    monkeypatch.setattr(console, "run_topic", run)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", enter)
    with pytest.raises(CommandError) as stopped:
        call_command("research", "How do tides work?", "--user", "alice", stdout=StringIO())
    ran.append(str(stopped.value))
    return ran


def test_the_console_approves_the_plan_it_showed(alice: User, monkeypatch: pytest.MonkeyPatch) -> None:
    assert console_review(alice, monkeypatch, lambda topic: None) == [Topic.Status.QUEUED, "stop here"]


def test_the_console_refuses_a_plan_changed_while_it_was_shown(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    def edit(topic: Topic) -> None:
        workflow.add_subquery(topic, "Added by a script")

    [refusal] = console_review(alice, monkeypatch, edit)
    assert "was not approved" in refusal and CHANGED in refusal
    assert status(Topic.objects.get(owner=alice)) == Topic.Status.AWAITING_APPROVAL
