"""Benchmark: 20 topics from 5 users at once on a cluster of 2 worker processes.

Against a database of its own and the loopback world with real latencies (LLM 1.0 s, search
0.3 s, reader 0.8 s) and the global limits (LLM 2/s and reader 5/s, the settings' defaults,
SearXNG --searxng-rpm): two qcluster processes of one worker each (two hosts' worth, sharing the
ORM broker and the limits) and one daphne with production settings. Each topic asks about its
own variant of the question, so its searches, pages and summaries are its own and nothing is
served from another topic's cache. All 20 are queued at once; while they run, each user's
browser asks for its topic list and one of its topic pages in turn.

Prints JSON: how the topics ended and how long they took; whether the run got stuck (no end
before --timeout); the searches the fake SearXNG counted in every 60-s window against the
limit (and LLM and reader calls per second against theirs); page latency during the load; the
machine's load average (other work on it slows everything here). Exits 1 unless every topic
completed in time with every limit held and every page answered 200.

    .venv/bin/python bench/load.py [--topics 20] [--users 5] [--searxng-rpm 30] [--timeout 1500]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    ROOT,
    add_limit_arguments,
    argument_parser,
    limit_settings,
    print_report,
    setup_django,
)
from bench.web import session_cookie, summary

DATABASE = "mindsearch_bench_load"
LATENCY = {"llm_latency": 1.0, "search_latency": 0.3, "reader_latency": 0.8}
VARIANT = re.compile(r"\(тема (\d+)\)|\bt(\d+)\b|/pages/t(\d+)/")
ASPECTS = [
    ("Что такое Mixture of Tokens в машинном обучении?", "что такое", "what is"),
    ("Где используется Mixture of Tokens и какие задачи решает?", "применение", "where is it used"),
    ("Какие есть улучшения Mixture of Tokens и их преимущества?", "улучшения", "improvements"),
]


def main() -> None:
    args = parse_args()
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))  # shared with the processes
    setup_django(DATABASE)
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    with ExitStack() as stack:
        w = stack.enter_context(load_world())
        env = process_env(w, args)
        port = stack.enter_context(web_process(env))
        for _ in range(2):
            stack.enter_context(worker_process(env))
        report = run_load(w, port, args)
    report["machine"] = {
        "cpus": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    print_report(report, ok=report["ok"])


def parse_args() -> argparse.Namespace:
    parser = argument_parser(__doc__)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--users", type=int, default=5)
    add_limit_arguments(
        parser,
        searxng_rpm=30.0,
        searxng_help="LIMIT_SEARXNG_RPM (here 30; its default, 10, makes a 12-minute run)",
    )
    parser.add_argument(
        "--timeout", type=float, default=1500.0, help="seconds before the run counts as stuck"
    )
    parser.add_argument("--think", type=float, default=0.5, help="seconds between a browser's two pages")
    args = parser.parse_args()
    args.limits = limit_settings(args)
    return args


# --- The world: a variant of the test world's topic per research topic ----------------------------


def variant_of(text: str) -> str:
    found = VARIANT.search(text)
    return next(group for group in found.groups() if group) if found else "0"


@contextmanager
def load_world() -> Iterator[Any]:
    """The scripted world of the tests, made to give each topic variant its own work: its own
    sub-queries and queries (one Russian and one English each), result URLs and page texts."""
    from tests.support.fakes import Response, openai_chat, reader_text, searxng_search
    from tests.support.world import PAGES, ScriptedLLM, search_pages, world

    class VariantScript(ScriptedLLM):
        def plan(self, user: str) -> str:
            return "\n".join(f"ПОДЗАПРОС: {text} (тема {variant_of(user)})" for text, _, _ in ASPECTS)

        def queries(self, user: str) -> str:
            return "\n".join(
                f"ЗАПРОС: Mixture of Tokens {words} t{variant_of(user)}"
                for text, ru, en in ASPECTS
                if text in user
                for words in (ru, en)
            )

    with world(
        llm_latency=LATENCY["llm_latency"],
        search_latency=LATENCY["search_latency"],
        reader_latency=LATENCY["reader_latency"],
    ) as w:
        w.script = VariantScript(pages=w.script.pages, queries_per_language=w.script.queries_per_language)
        w.llm.routes[("POST", "/v1/chat/completions")] = openai_chat(w.script)
        plain = search_pages(w.web.url, PAGES)

        def results(request: Any) -> list[dict]:
            n = variant_of(request.param("q"))
            return [
                {**item, "url": item["url"].replace("/pages/", f"/pages/t{n}/")} for item in plain(request)
            ]

        w.searxng.routes[("GET", "/search")] = searxng_search(results)
        by_slug = {slug: (title, text) for slug, title, _, _, text in PAGES}

        def read(request: Any) -> Response:
            target = request.raw_path.removeprefix("/")
            slug = target.split("?")[0].rsplit("/", 1)[-1]
            title, text = by_slug[slug]
            body = f"# {title}\n\n{text} Variant {variant_of(target)} of the page."
            return Response(200, reader_text(title, target, body))

        w.reader.fallback = read
        yield w


# --- Processes --------------------------------------------------------------------------------


def process_env(w: Any, args: argparse.Namespace) -> dict[str, str]:
    from tests.support.processes import process_env as base_env

    settings = {**w.env(), **{name: str(value) for name, value in args.limits.items()}}
    # Production settings (DEBUG off), plain HTTP on loopback; one worker per cluster.
    production = {"DEBUG": "0", "SECURE_SSL_REDIRECT": "0", "LOG_LEVEL": "WARNING"}
    return base_env(**settings, **production, SECRET_KEY=os.environ["SECRET_KEY"], MINDSEARCH_WORKERS="1")


@contextmanager
def worker_process(env: dict[str, str]) -> Iterator[subprocess.Popen]:
    from tests.support.processes import stop

    proc = subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env, stdout=sys.stderr)
    try:
        yield proc
    finally:
        stop(proc)


@contextmanager
def web_process(env: dict[str, str]) -> Iterator[int]:
    from mindsearch.management.commands.serve import answers_http
    from tests.support.processes import free_port, stop, wait_for_port

    port = free_port()
    cmd = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "mindsearch.asgi:application"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sys.stderr)
    try:
        wait_for_port(port, proc)
        while not answers_http("127.0.0.1", port):
            time.sleep(0.1)
        yield port
    finally:
        stop(proc)


# --- The run --------------------------------------------------------------------------------


def run_load(w: Any, port: int, args: argparse.Namespace) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django_q.tasks import async_task

    from research.models import Topic
    from tests.support.world import TOPIC

    users = [User.objects.get_or_create(username=f"load-{n}")[0] for n in range(args.users)]
    topics = [
        Topic.objects.create(owner=users[n % args.users], question=f"{TOPIC} (тема {n})", auto_approve=True)
        for n in range(args.topics)
    ]
    started = time.monotonic()
    for topic in topics:
        async_task("research.tasks.plan", topic.pk, task_name=f"load topic {topic.pk}")
    browsers = {session_cookie(user): [t.pk for t in topics if t.owner_id == user.pk] for user in users}
    pages, stuck = asyncio.run(browse_until_done(port, browsers, [t.pk for t in topics], args))
    wall = time.monotonic() - started
    return assemble(w, topics, pages, wall, stuck, started, args)


async def browse_until_done(
    port: int, browsers: dict[str, list[int]], topic_ids: list[int], args: argparse.Namespace
) -> tuple[dict[str, list], bool]:
    """Each user's browser alternates its topic list and one of its topics until all are done."""
    import httpx

    pages: dict[str, list] = {"topic_list": [], "topic_page": []}
    done = asyncio.Event()

    async def browse(cookie: str, own: list[int]) -> None:
        rng = random.Random(cookie)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"Cookie": cookie}
        ) as client:
            while not done.is_set():
                for kind, path in (("topic_list", "/"), ("topic_page", f"/topics/{rng.choice(own)}/")):
                    began = time.perf_counter()
                    response = await client.get(path, timeout=60)
                    pages[kind].append(((time.perf_counter() - began) * 1000, response.status_code))
                    await asyncio.sleep(args.think)

    async def watch() -> bool:
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            if await asyncio.to_thread(all_finished, topic_ids):
                return False
            await asyncio.sleep(2)
        return True

    browsing = [asyncio.create_task(browse(cookie, own)) for cookie, own in browsers.items()]
    stuck = await watch()
    done.set()
    await asyncio.gather(*browsing)
    return pages, stuck


def all_finished(topic_ids: list[int]) -> bool:
    from research.models import Topic

    return (
        not Topic.objects.filter(pk__in=topic_ids)
        .exclude(status__in=["completed", "failed", "cancelled"])
        .exists()
    )


# --- The report --------------------------------------------------------------------------------


def assemble(
    w: Any,
    topics: list,
    pages: dict[str, list],
    wall: float,
    stuck: bool,
    started: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    from research.models import Topic

    ended = {t.pk: t for t in Topic.objects.filter(pk__in=[t.pk for t in topics])}
    statuses = [ended[t.pk].status for t in topics]
    durations = [
        (t.finished_at - t.created_at).total_seconds() for t in ended.values() if t.finished_at is not None
    ]
    searches = sorted(r.arrived for r in w.searxng.requests_to("/search"))
    llm = sorted(r.arrived for r in w.llm.requests)
    reads = sorted(r.arrived for r in w.reader.requests)
    search_max = max_in_window(searches, 60.0)
    report = {
        "benchmark": "load",
        "setup": {
            "topics": args.topics,
            "users": args.users,
            "worker_processes": 2,
            "latency_seconds": LATENCY,
            "limits": args.limits,
        },
        "topics": {
            "completed": statuses.count("completed"),
            "failed": statuses.count("failed"),
            "unfinished": sum(s not in ("completed", "failed", "cancelled") for s in statuses),
            "errors": sorted({t.error for t in ended.values() if t.error}),
            "wall_seconds": round(wall, 1),
            "seconds_per_topic_from_queued": summary(durations),
        },
        "stuck": stuck,
        "searxng": {
            "searches": len(searches),
            "limit_per_minute": args.searxng_rpm,
            "max_in_any_60s_window": search_max,
            "per_minute_from_start": per_minute(searches, started),
        },
        "llm": {
            "calls": len(llm),
            "limit_per_second": args.llm_rps,
            "max_in_any_1s_window": max_in_window(llm, 1.0),
        },
        "reader": {
            "calls": len(reads),
            "limit_per_second": args.reader_rps,
            "max_in_any_1s_window": max_in_window(reads, 1.0),
        },
        "pages_during_load_ms": {kind: page_summary(samples) for kind, samples in pages.items()},
    }
    report["ok"] = verdict(report, args)
    return report


def verdict(report: dict[str, Any], args: argparse.Namespace) -> bool:
    """All completed, in time, within SearXNG's limit, every page answered.

    The LLM's and the reader's 1-s windows are reported, not judged: their grants are
    reserved ahead and each request then leaves a few hundred ms late or less, so a provider
    counting to the second can see a short burst above the rate; it answers that with a 429,
    which the LLM client waits out and the reader's fallback absorbs.
    """
    pages_ok = all(set(p["statuses"]) == {"200"} for p in report["pages_during_load_ms"].values())
    return (
        not report["stuck"]
        and report["topics"]["completed"] == args.topics
        and report["searxng"]["max_in_any_60s_window"] <= args.searxng_rpm
        and pages_ok
    )


def max_in_window(times: list[float], window: float) -> int:
    """The most arrivals in any `window` seconds, every window that starts at an arrival."""
    best, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= window:
            first += 1
        best = max(best, last - first + 1)
    return best


def per_minute(times: list[float], started: float) -> list[int]:
    if not times:
        return []
    counts = [0] * (int((times[-1] - started) // 60) + 1)
    for at in times:
        counts[int((at - started) // 60)] += 1
    return counts


def page_summary(samples: list[tuple[float, int]]) -> dict[str, Any]:
    statuses: dict[str, int] = {}
    for _ms, status in samples:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {"requests": len(samples), **summary([ms for ms, _ in samples]), "statuses": statuses}


if __name__ == "__main__":
    main()
