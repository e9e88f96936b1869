"""Benchmark: one research topic end to end against loopback services with real latencies.

Prints JSON: wall time; LLM calls per stage; the critical-path lower bound of the stage graph
under the rate limits, and wall / bound; the speed-up over a sequential, one-hit-per-call
baseline run against the same services; and a warm-cache re-run (external calls and time).

The report is streamed: for the fixed latencies and for a realistic writing profile (the first
token after 0.6 s, then 40 tokens/s; summaries ~250 tokens, the answer ~1,500, every other
answer as long as its text), it also gives the time from approval to the first words of the
report and to the finished report, against the critical-path bound of the stages before the
answer (target: first words <= that bound + 1 s).

    .venv/bin/python bench/pipeline.py [--searxng-rpm 60] [--extra-pages 60] [--no-baseline]
    .venv/bin/python bench/pipeline.py --estimate   # the cost shown before Approve vs what was spent
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_limit_arguments, argument_parser, limit_settings, setup_django

LATENCY = {"llm": 1.0, "search": 0.3, "reader": 0.8}
# The realistic profile: how a hosted model writes.
FIRST_TOKEN_SECONDS, TOKENS_PER_SECOND = 0.6, 40.0
PROFILE_TOKENS = {"summarise": 250, "answer": 1500}


def main() -> None:
    args = parse_args()
    setup_django()
    from django.conf import settings
    from django.contrib.auth.models import User

    from tests.support.world import TOPIC, world

    owner, _ = User.objects.get_or_create(username="bench")
    if args.estimate:
        print(json.dumps({"benchmark": "pipeline", "estimate": estimate_error(owner, args)}, indent=2))
        return
    if args.streaming_only:
        limits = limit_settings(args)
        print(
            json.dumps(
                {"benchmark": "pipeline", "limits": limits, **streaming(owner, args, limits)}, indent=2
            )
        )
        return
    limits = limit_settings(args)
    with world(
        llm_latency=LATENCY["llm"],
        search_latency=LATENCY["search"],
        reader_latency=LATENCY["reader"],
        extra_pages=args.extra_pages,
        queries_per_language=3,
    ) as w:
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
    result = report(cold, warm, bound, baseline, baseline_calls, requests, limits)
    result["report_streaming"] = {"fixed": streamed_figures(cold, requests, limits, _fixed_llm_latency)}
    result["report_streaming"].update(streaming(owner, args, limits, fixed=False)["report_streaming"])
    print(json.dumps(result, indent=2))


def streaming(owner: Any, args: argparse.Namespace, limits: dict, *, fixed: bool = True) -> dict[str, Any]:
    """Approval → first words and → finished report, under the fixed latencies (unless `fixed` is
    False: the main run measured them) and the realistic writing profile."""
    from django.conf import settings

    from research.models import CacheEntry
    from tests.support.fakes import Pace
    from tests.support.world import TOPIC, prompt_kind, world

    figures: dict[str, Any] = {}
    profiles: list[tuple[str, dict[str, Any]]] = []
    if fixed:
        profiles.append(("fixed", {"llm_latency": LATENCY["llm"]}))

    def tokens(messages: list[dict], text: str) -> int:
        return PROFILE_TOKENS.get(prompt_kind(messages[0]["content"]), len(text) // 4 + 1)

    pace = Pace(first_token=FIRST_TOKEN_SECONDS, tokens_per_second=TOKENS_PER_SECOND, tokens=tokens)
    profiles.append(("realistic", {"llm_pace": pace}))
    for name, llm in profiles:
        services: dict[str, Any] = {"search_latency": LATENCY["search"], "reader_latency": LATENCY["reader"]}
        with world(**services, **llm, extra_pages=args.extra_pages, queries_per_language=3) as w:
            for setting, value in {**w.settings(), **limits}.items():
                setattr(settings, setting, value)
            # A question of its own and an empty cache: the queries, searches, pages and summaries
            # of an earlier run do not depend on the question, and were served from the cache.
            CacheEntry.objects.all().delete()
            run = run_topic(owner, f"{TOPIC} ({name})")
            requests = {
                "llm": len(w.llm.requests),
                "search": len(w.searxng.requests),
                "reader": len(w.reader.requests),
            }
        latency = _fixed_llm_latency if name == "fixed" else _profile_llm_latency(run["topic_id"])
        figures[name] = streamed_figures(run, requests, limits, latency)
    return {"report_streaming": figures}


def _fixed_llm_latency(stage: str) -> float:
    return LATENCY["llm"]


def _profile_llm_latency(topic_id: int) -> Any:
    """One call's time in each stage under the realistic profile: the first token, then the
    stage's longest answer at TOKENS_PER_SECOND (the profile's length, or the tokens it wrote)."""
    from django.db.models import Max

    from research.models import LLMCall

    calls = LLMCall.objects.filter(topic_id=topic_id, cache_hit=False, error="")
    rows = calls.values("stage").annotate(longest=Max("completion_tokens"))
    longest = {row["stage"]: PROFILE_TOKENS.get(row["stage"], row["longest"]) for row in rows}
    return lambda stage: FIRST_TOKEN_SECONDS + longest.get(stage, 0) / TOKENS_PER_SECOND


def streamed_figures(run: dict, requests: dict, limits: dict, llm_latency: Any) -> dict[str, Any]:
    before_answer = critical_path_bound(run["llm_calls"], requests, limits, llm_latency, upto_answer=True)
    first_words = run["first_words_seconds"]
    return {
        "approval_to_answer_stage_seconds": run["answer_started_seconds"],
        "approval_to_first_words_seconds": first_words,
        "approval_to_finished_report_seconds": run["finished_report_seconds"],
        "bound_before_answer_seconds": round(before_answer, 2),
        "first_words_over_bound_plus_1s": round(first_words / (before_answer + 1.0), 3)
        if first_words
        else None,
        "target": "first words <= bound before answer + 1 s",
    }


class Clock:
    """Listens to a run: when the report's first words arrive and when the report is saved."""

    def __init__(self) -> None:
        self.answer_started: float | None = None
        self.first_words: float | None = None
        self.finished: float | None = None

    def __call__(self, event: Any) -> None:
        if event.stage == "answer" and event.done == 0 and self.answer_started is None:
            self.answer_started = time.perf_counter()
        if event.stage == "answer" and event.done == 1 and self.finished is None:
            self.finished = time.perf_counter()

    def report_text(self, text: str) -> None:
        if self.first_words is None and text.strip():
            self.first_words = time.perf_counter()


def parse_args() -> argparse.Namespace:
    parser = argument_parser(__doc__)
    add_limit_arguments(
        parser,
        searxng_rpm=60.0,
        searxng_help="LIMIT_SEARXNG_RPM (here 60, as a self-hosted SearXNG allows; its default: 10)",
    )
    parser.add_argument(
        "--extra-pages", type=int, default=60, help="less relevant pages, to fill result pages"
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="only the cost estimate shown before Approve against the calls and tokens then spent, "
        "quick and deep, and a topic capped at half its estimate",
    )
    parser.add_argument(
        "--streaming-only",
        action="store_true",
        help="only the report-streaming figures (fixed latencies and the realistic profile)",
    )
    return parser.parse_args()


def estimate_error(owner: Any, args: argparse.Namespace, runs: int = 6) -> dict[str, Any]:
    """Each topic's estimate as its plan awaits approval (from the topics before it) against what
    its run then paid for; the cache is emptied between runs, so every run pays in full, as a new
    question would. The runs are in worlds of 10 to 110 extra pages (more found, more scored), so
    no two cost the same. Then a topic capped at half its estimate."""
    from research import estimate
    from research.models import Report, Topic
    from research.pipeline import cap

    figures: dict[str, Any] = {}
    for mode in ("quick", "deep"):
        rows = [_estimated_run(owner, args, mode, extra_pages=10 + 20 * run) for run in range(runs)]
        from_history = [row for row in rows if row["measured_from_history"]]
        figures[mode] = {
            "runs": rows,
            "max_abs_calls_error_from_history": max(
                (abs(r["calls_error"]) for r in from_history), default=None
            ),
            "max_abs_tokens_error_from_history": max(
                (abs(r["tokens_error"]) for r in from_history), default=None
            ),
        }
    with _fresh_world(args, extra_pages=args.extra_pages):
        topic = Topic.objects.create(owner=owner, question=_question())
        _plan(topic)
        half = max(1, round(estimate.estimate(topic)["tokens"].mid / 2))
        topic.token_cap = half
        topic.save(update_fields=["token_cap"])
        status = _run(topic)
        report = Report.objects.filter(topic=topic).first()
        figures["capped"] = {
            "cap": half,
            "status": status,
            "tokens_before_the_report": cap.spent(topic, besides=("answer", "citecheck")),
            "tokens_in_all": cap.spent(topic),
            "report_marks": report.marks if report else None,
        }
    return figures


def _question() -> str:
    from tests.support.world import TOPIC

    return TOPIC


@contextmanager
def _fresh_world(args: argparse.Namespace, *, extra_pages: int) -> Iterator[None]:
    from django.conf import settings

    from research.models import CacheEntry
    from tests.support.world import world

    with world(extra_pages=extra_pages, queries_per_language=3) as w:
        for name, value in {**w.settings(), **limit_settings(args)}.items():
            setattr(settings, name, value)
        CacheEntry.objects.all().delete()
        yield


def _plan(topic: Any) -> None:
    from research.pipeline.run import plan_topic

    plan_topic(topic.pk)
    topic.refresh_from_db()


def _run(topic: Any) -> str:
    from research.models import Topic
    from research.pipeline.run import run_topic

    topic.set_status(Topic.Status.QUEUED)
    return run_topic(topic.pk)


def _estimated_run(owner: Any, args: argparse.Namespace, mode: str, *, extra_pages: int) -> dict[str, Any]:
    from research import estimate
    from research.models import LLMCall, Topic
    from research.pipeline import cap

    with _fresh_world(args, extra_pages=extra_pages):
        topic = Topic.objects.create(owner=owner, question=_question(), mode=mode)
        _plan(topic)
        guess = estimate.estimate(topic)
        _run(topic)
    calls, tokens = LLMCall.objects.filter(topic=topic, cache_hit=False).count(), cap.spent(topic)
    return {
        "extra_pages": extra_pages,
        "measured_from_history": guess["measured"],
        "calls": {"estimate": round(guess["calls"].mid), "range": _range(guess["calls"]), "actual": calls},
        "tokens": {
            "estimate": round(guess["tokens"].mid),
            "range": _range(guess["tokens"]),
            "actual": tokens,
        },
        "calls_error": _error(guess["calls"].mid, calls),
        "tokens_error": _error(guess["tokens"].mid, tokens),
    }


def _range(figure: Any) -> list[int]:
    return [round(figure.low), round(figure.high)]


def _error(estimated: float, actual: int) -> float:
    return round((estimated - actual) / actual, 3) if actual else 0.0


def run_topic(owner: Any, question: str) -> dict[str, Any]:
    from research.models import LLMCall, Topic
    from research.pipeline.run import plan_topic, run_topic

    topic = Topic.objects.create(owner=owner, question=question, auto_approve=True)
    clock = Clock()
    started = time.perf_counter()
    plan_topic(topic.pk)
    approved = time.perf_counter()  # auto-approved: the run starts as the plan is made
    status = run_topic(topic.pk, [clock])
    wall = time.perf_counter() - started
    calls = LLMCall.objects.filter(topic=topic, cache_hit=False).values_list("stage", flat=True)
    hits = topic.hits.count()

    def since_approval(moment: float | None) -> float | None:
        return round(moment - approved, 2) if moment else None

    return {
        "status": status,
        "wall_seconds": round(wall, 2),
        "llm_calls": dict(Counter(calls)),
        "hits": hits,
        "topic_id": topic.pk,
        "answer_started_seconds": since_approval(clock.answer_started),
        "first_words_seconds": since_approval(clock.first_words),
        "finished_report_seconds": since_approval(clock.finished),
    }


def stage_time(calls: int, limit: float, window: float, latency: float) -> float:
    """Least time for `calls` requests under `limit` per `window` as the limiter grants them:
    evenly spaced, one every window / limit seconds (issue 18: a minute's allowance never goes
    out at once; SearXNG's own limiter also counts bursts, in a sliding 20-s window), then the
    last one's latency."""
    from mindsearch.clients.ratelimit import window_of

    if calls == 0:
        return 0.0
    if limit <= 0:
        return latency
    grants, span = window_of(limit, window)
    return (calls - 1) * span / grants + latency


def critical_path_bound(
    llm_calls: dict[str, int],
    requests: dict[str, int],
    limits: dict[str, float],
    llm_latency: Any = None,
    *,
    upto_answer: bool = False,
) -> float:
    """The least time the stage graph allows under the rate limits and latencies.

    Stages follow one another (each needs the rows of the one before), except that each page
    goes on to its summary as soon as it is read; within a stage every call is independent.
    `llm_latency(stage)` is one LLM call's time in that stage (default: the fixed latency); with
    `upto_answer`, the bound from approval (after the plan) to the answer's request.
    """
    latency_of = llm_latency or _fixed_llm_latency
    llm_rps, reader_rps, rpm = (
        limits["LIMIT_AITUNNEL_RPS"],
        limits["LIMIT_JINA_RPS"],
        limits["LIMIT_SEARXNG_RPM"],
    )

    def llm(stage: str) -> float:
        return stage_time(llm_calls.get(stage, 0), llm_rps, 1.0, latency_of(stage))

    searching = stage_time(requests["search"], rpm, 60.0, LATENCY["search"])
    reading = stage_time(requests["reader"], reader_rps, 1.0, LATENCY["reader"])
    # Summaries start when the first page is in; the last one cannot start before the last page.
    read_and_summarise = max(reading + latency_of("summarise"), LATENCY["reader"] + llm("summarise"))
    if upto_answer:
        return llm("queries") + searching + llm("score_hits") + read_and_summarise + llm("score_summaries")
    before_reading = llm("plan") + llm("queries") + searching + llm("score_hits")
    return before_reading + read_and_summarise + llm("score_summaries") + llm("answer")


async def sequential_baseline(question: str) -> Counter:
    """What a naive implementation does: every call one after another, one hit per scoring call."""
    from mindsearch.clients import llm, reader, websearch
    from research.pipeline.links import normalize_url
    from research.pipeline.prompting import data_block, load_prompt
    from research.pipeline.replies import parse_prefixed_lines, split_by_language

    calls: Counter = Counter()

    async def ask(prompt: str, content: str) -> str:
        calls["llm"] += 1
        system = load_prompt(prompt).text
        return (
            await llm.complete([{"role": "system", "content": system}, {"role": "user", "content": content}])
        ).text

    subqueries = parse_prefixed_lines(await ask("plan", f'Запрос: "{question}"'), "ПОДЗАПРОС:", 3)
    documents: list[str] = []
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
