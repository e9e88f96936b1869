"""What a topic's run is likely to cost, shown with its plan before *Approve* (issue 30).

The estimate scales this instance's own history to the plan: for the last completed topics of
the same mode (not imported), the model calls, tokens (cache hits are free), search requests and
minutes per planned sub-query; the plan's sub-query count times their 25th, 50th and 75th
percentiles gives the range. With fewer than MIN_HISTORY such topics, a fixed profile of a run
stands in, and the page says the figure is a first guess. Cost uses the configured prices of the
model that will run it (research/usage.py). The error of the estimate is measured by
`bench/pipeline.py --estimate`.

Search requests are the web's (SearXNG queries, from the history; none for a documents or a
papers topic) and, when the topic searches papers (`papers.wanted`), the scholarly indexes': per
sub-query its first query of each language to each configured index, the English one only to
arXiv and PubMed (research/pipeline/papers.py), times the sub-queries a run of this depth ends with
per planned one (deep rounds add some).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import quantiles
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce, Length

from research.models import Document, LLMCall, SearchQuery, SubQuery, Topic
from research.pipeline import outline, papers
from research.pipeline.stages import read
from research.pipeline.stages.answer import sections
from research.pipeline.stages.answer.diversity import QUICK_SOURCES
from research.usage import price_for, prices_configured

HISTORY = 30
MIN_HISTORY = 3
# Per planned sub-query, when this instance has no history: about what a topic of the loopback
# world spends (`bench/pipeline.py --estimate`: quick 10 calls and 6,700 tokens per sub-query,
# deep 12 and 7,500), a little over.
PROFILE = {
    Topic.Mode.QUICK: {"calls": 10.0, "tokens": 7500.0, "searches": 4.0, "minutes": 1.5, "subqueries": 1.0},
    Topic.Mode.DEEP: {"calls": 13.0, "tokens": 9000.0, "searches": 10.0, "minutes": 4.0, "subqueries": 2.5},
}
# The languages a sub-query is searched in: the queries stage always writes Russian and English.
QUERY_LANGUAGES = 2


@dataclass(frozen=True)
class Figure:
    low: float
    mid: float
    high: float

    def scaled(self, factor: float) -> Figure:
        return Figure(self.low * factor, self.mid * factor, self.high * factor)


def _spread(values: list[float]) -> Figure:
    if len(values) == 1:
        return Figure(values[0], values[0], values[0])
    low, mid, high = quantiles(values, n=4, method="inclusive")
    return Figure(low, mid, high)


def history(mode: str) -> list[dict[str, float]]:
    """Per planned sub-query figures of the last completed topics of this mode."""
    topics = (
        Topic.objects.filter(
            status=Topic.Status.COMPLETED, mode=mode, archive_bytes=0, started_at__isnull=False
        )
        .annotate(planned=Count("subqueries", filter=Q(subqueries__round=1), distinct=True))
        .filter(planned__gt=0)
        .order_by("-finished_at")[:HISTORY]
    )
    rows = []
    for topic in topics:
        calls = LLMCall.objects.filter(topic=topic, cache_hit=False)
        paid = calls.aggregate(
            n=Count("id"), tokens=Coalesce(Sum("prompt_tokens"), 0) + Coalesce(Sum("completion_tokens"), 0)
        )
        if not paid["n"]:
            continue  # answered from the cache or without a model: no measure of cost
        # Web requests: a papers topic's queries are marked searched without one.
        searches = (
            0
            if topic.sources == Topic.Sources.PAPERS
            else SearchQuery.objects.filter(subquery__topic=topic, searched_at__isnull=False).count()
        )
        subqueries = topic.subqueries.exclude(origin=SubQuery.Origin.FOLLOWUP).count()
        minutes = (topic.finished_at - topic.started_at).total_seconds() / 60 if topic.finished_at else 0.0
        planned = float(topic.planned)
        rows.append(
            {
                "calls": paid["n"] / planned,
                "tokens": paid["tokens"] / planned,
                "searches": searches / planned,
                "minutes": minutes / planned,
                "subqueries": subqueries / planned,
            }
        )
    return rows


def estimate(topic: Topic) -> dict[str, Any]:
    """The run's likely model calls, tokens, cost, search requests and minutes, each a range."""
    planned = SubQuery.objects.filter(topic=topic, round=1).count()
    rows = history(topic.mode)
    measured = len(rows) >= MIN_HISTORY
    figures: dict[str, Figure] = {}
    for name in ("calls", "tokens", "searches", "minutes"):
        if measured:
            figures[name] = _spread([row[name] for row in rows]).scaled(planned)
        else:
            base = PROFILE[Topic.Mode(topic.mode)][name] * planned
            figures[name] = Figure(base * 0.6, base, base * 1.6)
    extra_calls, extra_tokens = sections_extra(topic, (figures["calls"].mid, figures["tokens"].mid))
    if extra_calls or extra_tokens:
        figures["calls"] = Figure(*(max(0.0, v + extra_calls) for v in vars(figures["calls"]).values()))
        figures["tokens"] = Figure(*(max(0.0, v + extra_tokens) for v in vars(figures["tokens"]).values()))
    if topic.sources in (Topic.Sources.DOCS, Topic.Sources.PAPERS):
        figures["searches"] = Figure(0, 0, 0)
    paper_searches = paper_requests(topic, planned, rows if measured else [])
    if paper_searches is not None:
        web = figures["searches"]
        figures["searches"] = Figure(
            web.low + paper_searches.low, web.mid + paper_searches.mid, web.high + paper_searches.high
        )
    price = price_for(topic.llm_model or settings.AITUNNEL_MODEL)
    # Prompts are most of a run's tokens (pages sent to be scored, summarised, cited).
    cost = figures["tokens"].scaled(1.0)
    cost = Figure(*(price.of(int(t * 0.85), int(t * 0.15)) for t in (cost.low, cost.mid, cost.high)))
    return {
        "planned": planned,
        "measured": measured,
        "history": len(rows),
        "calls": figures["calls"],
        "tokens": figures["tokens"],
        "searches": figures["searches"],
        "paper_searches": paper_searches,
        "minutes": figures["minutes"],
        "cost": cost if prices_configured() else None,
        "currency": settings.LLM_PRICE_CURRENCY,
        "cap": topic.token_cap,
        "sections": len(topic.outline),
    }


def paper_requests(topic: Topic, planned: int, rows: list[dict[str, float]]) -> Figure | None:
    """The requests to scholarly indexes a run makes, or None when the topic searches no papers
    (or no index is configured): per sub-query one per configured index and query language (the
    English one only for the English-only indexes), times the sub-queries a run ends with per
    planned one (`rows`: the history's; without it, the mode's profile)."""
    if not papers.wanted(topic):
        return None
    indexes = papers.configured()
    if not indexes:
        return None
    per_subquery = sum(1 if index.english_only else QUERY_LANGUAGES for index in indexes)
    if rows:
        grown = _spread([row["subqueries"] for row in rows])
    else:
        ratio = PROFILE[Topic.Mode(topic.mode)]["subqueries"]
        grown = Figure(1.0, ratio, ratio * 1.6) if ratio > 1 else Figure(1.0, 1.0, 1.0)
    return grown.scaled(per_subquery * planned)


# --- The report's sections (issue 30: research/pipeline/outline.py) ------------------------------
# A report along an outline asks the model once per section and checks each section's citations,
# where a report in one pass asks once and checks once: the history (mostly reports in one pass)
# is corrected by the difference, modelled from the length's evidence per section.
CHARS_PER_TOKEN = 3.5
SECTION_FRAME_TOKENS = 900  # the section prompt and its request's frame
CHECK_SHARE = 0.5  # a section's citation check sends about half its evidence again
ONE_PASS_TOKENS = {Topic.Mode.QUICK: 10_000.0, Topic.Mode.DEEP: 20_000.0}  # the answer and its check


# A long report reads more pages per sub-query (research/pipeline/stages/read.py,
# `pages_per_subquery`): each page more is summarised and scored. What twice the pages add to a
# run, as a share of it, measured on bench/evidence.py's eleven questions: reading is 39 % of a
# quick run's calls (152 of 392), and asking twice the pages read 38 % more (210), since a
# sub-query seldom has twice the readable hits it was given and a page two topics read is
# summarised once: 0.15 of the run.
READING_SHARE = 0.15
# The characters of a page read, when this instance has read none yet.
PAGE_CHARS = 10_000
RECENT_PAGES = 200


def sections_extra(topic: Topic, base: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """The model calls and tokens a sectioned report adds to a report in one pass (0, 0 without
    an outline): a call and a check per section for the evidence each is given, and for a length
    that reads more pages than `read.TOP_K`, that reading (`base`: the run's calls and tokens
    without it)."""
    count = len(topic.outline)
    if not count:
        return 0.0, 0.0
    length = outline.effective_length(topic.report_kind, topic.report_length)
    scale = outline.scale_of(length)
    # A section is given its length's evidence, but never more than twice its share of all the
    # passages of the sources chosen (sections.Evidence): on short pages that binds.
    quick = Topic.Mode(topic.mode) != Topic.Mode.DEEP
    sources = (QUICK_SOURCES if quick else settings.RESEARCH_DEEP_SOURCES) * scale.pool
    shared = sections.SHARES_PER_PASSAGE * sources * page_chars() / count
    evidence = min(scale.evidence_chars, shared) / CHARS_PER_TOKEN
    per_section = (
        SECTION_FRAME_TOKENS + evidence * (1 + CHECK_SHARE) + outline.words_per_section(length, count) * 2
    )
    one_pass = ONE_PASS_TOKENS.get(Topic.Mode(topic.mode), ONE_PASS_TOKENS[Topic.Mode.QUICK])
    more_pages = read.pages_per_subquery(topic) / read.TOP_K - 1
    reading_calls, reading_tokens = (READING_SHARE * more_pages * figure for figure in base)
    return 2.0 * (count - 1) + reading_calls, count * per_section - one_pass + reading_tokens


def page_chars() -> float:
    """The characters of a page as this instance reads them: the mean of its last pages read."""
    recent = list(
        Document.objects.order_by("-pk")
        .annotate(chars=Length("text"))
        .values_list("chars", flat=True)[:RECENT_PAGES]
    )
    return sum(recent) / len(recent) if recent else PAGE_CHARS
