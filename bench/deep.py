"""Benchmark: quick mode against deep mode on a web whose facts one round cannot reach.

The loopback web of tests/support/deep_world.py: the pages a first search finds name other
things (the Merlin ballot scheme, the Osprey protocol) that only a search for those names
finds, and those pages name others again; nine facts in all, one of them on a site that
already has a page, one deep inside a long page. The same topic runs in quick mode and in deep
mode (the cache emptied in between, so each pays for its own calls), with LLM, search and
reader latencies and the settings' default rate limits (SearXNG's is --searxng-rpm), then, as
a check of the engine without a model, in deep mode without an LLM. Prints JSON:

- facts in the documents read and in what the report was written from (the answer's input);
- rounds used and, per round, its sub-queries, pages read, relevant new and known documents,
  growth rate and why the search stopped;
- LLM calls per stage, external requests and wall time;
- checks: deep finds strictly more facts than quick, and stops on its own before the maximum;
  a report cites a second page of a site only when no other site with a good page is left out
  (the per-site cap is a preference that fills the budget, research/pipeline/stages/answer/diversity.py).
  It exits 1 when a check fails.

    .venv/bin/python bench/deep.py [--searxng-rpm 60] [--llm-rps 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_limit_arguments, argument_parser, limit_settings, print_report, setup_django

LATENCY = {"llm": 1.0, "search": 0.3, "reader": 0.8}


def main() -> None:
    args = parse_args()
    setup_django("mindsearch_bench_deep")
    from django.conf import settings
    from django.contrib.auth.models import User

    from research.models import CacheEntry
    from tests.support.deep_world import FACTS, deep_world

    owner, _ = User.objects.get_or_create(username="bench-deep")
    limits = limit_settings(args)
    latencies = {
        "llm_latency": LATENCY["llm"],
        "search_latency": LATENCY["search"],
        "reader_latency": LATENCY["reader"],
    }
    runs: dict[str, Any] = {}
    with deep_world(**latencies) as web:
        for name, value in {**web.settings(), **limits}.items():
            setattr(settings, name, value)
        for label, mode in (("quick", "quick"), ("deep", "deep")):
            CacheEntry.objects.all().delete()
            runs[label] = run_topic(owner, mode, web)
        CacheEntry.objects.all().delete()
        settings.AITUNNEL_API_KEY, settings.AITUNNEL_BASE_URL = "", "https://api.aitunnel.ru/v1/"
        runs["deep_without_llm"] = run_topic(owner, "deep", web)
    result = report(runs, len(FACTS), limits, settings)
    print_report(result, ok=all(result["checks"].values()))


def parse_args() -> argparse.Namespace:
    parser = argument_parser(__doc__)
    add_limit_arguments(
        parser,
        searxng_rpm=60.0,
        searxng_help="LIMIT_SEARXNG_RPM (here 60, as a self-hosted SearXNG allows; its default: 10)",
    )
    return parser.parse_args()


def run_topic(owner: Any, mode: str, web: Any) -> dict[str, Any]:
    from research.models import Document, LLMCall, Report, Topic
    from research.pipeline.run import plan_topic, run_topic
    from research.pipeline.stages import deep
    from research.pipeline.stages.answer.diversity import site_of_url
    from tests.support.deep_world import QUESTION, facts_in

    before = {
        "llm": len(web.llm.requests),
        "search": len(web.searxng.requests),
        "reader": len(web.reader.requests),
    }
    answers_before = len(web.script.answer_requests)
    topic = Topic.objects.create(owner=owner, question=QUESTION, mode=mode, auto_approve=True)
    started = time.perf_counter()
    if plan_topic(topic.pk):
        run_topic(topic.pk)
    wall = time.perf_counter() - started
    topic.refresh_from_db()
    texts = Document.objects.filter(topic=topic).values_list("text", flat=True)
    found = set().union(*(facts_in(text) for text in texts))
    report = Report.objects.filter(topic=topic).first()
    answer_input = web.script.answer_requests[answers_before:] if topic.llm_model else []
    written_from = facts_in(answer_input[-1]) if answer_input else facts_in(report.markdown if report else "")
    calls = LLMCall.objects.filter(topic=topic, cache_hit=False).values_list("stage", flat=True)
    sites = [site_of_url(source["url"]) for source in (report.sources if report else [])]
    return {
        "status": topic.status,
        "wall_seconds": round(wall, 2),
        "facts_in_documents_read": sorted(found),
        "facts_in_report_input": sorted(written_from),
        "documents_read": len(texts),
        "report_sources": len(sites),
        "report_sources_distinct_sites": len(set(sites)),
        "good_sites_left_out": sorted(good_sites(topic) - set(sites)),
        "rounds": [
            {key: (round(value, 3) if isinstance(value, float) else value) for key, value in row.items()}
            for row in deep.rounds_of(topic)
        ],
        "llm_calls": dict(Counter(calls)),
        "llm_calls_total": len(calls),
        "external_requests": {
            "llm": len(web.llm.requests) - before["llm"],
            "search": len(web.searxng.requests) - before["search"],
            "reader": len(web.reader.requests) - before["reader"],
        },
    }


def good_sites(topic: Any) -> set[str]:
    """The sites of the pages a report may cite: summaries an LLM scored at the minimum or more,
    and those the keyword fallback scored, which no minimum drops."""
    from django.conf import settings

    from research.models import Document, SummaryScore
    from research.pipeline.stages.answer.diversity import site_of

    scored = Document.objects.filter(topic=topic, summary__score__isnull=False).select_related(
        "summary__score"
    )
    return {
        site_of(document)
        for document in scored
        if document.summary.score.total >= settings.RESEARCH_MIN_SCORE
        or document.summary.score.origin != SummaryScore.Origin.LLM
    }


def sites_spread_first(run: dict[str, Any]) -> bool:
    """A site is cited twice only when every site with a good page is cited already."""
    return run["report_sources"] == run["report_sources_distinct_sites"] or not run["good_sites_left_out"]


def report(runs: dict[str, Any], fact_count: int, limits: dict[str, float], settings: Any) -> dict[str, Any]:
    quick, deep_run = runs["quick"], runs["deep"]
    last_round = (deep_run["rounds"] or [{}])[-1]
    summary = {
        "facts_total": fact_count,
        "facts_found_quick": len(quick["facts_in_documents_read"]),
        "facts_found_deep": len(deep_run["facts_in_documents_read"]),
        "facts_in_report_quick": len(quick["facts_in_report_input"]),
        "facts_in_report_deep": len(deep_run["facts_in_report_input"]),
        "rounds_used": len(deep_run["rounds"]),
        "max_rounds": settings.RESEARCH_DEEP_MAX_ROUNDS,
        "growth_per_round": [row["growth"] for row in deep_run["rounds"]],
        "stop": last_round.get("stop_reason", ""),
        "llm_calls_quick": quick["llm_calls_total"],
        "llm_calls_deep": deep_run["llm_calls_total"],
        "wall_seconds_quick": quick["wall_seconds"],
        "wall_seconds_deep": deep_run["wall_seconds"],
    }
    checks = {
        "deep_finds_strictly_more": set(quick["facts_in_documents_read"])
        < set(deep_run["facts_in_documents_read"]),
        "deep_report_holds_strictly_more": set(quick["facts_in_report_input"])
        < set(deep_run["facts_in_report_input"]),
        "deep_stopped_by_growth_before_the_maximum": summary["stop"] == "growth"
        and summary["rounds_used"] < settings.RESEARCH_DEEP_MAX_ROUNDS,
        "a_site_twice_only_when_no_other_is_left": all(sites_spread_first(run) for run in runs.values()),
    }
    return {
        "benchmark": "deep",
        "latency_seconds": LATENCY,
        "limits": limits,
        "settings": {
            "RESEARCH_DEEP_MAX_ROUNDS": settings.RESEARCH_DEEP_MAX_ROUNDS,
            "RESEARCH_DEEP_GROWTH_THRESHOLD": settings.RESEARCH_DEEP_GROWTH_THRESHOLD,
            "RESEARCH_DEEP_SUBQUERIES": settings.RESEARCH_DEEP_SUBQUERIES,
            "RESEARCH_MIN_SCORE": settings.RESEARCH_MIN_SCORE,
            "RESEARCH_SOURCES_PER_SITE": settings.RESEARCH_SOURCES_PER_SITE,
        },
        "summary": summary,
        "checks": checks,
        "runs": runs,
    }


if __name__ == "__main__":
    main()
