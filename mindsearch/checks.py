"""`manage.py check --deploy` warnings for defaults that are safe on one's own machine and not on
a public server (issue 26)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register

W_OPEN_SIGNUP_WITHOUT_BUDGET = "mindsearch.W001"


@register(Tags.security, deploy=True)
def open_signup_has_a_budget(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Anyone may sign up and no daily LLM budget is set: every visitor may spend without bound."""
    if settings.SIGNUP != "open" or settings.LLM_DAILY_TOKEN_BUDGET or settings.LLM_DAILY_COST_BUDGET:
        return []
    return [
        Warning(
            "SIGNUP=open and no daily LLM budget: any visitor may make an account and spend on the "
            "LLM without bound.",
            hint="Set LLM_DAILY_TOKEN_BUDGET or LLM_DAILY_COST_BUDGET, or SIGNUP=invite or closed.",
            id=W_OPEN_SIGNUP_WITHOUT_BUDGET,
        )
    ]
