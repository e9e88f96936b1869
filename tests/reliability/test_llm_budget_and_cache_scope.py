"""Per-user LLM spending (issue 15): an optional daily budget stops a user's runs from asking
the LLM once it is used up, with a clear message, and never touches another user's; with
LLM_CACHE_SCOPE=user nobody is answered from another user's cached LLM answers."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from research import budget
from research.models import CacheEntry, LLMCall, Topic
from tests.reliability.runs import research, warnings_of
from tests.support.world import World

pytestmark = pytest.mark.django_db(transaction=True)


def llm_requests(world: World) -> int:
    return len([r for r in world.llm.requests if r.path.endswith("/chat/completions")])


def test_a_used_up_budget_finishes_without_the_llm_and_says_why(
    alice: User, bob: User, loopback: World, settings: Any
) -> None:
    settings.LLM_DAILY_TOKEN_BUDGET = 1
    LLMCall.objects.create(user=alice, stage="plan", model="m", prompt_tokens=5, completion_tokens=5)
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED  # the extractive engine finished it
    assert topic.report.model == ""  # written by the extractive engine
    assert llm_requests(loopback) == 0
    said = " ".join(warnings_of(topic))
    assert "daily LLM budget of 1 tokens is used up" in said
    # Bob has spent nothing today: his run uses the LLM.
    other = research(bob)
    assert other.status == Topic.Status.COMPLETED
    assert llm_requests(loopback) > 0


def test_yesterdays_and_imported_calls_do_not_count(alice: User, settings: Any) -> None:
    settings.LLM_DAILY_TOKEN_BUDGET = 100
    LLMCall.objects.create(user=alice, stage="plan", model="m", prompt_tokens=500, imported=True)
    old = LLMCall.objects.create(user=alice, stage="plan", model="m", prompt_tokens=500)
    LLMCall.objects.filter(pk=old.pk).update(created_at=old.created_at.replace(year=2020))
    LLMCall.objects.create(user=alice, stage="plan", model="m", prompt_tokens=500, cache_hit=True)
    budget.check(alice.pk)  # nothing paid for today
    LLMCall.objects.create(user=alice, stage="plan", model="m", prompt_tokens=60, completion_tokens=40)
    with pytest.raises(budget.BudgetReached):
        budget.check(alice.pk)


def test_a_cost_budget_uses_the_configured_prices(alice: User, settings: Any) -> None:
    settings.LLM_PRICE_INPUT_PER_1K = 1.0
    settings.LLM_DAILY_COST_BUDGET = 0.5
    LLMCall.objects.create(user=alice, stage="plan", model="m", prompt_tokens=400)
    budget.check(alice.pk)
    LLMCall.objects.create(user=alice, stage="plan", model="m", prompt_tokens=100)
    with pytest.raises(budget.BudgetReached, match=r"0\.5 USD"):
        budget.check(alice.pk)


@pytest.mark.parametrize(("scope", "second_user_calls_llm"), [("shared", False), ("user", True)])
def test_the_cache_scope_decides_whether_users_share_llm_answers(
    alice: User, bob: User, loopback: World, settings: Any, scope: str, second_user_calls_llm: bool
) -> None:
    settings.LLM_CACHE_SCOPE = scope
    assert research(alice).status == Topic.Status.COMPLETED
    before = llm_requests(loopback)
    assert research(bob).status == Topic.Status.COMPLETED
    assert (llm_requests(loopback) > before) is second_user_calls_llm
    owners = set(
        CacheEntry.objects.filter(kind__in=["search_queries", "answers"]).values_list("owner", flat=True)
    )
    expected: set[int | None] = {alice.pk, bob.pk} if scope == "user" else {None}
    assert owners == expected
