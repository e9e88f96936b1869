"""Benchmark: one research topic end to end against loopback services with real latencies.

Prints JSON: wall time; LLM calls per stage; the critical-path lower bound of the stage graph
under the rate limits, and wall / bound; the speed-up over a sequential, one-hit-per-call
baseline run against the same services; and a warm-cache re-run (external calls and time).

    .venv/bin/python bench/pipeline.py [--searxng-rpm 60] [--extra-pages 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_limit_arguments, limit_settings, setup_django

LATENCY = {"llm": 1.0, "search": 0.3, "reader": 0.8}


def main() -> None:
    args = parse_args()
    setup_django()
    from django.conf import settings
    from django.contrib.auth.models import User

    from tests.support.world import TOPIC, world

    owner, _ = User.objects.get_or_create(username="bench")
    limits = limit_settings(args)
    latencies = {
        "llm_latency": LATENCY["llm"],
        "search_latency": LATENCY["search"],
        "reader_latency": LATENCY["reader"],
    }
    with world(**latencies, extra_pages=args.extra_pages, queries_per_language=3) as w:
        for name, value in {**w.settings(), **limits}.items():
            setattr(settings, name, value)
        cold = run_topic(owner, TOPIC)
        requests = {
            "llm": len(w.llm.requests),
            "search": len(w.searxng.requests),
            "reader": len(w.reader.requests),
        }
        before = w.external_requests()
        warm = run_topic(owner, TOPIC)
        warm["external_calls"] = w.external_requests() - before
        baseline_started = time.perf_counter()
        baseline_calls = asyncio.run(sequential_baseline(TOPIC))
        baseline = time.perf_counter() - baseline_started
    bound = critical_path_bound(cold["llm_calls"], requests, limits)
    print(json.dumps(report(cold, warm, bound, baseline, baseline_calls, requests, limits), indent=2))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_limit_arguments(
        parser, searxng_rpm=60.0, searxng_help="LIMIT_SEARCHXNG_RPM (seed default 10; a self-hosted SearXNG)"
    )
    parser.add_argument(
        "--extra-pages", type=int, default=60, help="less relevant pages, to fill result pages"
    )
    return parser.parse_args()


def run_topic(owner: Any, question: str) -> dict[str, Any]:
    from research.models import LLMCall, Topic
    from research.pipeline.run import plan_topic, run_topic

    topic = Topic.objects.create(owner=owner, question=question, auto_approve=True)
    started = time.perf_counter()
    plan_topic(topic.pk)
    status = run_topic(topic.pk)
    wall = time.perf_counter() - started
    calls = LLMCall.objects.filter(topic=topic, cache_hit=False).values_list("stage", flat=True)
    hits = topic.hits.count()
    return {"status": status, "wall_seconds": round(wall, 2), "llm_calls": dict(Counter(calls)), "hits": hits}


def stage_time(calls: int, limit: float, window: float, latency: float) -> float:
    """Least time for `calls` requests when no `window` may hold more than `limit` of them."""
    from mindsearch.clients.ratelimit import window_of

    if calls == 0:
        return 0.0
    if limit <= 0:
        return latency
    grants, span = window_of(limit, window)
    return (calls - 1) // grants * span + latency


def critical_path_bound(
    llm_calls: dict[str, int], requests: dict[str, int], limits: dict[str, float]
) -> float:
    """The least time the stage graph allows under the rate limits and latencies.

    Stages follow one another (each needs the rows of the one before), except that each page
    goes on to its summary as soon as it is read; within a stage every call is independent.
    """
    llm_rps, reader_rps, rpm = (
        limits["LIMIT_AITUNNEL_RPS"],
        limits["LIMIT_JINA_RPS"],
        limits["LIMIT_SEARCHXNG_RPM"],
    )

    def llm(stage: str) -> float:
        return stage_time(llm_calls.get(stage, 0), llm_rps, 1.0, LATENCY["llm"])

    searching = stage_time(requests["search"], rpm, 60.0, LATENCY["search"])
    reading = stage_time(requests["reader"], reader_rps, 1.0, LATENCY["reader"])
    # Summaries start when the first page is in; the last one cannot start before the last page.
    read_and_summarise = max(reading + LATENCY["llm"], LATENCY["reader"] + llm("summarise"))
    before_reading = llm("plan") + llm("queries") + searching + llm("score_hits")
    return before_reading + read_and_summarise + llm("score_summaries") + llm("answer")


async def sequential_baseline(question: str) -> Counter:
    """What a naive implementation does: every call one after another, one hit per scoring call."""
    from mindsearch.clients import llm, reader, websearch
    from research.pipeline.llm import data_block, load_prompt
    from research.pipeline.parsing import parse_prefixed_lines, split_by_language
    from research.pipeline.urls import normalize_url

    calls: Counter = Counter()

    async def ask(prompt: str, content: str) -> str:
        calls["llm"] += 1
        system = load_prompt(prompt).text
        return (
            await llm.complete([{"role": "system", "content": system}, {"role": "user", "content": content}])
        ).text

    subqueries = parse_prefixed_lines(await ask("plan", f'Запрос: "{question}"'), "ПОДЗАПРОС:", 3)
    documents = []
    seen: set[str] = set()
    for subquery in subqueries:
        russian, english = split_by_language(
            parse_prefixed_lines(await ask("queries", f'Тема: "{subquery}"'), "ЗАПРОС:")
        )
        hits = []
        for language, queries in (("ru", russian[:3]), ("en", english[:3])):
            for query in queries:
                calls["search"] += 1
                for result in (await websearch.search(query, language=language)).results[:10]:
                    if normalize_url(result.url) not in seen:
                        seen.add(normalize_url(result.url))
                        hits.append(result)
        scored = []
        for hit in hits:
            item = data_block(f"1. Заголовок: {hit.title}\nURL: {hit.url}\nОписание: {hit.snippet}")
            scored.append(
                (
                    await ask(
                        "score",
                        f"Исходный запрос: {question}\nТекущее направление поиска: {subquery}\n{item}",
                    ),
                    hit,
                )
            )
        for _, hit in scored[:5]:
            calls["reader"] += 1
            page = await reader.read(hit.url)
            summary = await ask("summarise", data_block(page.markdown))
            await ask("score", f"Исходный запрос: {question}\n{data_block(summary)}")
            documents.append(f"[{len(documents) + 1}] {page.title}\n{page.url}\n\n{page.markdown}")
    await ask(
        "answer", f"Исходный запрос: {question}\n\nИсточники:\n" + data_block("\n---\n".join(documents[:5]))
    )
    return calls


def report(
    cold: dict,
    warm: dict,
    bound: float,
    baseline: float,
    baseline_calls: Counter,
    requests: dict,
    limits: dict,
) -> dict[str, Any]:
    return {
        "benchmark": "pipeline",
        "latency_seconds": LATENCY,
        "limits": limits,
        "topic": cold,
        "external_requests": requests,
        "critical_path_bound_seconds": round(bound, 2),
        "wall_over_bound": round(cold["wall_seconds"] / bound, 3),
        "baseline": {"wall_seconds": round(baseline, 2), "calls": dict(baseline_calls)},
        "speedup_over_baseline": round(baseline / cold["wall_seconds"], 2),
        "warm_rerun": {
            "status": warm["status"],
            "wall_seconds": warm["wall_seconds"],
            "external_calls": warm["external_calls"],
        },
        "targets": {
            "wall_over_bound": "<= 1.25",
            "speedup": ">= 5",
            "warm_external_calls": 0,
            "warm_seconds": "< 2",
        },
    }


if __name__ == "__main__":
    main()
