"""Limits that hold under concurrency (issue 26, finding 6): twenty requests sent at once meet
the same limit as twenty sent one after another — sign-ups per address, an invite, the login
guard, and the per-user quotas (active topics, documents). Each request runs in a thread of its
own, with its own database connection, released together at a barrier."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client

from mindsearch import limits, throttle
from mindsearch.models import Invite, LimitCounter
from research.models import Topic
from research.pipeline.stage import StageName
from retrieval.models import UploadedDocument

pytestmark = pytest.mark.django_db(transaction=True)

AT_ONCE = 20
PASSWORD = "violet tulip kettle 42"


def at_once(request: Callable[[int], Any], count: int = AT_ONCE) -> list[Any]:
    """`request(n)` for n in range(count), all in threads released together; their answers."""
    barrier = threading.Barrier(count)
    answers: list[Any] = [None] * count

    def run(n: int) -> None:
        try:
            barrier.wait(30)
            answers[n] = request(n)
        except Exception as error:  # the test reads it as a failed request
            answers[n] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return answers


def statuses(answers: list[Any]) -> list[int]:
    assert not [a for a in answers if isinstance(a, Exception)], answers
    return sorted(answer.status_code for answer in answers)


def join(name: str, invite: str = "") -> Any:
    data = {"username": name, "email": "", "password1": PASSWORD, "password2": PASSWORD}
    if invite:
        data["invite"] = invite
    return Client().post("/accounts/signup/", data, REMOTE_ADDR="203.0.113.9")


def test_twenty_sign_ups_at_once_create_at_most_the_hours_limit(settings: Any) -> None:
    # The finding: 12 concurrent sign-ups all succeeded against a limit of 5 an hour.
    settings.SIGNUP = "open"
    settings.SIGNUP_RATE_PER_HOUR = 5
    answers = at_once(lambda n: join(f"racer{n}"))
    assert statuses(answers) == [302] * 5 + [429] * 15
    assert User.objects.count() == 5
    # The hour's count is spent: one more later is refused too.
    assert join("late").status_code == 429


def test_one_invite_sent_twenty_times_at_once_makes_one_account(settings: Any) -> None:
    settings.SIGNUP = "invite"
    settings.SIGNUP_RATE_PER_HOUR = 0
    _invite, token = Invite.issue(None, "for one")
    answers = at_once(lambda n: join(f"guest{n}", invite=token))
    assert statuses(answers).count(302) == 1
    assert User.objects.count() == 1


def test_twenty_guesses_at_once_check_at_most_the_free_attempts(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    User.objects.create_user("root", "root@example.com", PASSWORD)
    settings.LOGIN_THROTTLE_ATTEMPTS = 5
    # Past the free attempts one more is let through 1 s after the last: on a busy machine the
    # twenty may take longer than that to arrive, so they all arrive at the same instant here.
    instant = time.time()
    monkeypatch.setattr(throttle, "time", SimpleNamespace(time=lambda: instant))

    def guess(n: int) -> Any:
        return Client().post("/accounts/login/", {"username": "root", "password": f"guess {n}"})

    codes = statuses(at_once(guess))
    # 200 is a password checked and found wrong; 429 refused without checking it.
    assert codes.count(200) <= settings.LOGIN_THROTTLE_ATTEMPTS
    assert codes.count(429) >= AT_ONCE - settings.LOGIN_THROTTLE_ATTEMPTS
    assert set(codes) == {200, 429}


@pytest.mark.usefixtures("web_search_configured")
def test_twenty_topics_started_at_once_meet_the_active_topic_cap(alice: User, settings: Any) -> None:
    settings.RESEARCH_MAX_ACTIVE_TOPICS = 5
    form = {"question": "How do tides work?", "sources": "web", "mode": "quick", "time_range": ""}

    def start(n: int) -> Any:
        client = Client()
        client.force_login(alice)
        return client.post("/api/topics", form, content_type="application/json")

    assert statuses(at_once(start)) == [201] * 5 + [429] * 15
    assert Topic.objects.filter(owner=alice).count() == 5


def test_twenty_uploads_at_once_meet_the_document_quota(alice: User, settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.UPLOAD_MAX_DOCUMENTS = 5
    client = Client()
    client.force_login(alice)
    session = client.cookies

    def upload(n: int) -> Any:
        own = Client()
        own.cookies = session
        text = f"Notes number {n}: the tide tables of harbour {n}.\n".encode() * 20
        return own.post("/api/documents", {"file": SimpleUploadedFile(f"notes{n}.txt", text)})

    codes = statuses(at_once(upload))
    assert codes.count(201) == 5
    assert UploadedDocument.objects.filter(owner=alice).count() == 5


def test_a_count_starts_again_after_its_window_and_ended_ones_are_cleared() -> None:
    assert limits.take("a", 1, 10, now=0)
    assert not limits.take("a", 1, 10, now=5)
    assert limits.take("a", 1, 10, now=11)
    assert limits.take("b", 1, 10, now=100)  # a new count clears "a", ended at 21
    assert list(LimitCounter.objects.values_list("key", flat=True)) == ["b"]


def test_twenty_llm_calls_at_once_spend_at_most_one_calls_maximum_past_the_daily_budget(
    alice: User, settings: Any
) -> None:
    """The daily token budget is checked and the call's most held in one locked step: twenty
    calls sent at once by one user's runs (each a question of its own, so none is answered from
    the cache) end, all told, at most one call's maximum past the budget. Before, all twenty read
    'nothing spent today' and were sent."""
    import asyncio

    from mindsearch.clients import llm
    from research import budget
    from research.models import LLMCall
    from research.pipeline import prompting
    from research.pipeline.context import RunContext
    from tests.support.fakes import FakeService, openai_chat

    settings.LIMIT_AITUNNEL_RPS = 0
    settings.AITUNNEL_API_KEY = "test-key"
    settings.AITUNNEL_MODEL = "test-model"
    llm.forget_endpoints()
    prompt = prompting.load_prompt("plan")
    answer = "A plan in a few words. " * 20
    with FakeService(
        {("POST", "/v1/chat/completions"): openai_chat(lambda m: answer)}, latency=0.5
    ) as service:
        settings.AITUNNEL_BASE_URL = f"{service.url}v1/"
        topic = Topic.objects.create(owner=alice, question="What is Mixture of Tokens?")

        def ask(n: int) -> str:
            ctx = RunContext(topic=topic, llm_enabled=True, model="test-model")
            request = f"Plan question {n}"
            return asyncio.run(
                prompting.ask(ctx, StageName.PLAN, prompt, request, kind="plan", max_tokens=200)
            )

        ask(100)  # one call alone: what a call costs here
        one = LLMCall.objects.get(user=alice)
        cost = one.prompt_tokens + one.completion_tokens
        messages = [
            {"role": "system", "content": prompt.text},
            {"role": "user", "content": "Plan question 10"},
        ]
        most = asyncio.run(llm.most_tokens(messages, 200))
        settings.LLM_DAILY_TOKEN_BUDGET = cost + 2 * most  # room for a few calls, not for twenty
        assert 20 * cost > settings.LLM_DAILY_TOKEN_BUDGET + most  # twenty at once would overspend
        answers = at_once(ask)
    sent = [a for a in answers if isinstance(a, str)]
    refused = [a for a in answers if isinstance(a, budget.BudgetReached)]
    assert len(sent) + len(refused) == AT_ONCE, answers
    spent = budget.spent_today(alice.pk).total_tokens
    assert spent <= settings.LLM_DAILY_TOKEN_BUDGET + most, (spent, len(sent))
    assert sent and refused
    assert LimitCounter.objects.get(key=f"llm-budget:{alice.pk}").count == 0  # every hold let go


def test_twenty_uploads_at_once_meet_the_storage_quota(alice: User, settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"
    text = [f"Notes number {n}: the tide tables of harbour {n:02d}.\n".encode() * 20 for n in range(AT_ONCE)]
    settings.UPLOAD_MAX_STORAGE_BYTES = 5 * len(text[0]) + 10  # room for five of them
    client = Client()
    client.force_login(alice)
    session = client.cookies

    def upload(n: int) -> Any:
        own = Client()
        own.cookies = session
        return own.post("/api/documents", {"file": SimpleUploadedFile(f"notes{n}.txt", text[n])})

    from retrieval.uploads import quota

    codes = statuses(at_once(upload))
    assert 4 <= codes.count(201) <= 5, codes  # five fit; what is stored per file may be a little more
    assert UploadedDocument.objects.filter(owner=alice).count() == codes.count(201)
    assert quota(alice)["bytes"] <= settings.UPLOAD_MAX_STORAGE_BYTES


def test_twenty_follow_ups_asked_at_once_of_one_topic_make_one(alice: User, settings: Any) -> None:
    """One follow-up at a time per topic (and RESEARCH_MAX_FOLLOWUPS in all): twenty asked at
    once are one question being answered and nineteen refusals."""
    from research import workflow
    from research.models import FollowUp
    from tests.research.pipeline.test_followups import completed_topic

    settings.RESEARCH_MAX_FOLLOWUPS = 3
    topic = completed_topic(alice)

    def ask(n: int) -> Any:
        return workflow.ask_followup(Topic.objects.get(pk=topic.pk), question=f"Question {n}?")

    answers = at_once(ask)
    asked = [a for a in answers if isinstance(a, FollowUp)]
    refused = [a for a in answers if isinstance(a, workflow.Refused | workflow.OverLimit)]
    assert len(asked) == 1 and len(refused) == AT_ONCE - 1, answers
    assert FollowUp.objects.filter(topic=topic).count() == 1


def test_twenty_imports_at_once_meet_the_pending_import_cap(
    alice: User, settings: Any, tmp_path: Path
) -> None:
    import io

    from research import imports
    from research.archive import ArchiveError

    settings.MEDIA_ROOT = tmp_path / "media"
    settings.IMPORT_MAX_PENDING = 2

    def start(n: int) -> Any:
        return imports.start(io.BytesIO(b"PK\x05\x06" + bytes(18)), User.objects.get(pk=alice.pk))

    answers = at_once(start)
    started = [a for a in answers if isinstance(a, str)]
    refused = [a for a in answers if isinstance(a, ArchiveError)]
    assert len(started) == 2 and len(refused) == AT_ONCE - 2, answers
    assert len(imports.pending(alice.pk)) == 2
