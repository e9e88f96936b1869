"""Fair use between users (issue 15): the sub-query cap holds for the page, the API, the console
and an imported archive, and one user has at most RESEARCH_MAX_ACTIVE_TOPICS topics at once."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management.base import CommandError
from django.test import Client
from django_q.models import OrmQ

from research import archive, workflow
from research.archive import checks as archive_checks
from research.management.commands.research import Command as ResearchCommand
from research.models import SubQuery, Topic
from tests.reliability.conftest import _finished_topic

pytestmark = pytest.mark.django_db(transaction=True)


def plan_of(owner: User, count: int, status: str = Topic.Status.AWAITING_APPROVAL) -> Topic:
    topic = Topic.objects.create(owner=owner, question="What is fair?", status=status)
    SubQuery.objects.bulk_create(SubQuery(topic=topic, text=f"part {n}", position=n) for n in range(count))
    return topic


def queued() -> int:
    return OrmQ.objects.count()


def test_the_page_add_stops_at_the_cap(alice: User, alice_client: Client, settings: Any) -> None:
    topic = plan_of(alice, settings.RESEARCH_MAX_SUBQUERIES)
    response = alice_client.post(
        f"/topics/{topic.pk}/subqueries/", {"text": "one more"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 400
    assert "at most 20 sub-queries" in response.content.decode()
    assert topic.subqueries.count() == settings.RESEARCH_MAX_SUBQUERIES


def test_the_api_plan_meets_the_same_cap(alice: User, alice_client: Client, settings: Any) -> None:
    settings.RESEARCH_MAX_SUBQUERIES = 3
    topic = plan_of(alice, 2)
    body = {"subqueries": [{"text": f"q {n}"} for n in range(4)]}
    response = alice_client.put(
        f"/api/topics/{topic.pk}/plan", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 409
    assert "at most 3 sub-queries" in response.json()["detail"]
    assert topic.subqueries.count() == 2


def test_a_plan_over_the_cap_is_not_approved_or_run_again(alice: User, alice_client: Client) -> None:
    waiting = plan_of(alice, 300)
    alice_client.post(f"/topics/{waiting.pk}/approve/")
    waiting.refresh_from_db()
    assert waiting.status == Topic.Status.AWAITING_APPROVAL
    failed = plan_of(alice, 300, status=Topic.Status.FAILED)
    response = alice_client.post(f"/topics/{failed.pk}/rerun/", follow=True)
    assert "at most 20 sub-queries" in response.content.decode()
    failed.refresh_from_db()
    assert failed.status == Topic.Status.FAILED
    assert queued() == 0


def test_an_archive_with_a_plan_over_the_cap_is_refused(alice: User, bob: User) -> None:
    topic = _finished_topic(alice)
    data = json.loads(archive.dumps(archive.topic_data(topic)))
    row = data["subqueries"][0]
    more = [{**copy.deepcopy(row), "id": 10_000 + n, "position": n} for n in range(1, 300)]
    data["subqueries"] = [row, *more]
    data["topic"]["status"] = Topic.Status.FAILED
    with pytest.raises(archive_checks.ArchiveError, match="at most 20 sub-queries"):
        archive.import_topic(data, bob)
    assert not Topic.objects.filter(owner=bob).exists()


def test_the_console_add_meets_the_cap(alice: User, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.RESEARCH_MAX_SUBQUERIES = 2
    topic = plan_of(alice, 2)
    command = ResearchCommand()
    errors: list[str] = []
    monkeypatch.setattr(command.stderr, "write", errors.append)
    monkeypatch.setattr("builtins.input", lambda _prompt="": "a third one")
    command._apply(topic, list(topic.subqueries.all()), "a")
    assert topic.subqueries.count() == 2
    assert any("at most 2 sub-queries" in error for error in errors)


@pytest.mark.usefixtures("web_search_configured")
def test_one_user_has_at_most_n_topics_running(alice: User, bob: User, settings: Any) -> None:
    settings.RESEARCH_MAX_ACTIVE_TOPICS = 2
    alice_client = Client()
    alice_client.force_login(alice)
    form = {"question": "How do tides work?", "sources": "web", "mode": "quick", "time_range": ""}
    assert alice_client.post("/topics/new/", form).status_code == 302
    assert alice_client.post("/api/topics", form, content_type="application/json").status_code == 201
    refused = alice_client.post("/topics/new/", form)
    assert refused.status_code == 429
    assert "already have 2 topics being researched" in refused.content.decode()
    api = alice_client.post("/api/topics", form, content_type="application/json")
    assert api.status_code == 429
    assert "already have 2 topics" in api.json()["detail"]
    with pytest.raises(CommandError, match="already have 2 topics"):
        ResearchCommand().handle(
            question="x y z", user="alice", yes=True, sources="web", time_range="", mode="quick"
        )
    assert Topic.objects.filter(owner=alice).count() == 2
    # Another user is not held back by alice's topics.
    bob_client = Client()
    bob_client.force_login(bob)
    assert bob_client.post("/topics/new/", form).status_code == 302
    # A finished topic makes room again.
    Topic.objects.filter(owner=alice).update(status=Topic.Status.COMPLETED)
    assert alice_client.post("/topics/new/", form).status_code == 302


def test_the_cap_is_one_function_for_every_door() -> None:
    with pytest.raises(workflow.OverLimit):
        workflow.check_plan_size(21)
    workflow.check_plan_size(20)


def test_one_users_backlog_of_llm_calls_does_not_hold_up_anothers(settings: Any) -> None:
    """The finding: while one user's 600-sub-query topic ran, another user's plan took 28 s
    instead of 1 s — one queue for the global LLM limit. Through the real LLM client, at the
    default 2 calls a second, against a loopback OpenAI-compatible server: user 1 has twelve calls
    waiting (six seconds of the limit), user 2 asks once a second later and is answered after at
    most one of user 1's calls more, not after the backlog."""
    import asyncio
    import time

    from mindsearch.clients import llm
    from tests.support.fakes import FakeService, openai_chat

    settings.LIMIT_AITUNNEL_RPS = 2
    settings.AITUNNEL_API_KEY = "test-key"
    settings.AITUNNEL_MODEL = "test-model"
    with FakeService({("POST", "/v1/chat/completions"): openai_chat(lambda messages: "ok")}) as service:
        settings.AITUNNEL_BASE_URL = f"{service.url}v1/"

        async def ask(user: int, what: str) -> None:
            await llm.complete([{"role": "user", "content": what}], user=user)

        async def newcomer() -> float:
            await asyncio.sleep(1.0)
            asked = time.monotonic()
            await ask(2, "user 2's plan")
            return asked

        async def scenario() -> float:
            second = asyncio.ensure_future(newcomer())
            await asyncio.gather(*(ask(1, f"user 1's call {n}") for n in range(12)))
            return await second

        asked = asyncio.run(scenario())
    arrivals = sorted(
        (request.arrived, json.loads(request.body)["messages"][0]["content"]) for request in service.requests
    )
    served = next(at for at, what in arrivals if what == "user 2's plan")
    backlog_after = [at for at, what in arrivals if what.startswith("user 1") and at > served]
    assert len(backlog_after) >= 6, arrivals  # user 1's backlog was still long...
    # ...and user 2 waited at most two turns of the limit (one of user 1's calls, then its own).
    turn = 1.15 / 2  # 2 per second, held as 2 per 1.15 s (RELIABILITY.md, known limits)
    assert served - asked <= 2 * turn + 0.3, (served - asked, arrivals)
