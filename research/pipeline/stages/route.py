"""Stage 0: what kind of question this is, and whether it needs a search at all.

The LLM sorts the question into one of seven domains (`Topic.Domain`) and says whether a search is
needed; when it cannot, keywords decide the domain. The domain adds a hint to the search
queries and picks SearXNG's categories. The knowledge behind it — the domains' keywords, small
talk, categories and hints — is `question_domain.py`, the asking (which a follow-up's question
goes through too) is `classifier.py`; this module is the stage. A time phrase in
the question becomes the topic's `time_range` (unless the user chose one) and the period its
private documents are filtered to.

The route is stored on the topic (`Topic.route`) and this stage only decides it: the run loop
dispatches on it (`run.py`). Greetings and short questions the LLM says need no search go to
the owner's documents (`local_rag.py`), which hand over to the direct answer (`direct.py`) when
none matches; a direct answer that cannot be written hands over to the search (and the run loop
writes the route line then, `announce_search`). Everything else is searched.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext_noop

from research.event_text import choice_phrase, phrase, phrases
from research.models import Topic
from research.pipeline import timeparse
from research.pipeline.classifier import Route, llm_or_keywords
from research.pipeline.context import RunContext
from research.pipeline.question_domain import categories_for, looks_like_small_talk
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.ROUTE
Domain = Topic.Domain
# The LLM's "no search needed" is trusted for short messages only: a long question put to a
# research tool wants research, whatever a classifier thinks.
MAX_WORDS_WITHOUT_SEARCH = 30
_WINDOW_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}


def run(ctx: RunContext) -> Outcome:
    """Route the topic once: its domain, its period and the route taken, stored on the topic."""
    topic = ctx.topic
    if topic.route:
        return Outcome.CONTINUE
    # Relative phrases are read on the day the question was asked, so a resumed run agrees.
    today = timezone.localdate(topic.created_at)
    period = timeparse.parse_period(topic.question, today)
    route = (
        Route(Domain.GENERAL, False, False)
        if looks_like_small_talk(topic.question)
        else llm_or_keywords(ctx, period)
    )
    taken = route_taken(topic, route)
    _save_route(topic, route, taken, period, today)
    if taken == Topic.Route.SEARCH:
        _announce(ctx, route)
    return Outcome.CONTINUE


def announce_search(ctx: RunContext) -> None:
    """The route line of a topic a branch handed over to the search (`run.py`): it went there on
    the LLM's word, or as small talk (`_may_skip_search`), and goes on in its stored domain."""
    topic = ctx.topic
    _announce(ctx, Route(topic.domain, True, by_llm=not looks_like_small_talk(topic.question)))


def _announce(ctx: RunContext, route: Route) -> None:
    template, args = _describe(ctx.topic, route)
    ctx.finish(STAGE, template, data=_route_data(ctx.topic, route), **args)


def route_taken(topic: Topic, route: Route) -> Topic.Route:
    """Search, unless the question may skip it: then small talk is answered directly and a
    question from the owner's documents first (`local_rag.py` hands over when none matches)."""
    if route.needs_search or not _may_skip_search(topic, route):
        return Topic.Route.SEARCH
    if looks_like_small_talk(topic.question):
        return Topic.Route.DIRECT
    return Topic.Route.DOCUMENTS


def _may_skip_search(topic: Topic, route: Route) -> bool:
    """Small talk never needs a search; a question only when the LLM said so and it is a short
    one about the web (the user's documents are searched whatever the LLM knows). A topic
    with a plan already (a copy researched again) is searched as planned."""
    if topic.subqueries.exists():
        return False
    if looks_like_small_talk(topic.question):
        return True
    return (
        route.by_llm
        and topic.sources == Topic.Sources.WEB
        and len(topic.question.split()) <= MAX_WORDS_WITHOUT_SEARCH
    )


# --- what the route changes in the search --------------------------------------------------------


def _save_route(
    topic: Topic, route: Route, taken: Topic.Route, period: timeparse.Period | None, today: date
) -> None:
    topic.domain, topic.route = route.domain, taken
    if period is not None and not topic.time_range:
        topic.time_range = period.time_range
    if period is not None:
        topic.period_start, topic.period_end = period.start, period.end
    elif topic.time_range:
        topic.period_start = today - timedelta(days=_WINDOW_DAYS[topic.time_range])
        topic.period_end = today
    topic.save(update_fields=["domain", "route", "time_range", "period_start", "period_end", "updated_at"])


# SearXNG's category names as the event log shows them (the reader's language, not the engine's).
CATEGORY_NAMES = {
    "general": gettext_noop("general"),
    "news": gettext_noop("news"),
    "it": gettext_noop("IT"),
    "science": gettext_noop("science"),
}


def category_phrases(categories: str) -> list[dict[str, Any]]:
    """SearXNG's comma-separated categories ("" = the instance's default, general), each a phrase
    the page translates; a name this table does not know is kept as SearXNG spells it."""
    names = [name for name in categories.split(",") if name] or ["general"]
    return phrases(
        *(
            phrase(CATEGORY_NAMES[name]) if name in CATEGORY_NAMES else phrase("%(name)s", name=name)
            for name in names
        )
    )


def _describe(topic: Topic, route: Route) -> tuple[str, dict]:
    """The route event's msgid and arguments; a whole sentence per case, for the translators."""
    args = {
        "domain": choice_phrase(Domain(topic.domain)),
        "how": phrase(gettext_noop("by the LLM") if route.by_llm else gettext_noop("by keywords")),
        "categories": category_phrases(categories_for(topic.domain, topic.question, topic.time_range)),
    }
    if not topic.period_start:  # a time range always comes with its period (_save_route)
        return gettext_noop("Domain: %(domain)s (%(how)s); search categories: %(categories)s"), args
    args |= {"start": f"{topic.period_start:%Y-%m-%d}", "end": f"{topic.period_end:%Y-%m-%d}"}
    if not topic.time_range:
        return gettext_noop(
            "Domain: %(domain)s (%(how)s); search categories: %(categories)s; period %(start)s – %(end)s"
        ), args
    args["time_range"] = choice_phrase(Topic.TimeRange(topic.time_range))
    return gettext_noop(
        "Domain: %(domain)s (%(how)s); search categories: %(categories)s; period %(start)s – %(end)s; "
        "time range: %(time_range)s"
    ), args


def _route_data(topic: Topic, route: Route) -> dict:
    return {
        "domain": topic.domain,
        "by_llm": route.by_llm,
        "time_range": topic.time_range,
        "period": [str(topic.period_start), str(topic.period_end)] if topic.period_start else None,
    }
