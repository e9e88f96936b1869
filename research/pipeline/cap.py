"""A topic's own token cap (issue 30): past it the run stops gathering and finishes from what it has.

`Topic.token_cap` counts the tokens this topic's calls paid for (cache hits are free). Before
each call `check` raises `CapReached` — an "LLM not configured" for the rest of the run, so the
run goes on exactly as with the daily budget: what is left is done by the extractive engine and
the report is written from what was gathered. The deep stage plans no further round once the
cap is reached, and the report carries the `capped` mark, so page, files and API say so. A capped
run never fails for it.
"""

from __future__ import annotations

from django.db.models import Sum
from django.db.models.functions import Coalesce
from django.utils.translation import gettext as _

from mindsearch.clients.llm import LLMNotConfigured
from research.models import LLMCall, Topic


class CapReached(LLMNotConfigured):
    """This topic's token cap is reached: for the rest of its run the LLM is not asked."""


def spent(topic: Topic, *, besides: tuple[str, ...] = ()) -> int:
    """Tokens this topic's own calls paid for (prompt and answer; cache hits are free), but for
    those of the stages `besides`."""
    calls = LLMCall.objects.filter(topic=topic, cache_hit=False).exclude(stage__in=besides)
    total = calls.aggregate(tokens=Coalesce(Sum("prompt_tokens"), 0) + Coalesce(Sum("completion_tokens"), 0))[
        "tokens"
    ]
    return int(total or 0)


def reached(topic: Topic, *, besides: tuple[str, ...] = ()) -> bool:
    """Whether the cap was reached (by the calls of stages other than `besides`)."""
    cap = Topic.objects.filter(pk=topic.pk).values_list("token_cap", flat=True).first()
    return cap is not None and spent(topic, besides=besides) >= cap


def check(topic: Topic) -> None:
    cap = Topic.objects.filter(pk=topic.pk).values_list("token_cap", flat=True).first()
    if cap and (used := spent(topic)) >= cap:
        raise CapReached(
            _(
                "this topic's cap of %(cap)s tokens is reached (%(used)s used):"
                " the report is written from what was gathered"
            )
            % {"cap": f"{cap:,}", "used": f"{used:,}"}
        )
