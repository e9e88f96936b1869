"""What kind of question this is and whether it needs a search: the LLM's reading, or keywords
when it cannot. No stage: the route stage (`route.py`) decides a topic's route with it, and a
follow-up (`followup.py`) whether its question needs a new search.

The LLM sorts the question into one of the seven domains (`Topic.Domain`) and says whether a
search is needed; what it leaves out or gets wrong comes from the keywords of
`question_domain.py`. Its calls are recorded as the route stage's, a follow-up's too.
"""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import async_to_sync
from django.utils import timezone
from django.utils.translation import gettext_noop

from mindsearch.clients.llm import parse_json
from research.models import CacheEntry, Topic
from research.pipeline import timeparse
from research.pipeline.context import RunContext
from research.pipeline.prompting import Asking, image_labels_block
from research.pipeline.question_domain import classify_by_keywords, looks_like_small_talk
from research.pipeline.stage import StageName

Domain = Topic.Domain


@dataclass(frozen=True)
class Route:
    domain: str
    needs_search: bool
    by_llm: bool


def classify(ctx: RunContext) -> Route:
    """The domain and whether a search is needed for `ctx.question` (a follow-up's too), read as
    the route stage reads a topic's question: small talk needs none; the LLM, or keywords."""
    if looks_like_small_talk(ctx.question):
        return Route(Domain.GENERAL, False, False)
    today = timezone.localdate(ctx.topic.created_at)
    return llm_or_keywords(ctx, timeparse.parse_period(ctx.question, today))


CLASSIFY = Asking(
    "route",
    CacheEntry.Kind.SEARCH_QUERIES,
    gettext_noop("The LLM could not classify the question (%(error)s); classified by keywords."),
    max_tokens=60,
)


def llm_or_keywords(ctx: RunContext, period: timeparse.Period | None) -> Route:
    """The LLM's classification of the question; keywords' (with `period`), when it cannot."""
    fallback = Route(classify_by_keywords(ctx.question, period), True, False)
    request = f'Запрос: "{ctx.asked}"' + image_labels_block(ctx)
    route = async_to_sync(CLASSIFY.answer)(
        ctx, StageName.ROUTE, request, lambda text: parse_route(parse_json(text, expect=dict), fallback)
    )
    return fallback if route is None else route


def parse_route(answer: object, fallback: Route) -> Route:
    """The LLM's {"domain": …, "needs_search": …}; what it left out or got wrong comes from keywords."""
    if not isinstance(answer, dict):
        return fallback
    domain = str(answer.get("domain", "")).strip().lower().replace("-", "_").replace(" ", "_")
    needs = answer.get("needs_search", True)
    if isinstance(needs, str):
        needs = needs.strip().lower() not in ("false", "no", "нет", "0")
    known = domain in Domain.values
    return Route(domain if known else fallback.domain, bool(needs), by_llm=known)
