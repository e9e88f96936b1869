"""Per-year search (a fallback for questions about a span of years: one search per year).

A question about "2015–2023" (or "в прошлом году", "since 2020") names calendar years, and one
broad search rarely covers them all. After the first search, each year that no hit mentions
(in its title, snippet or URL, or by its publication date) gets a sub-query of its own: the
question without its time phrase plus the year, searched as the first sub-query's first
Russian and English queries plus the year. Their hits join the topic's, de-duplicated like all
others, and are scored and read with them. No LLM call is spent on it.
"""

from __future__ import annotations

import re

from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.translation import gettext_noop

from research.models import Hit, SearchQuery, SubQuery, Topic
from research.pipeline import timeparse
from research.pipeline.context import RunContext
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.YEARS
MAX_YEARS = 12
_YEARS = re.compile(
    r"\b(?:19|20)\d\d\b(?:\s*[-–—]\s*(?:19|20)\d\d\b)?(?:\s*(?:гг\.?|годы|годах|года|год|г\.))?"
)


def run(ctx: RunContext) -> Outcome:
    """SEARCH_AGAIN when years were missing: their sub-queries are saved and wait for the search."""
    topic = ctx.topic
    years = years_asked(topic)
    if not years or topic.sources in (Topic.Sources.DOCS, Topic.Sources.PAPERS) or topic.years_checked:
        return Outcome.CONTINUE
    missing = [] if _planned(topic) else missing_years(years, *_found(topic))
    with transaction.atomic():
        if missing:
            _add_subqueries(topic, missing[:MAX_YEARS])
        topic.years_checked = True
        topic.save(update_fields=["years_checked", "updated_at"])
    message = (
        gettext_noop("No result mentions %(years)s: searching each of those years on its own")
        if missing
        else gettext_noop("The search covered every year asked about (%(years)s)")
    )
    listed = _listed(missing or list(years))
    ctx.emit(STAGE, message, args={"years": listed}, data={"years": list(years), "missing": missing})
    return Outcome.SEARCH_AGAIN if missing else Outcome.CONTINUE


def years_asked(topic: Topic) -> tuple[int, ...]:
    """The calendar years the question names, as read on the day the topic was created."""
    if topic.period_start is None:
        return ()
    period = timeparse.parse_period(topic.question, timezone.localdate(topic.created_at))
    return period.years if period else ()


def missing_years(years: tuple[int, ...], texts: list[str], published: set[int]) -> list[int]:
    mentioned = {int(year) for text in texts for year in re.findall(r"(?<!\d)((?:19|20)\d\d)(?!\d)", text)}
    return [year for year in years if year not in mentioned and year not in published]


def _found(topic: Topic) -> tuple[list[str], set[int]]:
    hits = Hit.objects.filter(topic=topic, source=Hit.Source.WEB)
    texts = [
        f"{title} {snippet} {url}" for title, snippet, url in hits.values_list("title", "snippet", "url")
    ]
    dates = hits.exclude(published_at=None).values_list("published_at", flat=True)
    published = {date.year for date in dates if date is not None}
    return texts, published


def _planned(topic: Topic) -> bool:
    return topic.subqueries.filter(origin=SubQuery.Origin.PERIOD).exists()


def without_years(text: str) -> str:
    return timeparse.tidy_query(_YEARS.sub(" ", text))


def _add_subqueries(topic: Topic, years: list[int]) -> None:
    period = timeparse.parse_period(topic.question, timezone.localdate(topic.created_at))
    base = without_years(timeparse.strip_period(topic.question, period))
    queries = _base_queries(topic) or {topic.language if topic.language in ("ru", "en") else "en": base}
    start = (topic.subqueries.aggregate(last=Max("position"))["last"] or 0) + 1
    with transaction.atomic():
        for offset, year in enumerate(years):
            subquery = SubQuery.objects.create(
                topic=topic, position=start + offset, text=f"{base} {year}", origin=SubQuery.Origin.PERIOD
            )
            SearchQuery.objects.bulk_create(
                SearchQuery(subquery=subquery, language=language, position=0, text=f"{text} {year}")
                for language, text in queries.items()
            )


def _base_queries(topic: Topic) -> dict[str, str]:
    """The first round-1 sub-query's first query in each language, without its years."""
    first = (
        topic.subqueries.filter(round=1)
        .exclude(origin=SubQuery.Origin.PERIOD)
        .order_by("position", "id")
        .first()
    )
    if first is None:
        return {}
    found: dict[str, str] = {}
    for query in first.search_queries.order_by("language", "position"):
        text = without_years(query.text)
        if query.language not in found and text:
            found[query.language] = text
    return found


def _listed(years: list[int]) -> str:
    return ", ".join(str(year) for year in years)
