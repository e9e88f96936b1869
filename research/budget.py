"""Optional daily LLM budgets per user: `LLM_DAILY_TOKEN_BUDGET` tokens and/or
`LLM_DAILY_COST_BUDGET` (in `LLM_PRICE_CURRENCY`, from the configured prices), counted over the
calls a user's topics paid for since midnight UTC (cache hits and imported records are free).

When a user's budget is used up, their runs stop asking the LLM and finish with the extractive
engine, saying why (research/pipeline/prompting.py raises `BudgetReached` before the call).

Concurrent calls cannot spend past it together (issue 26): each call holds, before it is sent,
the most it can cost (`hold`: its prompt's estimate with a margin, plus its token limit) on the
user's `LimitCounter` row, under that row's lock, and is let through only while what was spent
today plus what other calls hold stays under the budget; it lets go (`release`) once its
`LLMCall` row is saved. So today's spending ends at most one call's maximum past the budget.
"""

from __future__ import annotations

import time as clock
from datetime import UTC, datetime, time

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from mindsearch.clients.llm import LLMNotConfigured
from mindsearch.models import LimitCounter
from research.models import LLMCall
from research.usage import Usage, price_for, summarise

# A hold left by a process that died mid-call lapses an hour after the user's last call began.
HOLD_SECONDS = 3600
_TABLE = LimitCounter._meta.db_table
# Take the user's row (made at 0 if new, back to 0 once lapsed) and its lock until commit.
_LOCK = f"""
INSERT INTO {_TABLE} AS c (key, count, last, expires) VALUES (%(key)s, 0, %(now)s, %(now)s + %(window)s)
ON CONFLICT (key) DO UPDATE SET
    count = CASE WHEN c.expires <= %(now)s THEN 0 ELSE c.count END,
    last = %(now)s,
    expires = %(now)s + %(window)s
RETURNING count
"""  # noqa: S608 — only constants are formatted in
_RELEASE = f"UPDATE {_TABLE} SET count = GREATEST(count - %(tokens)s, 0) WHERE key = %(key)s"  # noqa: S608


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
    _check(spent_today(owner_id))


def _key(owner_id: int) -> str:
    return f"llm-budget:{owner_id}"


def hold(owner_id: int | None, tokens: int, model: str) -> int:
    """Let one call of at most `tokens` through, holding them until `release`: BudgetReached if
    today's spending plus what the user's calls under way hold has reached a budget. The tokens
    held (0 without a budget: nothing to give back)."""
    if not enabled() or owner_id is None:
        return 0
    params: dict[str, str | float | int] = {
        "key": _key(owner_id),
        "now": clock.time(),
        "window": HOLD_SECONDS,
        "tokens": tokens,
    }
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_LOCK, params)  # other calls of this user wait here until we commit
            row = cursor.fetchone()
        held = int(row[0]) if row else 0
        spent = spent_today(owner_id)
        price = price_for(model)
        # What the others hold, priced as the dearer of prompt and answer tokens.
        _check(spent, held_tokens=held, held_cost=held * max(price.input_per_1k, price.output_per_1k) / 1000)
        LimitCounter.objects.filter(key=params["key"]).update(count=held + tokens)
    return tokens


def release(owner_id: int | None, tokens: int) -> None:
    """Give back what `hold` held, once the call's `LLMCall` row is saved (or it failed)."""
    if tokens and owner_id is not None:
        with connection.cursor() as cursor:
            cursor.execute(_RELEASE, {"key": _key(owner_id), "tokens": tokens})


def _check(spent: Usage, held_tokens: int = 0, held_cost: float = 0.0) -> None:
    tokens, cost = settings.LLM_DAILY_TOKEN_BUDGET, settings.LLM_DAILY_COST_BUDGET
    if tokens and spent.total_tokens + held_tokens >= tokens:
        raise BudgetReached(
            _(
                "your daily LLM budget of %(budget)s tokens is used up"
                " (%(spent)s today; it renews at 00:00 UTC)"
            )
            % {"budget": f"{tokens:,}", "spent": f"{spent.total_tokens:,}"}
        )
    if cost and spent.cost + held_cost >= cost:
        raise BudgetReached(
            _("your daily LLM budget of %(budget)s %(currency)s is used up (it renews at 00:00 UTC)")
            % {"budget": f"{cost:g}", "currency": settings.LLM_PRICE_CURRENCY}
        )
