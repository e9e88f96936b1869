"""A report checked as a whole, when it is saved: what the page, the files and the API say about
it besides its citations. No stage.

`marks_of`: a report cut off at the model's token limit, one that cites none of its sources,
one the model wrote in another language than the question's, and one whose citations are mostly
unsupported are marked (`Report.Mark`). `without_model`: which stages ran without the configured
model — its answers could not be read after the retries, or it was given up on — read from the
rows each stage stored (`SubQuery.origin`, `Scores.origin`, `Summary.origin`, the report's
model), so a run resumed in another process counts what the first one did.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models import Count

from research.models import HitScore, Report, RunEvent, SubQuery, Summary, SummaryScore, Topic
from research.pipeline import citecheck
from research.pipeline.question_domain import looks_like_small_talk
from research.pipeline.replies import question_language, report_language
from research.pipeline.stage import StageName


def marks_of(
    body: str,
    *,
    question: str,
    by_model: bool,
    truncated: bool,
    sources: int,
    verdicts: Sequence[citecheck.Verdict],
    capped: bool = False,
) -> list[str]:
    """The `Report.Mark` values a report's body earns. The language is the model's to get right:
    the extractive engine quotes its sources in theirs."""
    marks = []
    if truncated:
        marks.append(Report.Mark.TRUNCATED)
    if sources and not verdicts:
        marks.append(Report.Mark.UNCITED)
    if by_model and wrong_language(body, question):
        marks.append(Report.Mark.WRONG_LANGUAGE)
    if citecheck.mostly_unsupported(verdicts):
        marks.append(Report.Mark.UNSUPPORTED)
    if capped:
        marks.append(Report.Mark.CAPPED)
    return [str(mark) for mark in marks]


def wrong_language(body: str, question: str) -> bool:
    """The report's own words (`replies.report_language`) in the other language than the question's."""
    found = report_language(body)
    return found is not None and found != question_language(question)


def without_model(topic: Topic, report_model: str, fell_back: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The stages that ran without the configured model, each with how many of its rows
    (`count` of `total`; None where a stage keeps no such rows), in the run's order. `fell_back`:
    stages the run saw fall back that store no origin (the picture, the route, the queries)."""
    found = {
        StageName.PLAN: _origins(
            SubQuery.objects.filter(topic=topic), SubQuery.Origin.FALLBACK, SubQuery.Origin.LLM
        ),
        StageName.SCORE_HITS: _origins(HitScore.objects.filter(hit__topic=topic)),
        StageName.SUMMARISE: _origins(Summary.objects.filter(document__topic=topic)),
        StageName.SCORE_SUMMARIES: _origins(SummaryScore.objects.filter(summary__document__topic=topic)),
        StageName.ANSWER: (0, 1) if report_model else (1, 1),
    }
    listed = [
        {"stage": str(stage), "count": count, "total": total}
        for stage, (count, total) in found.items()
        if count
    ]
    named = {entry["stage"] for entry in listed}
    if _routed_by_keywords(topic):
        fell_back = [*fell_back, StageName.ROUTE]
    listed += [
        {"stage": str(stage), "count": None, "total": None}
        for stage in dict.fromkeys(fell_back)
        if stage not in named
    ]
    order = list(StageName.values)
    return sorted(
        listed, key=lambda entry: order.index(entry["stage"]) if entry["stage"] in order else len(order)
    )


def _routed_by_keywords(topic: Topic) -> bool:
    """The route fell back to keywords (the model failed, or named no domain we know): its line in
    the event log says so, also when another process ran it (small talk is never asked)."""
    if looks_like_small_talk(topic.question):
        return False
    return RunEvent.objects.filter(topic=topic, stage=StageName.ROUTE, data__by_llm=False).exists()


def _origins(rows: Any, fallback: str = "fallback", llm: str = "llm") -> tuple[int, int]:
    """(rows made without the model, rows made by it or without it)."""
    grouped = rows.filter(origin__in=(fallback, llm)).values("origin").annotate(n=Count("pk")).order_by()
    counted = {row["origin"]: row["n"] for row in grouped}
    return counted.get(fallback, 0), sum(counted.values())
