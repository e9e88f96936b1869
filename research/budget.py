"""Optional daily LLM budgets per user: `LLM_DAILY_TOKEN_BUDGET` tokens and/or
`LLM_DAILY_COST_BUDGET` (in `LLM_PRICE_CURRENCY`, from the configured prices), counted over the
calls a user's topics paid for since midnight UTC (cache hits and imported records are free).

When a user's budget is used up, their runs stop asking the LLM and finish with the extractive
engine, saying why (research/pipeline/prompting.py raises `BudgetReached` before the call).
"""

from __future__ import annotations

from datetime import UTC, datetime, time

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _

from mindsearch.clients.llm import LLMNotConfigured
from research.models import LLMCall
from research.usage import Usage, summarise


class BudgetReached(LLMNotConfigured):
    """The user's daily LLM budget is used up: for this run the LLM is as good as not configured."""


def enabled() -> bool:
    return bool(settings.LLM_DAILY_TOKEN_BUDGET or settings.LLM_DAILY_COST_BUDGET)


def spent_today(owner_id: int) -> Usage:
    midnight = datetime.combine(timezone.now().astimezone(UTC).date(), time(), tzinfo=UTC)
    calls = LLMCall.objects.filter(user_id=owner_id, imported=False, created_at__gte=midnight)
    return summarise(calls)


def check(owner_id: int | None) -> None:
    """BudgetReached with a message for the user once today's spending reaches a budget."""
    if not enabled() or owner_id is None:
        return
    spent = spent_today(owner_id)
    tokens, cost = settings.LLM_DAILY_TOKEN_BUDGET, settings.LLM_DAILY_COST_BUDGET
    if tokens and spent.total_tokens >= tokens:
        raise BudgetReached(
            _(
                "your daily LLM budget of %(budget)s tokens is used up"
                " (%(spent)s today; it renews at 00:00 UTC)"
            )
            % {"budget": f"{tokens:,}", "spent": f"{spent.total_tokens:,}"}
        )
    if cost and spent.cost >= cost:
        raise BudgetReached(
            _("your daily LLM budget of %(budget)s %(currency)s is used up (it renews at 00:00 UTC)")
            % {"budget": f"{cost:g}", "currency": settings.LLM_PRICE_CURRENCY}
        )
