"""Benchmark: the web process under load — live progress over websockets, and page latency.

Starts daphne against a database of its own, then:

- websocket delivery: N clients watch one running topic while this process publishes events
  with `record_event` (as the worker does); latency = when a client got the event's line −
  when publishing started. Once with the PostgreSQL channel layer, once with Redis (a
  re-run of this script with REDIS_URL set, so daphne and the publisher share the layer);
  with it, daphne's CPU seconds from the first socket to the last delivery and the LISTEN
  connections it holds in PostgreSQL;
- page latency: 1,000 topics, 20 concurrent clients requesting the topic list and topic pages
  back to back (the target); the same load on a static file and a signed-in 404 (the floor
  that daphne and Django's middleware set on this machine); and 20 clients that each wait
  `--think` seconds between two pages, as people reading do.

Prints one JSON object; exits with 1 when an event did not reach every client or a page did
not answer 200 (the JSON says which).

    .venv/bin/python bench/web.py [--clients 200] [--events 30] [--interval 0.2] [--requests 400]
        [--concurrency 20] [--topics 1000] [--think 1.0] [--web-processes 1] [--no-warm-up]
        [--layer postgres|redis]

--layer runs only the websocket delivery, with that channel layer (no pages, no other layer):
the quick way to compare two versions of the live-progress code.

Before the measured sockets one socket connects and leaves, as on a server already in use;
--no-warm-up shows what a cold daphne does when every page reconnects at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, argument_parser, print_report, setup_django

DATABASE = "mindsearch_bench_web"
REDIS_URL = "redis://127.0.0.1:6379/13"
STATIC_FILE = "/static/css/mindsearch.css"
SEQ = re.compile(r'data-seq="(\d+)"')
TARGETS = {"websocket_p95_ms": 250, "page_p95_ms": 100}


def main() -> None:
    args = parse_args()
    if args.layer == "redis":
        os.environ["REDIS_URL"] = REDIS_URL
    elif args.layer == "postgres":
        os.environ.pop("REDIS_URL", None)
    # Sessions are signed with the key: this process makes them, daphne checks them.
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    setup_django(DATABASE)
    user = bench_user()
    cookie = session_cookie(user)
    if args.layer:
        section = websocket_only(args, user, cookie)
        print_report(section, ok=delivered_all(section))
        return
    report = full_report(args, user, cookie)
    print_report(report, ok=all_delivered_and_ok(report))


def parse_args() -> argparse.Namespace:
    parser = argument_parser(__doc__)
    parser.add_argument("--clients", type=int, default=200, help="concurrent websocket clients")
    parser.add_argument("--events", type=int, default=30, help="events published per run")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between two events")
    parser.add_argument("--requests", type=int, default=400, help="requests per page kind")
    parser.add_argument("--concurrency", type=int, default=20, help="concurrent HTTP clients")
    parser.add_argument("--topics", type=int, default=1000, help="topics for the page benchmark")
    parser.add_argument("--think", type=float, default=1.0, help="seconds between a paced client's pages")
    parser.add_argument(
        "--web-processes", type=int, default=1, help="daphne processes sharing the port (page benchmark)"
    )
    parser.add_argument(
        "--no-warm-up", dest="warm_up", action="store_false", help="open all websockets on a cold daphne"
    )
    parser.add_argument(
        "--layer", choices=("postgres", "redis"), help="only the websocket delivery, with this channel layer"
    )
    return parser.parse_args()


def full_report(args: argparse.Namespace, user: Any, cookie: str) -> dict[str, Any]:
    # The machine may be shared: how busy it was says how far to trust the numbers.
    load_average = [round(x, 2) for x in os.getloadavg()]
    with daphne() as port:
        postgres = asyncio.run(websocket_delivery(port, cookie, running_topic(user), args))
    redis = run_redis_variant(args)
    create_topics(user, args.topics)
    sample = topic_sample(user)
    with daphne(args.web_processes) as port:
        pages, floor, paced = asyncio.run(page_latency(port, cookie, sample, args))
    return {
        "benchmark": "web",
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": load_average},
        "websocket": {"postgres": postgres, "redis": redis},
        "pages": pages,
        "pages_floor": floor,
        "pages_with_think_time": {**paced, "think_seconds": args.think, "clients": args.concurrency},
        "targets": {name: f"<= {value}" for name, value in TARGETS.items()},
        "met": targets_met(postgres, redis, pages),
    }


def delivered_all(section: dict[str, Any]) -> bool:
    """Every event of one websocket run reached every client."""
    return section.get("delivered") is not None and section.get("delivered") == section.get("expected")


def all_delivered_and_ok(report: dict[str, Any]) -> bool:
    """Every event reached every client and every page answered 200: the run counts at all."""
    delivered = all(delivered_all(section) for section in report["websocket"].values())
    return delivered and all(page["statuses"].keys() == {"200"} for page in report["pages"].values())


def targets_met(postgres: dict, redis: dict, pages: dict) -> dict[str, bool]:
    met = {
        f"websocket_{name}": section.get("delivered") == section.get("expected")
        and section.get("latency_ms", {}).get("p95", float("inf")) <= TARGETS["websocket_p95_ms"]
        for name, section in (("postgres", postgres), ("redis", redis))
    }
    met.update({name: page["p95_ms"] <= TARGETS["page_p95_ms"] for name, page in pages.items()})
    return met


# --- Set-up ----------------------------------------------------------------------------------------


def bench_user() -> Any:
    from django.contrib.auth.models import User

    user, _ = User.objects.get_or_create(username="bench-web")
    return user


def session_cookie(user: Any) -> str:
    """A `sessionid` cookie header for a signed-in session, as the login view would make one."""
    from importlib import import_module

    from django.conf import settings

    session = import_module(settings.SESSION_ENGINE).SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.save()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


def running_topic(user: Any) -> Any:
    from research.models import Topic

    return Topic.objects.create(owner=user, question="Bench: live progress", status=Topic.Status.RUNNING)


@contextmanager
def daphne(processes: int = 1) -> Iterator[int]:
    """daphne on a free loopback port, against this benchmark's database and channel layer;
    several processes share one listening socket, as `manage.py serve --web-processes` runs them."""
    from mindsearch.management.commands.serve import answers_http, listening_socket
    from tests.support.processes import process_env, stop, wait_for_port

    # Production settings, as a deployment serves pages: DEBUG off (cached templates, no query
    # log); plain HTTP on loopback, so no HTTPS redirect.
    extra = {
        "LOG_LEVEL": "WARNING",
        "DEBUG": "0",
        "SECRET_KEY": os.environ["SECRET_KEY"],
        "SECURE_SSL_REDIRECT": "0",
    }
    if os.environ.get("REDIS_URL"):
        extra["REDIS_URL"] = os.environ["REDIS_URL"]
    listener = listening_socket("127.0.0.1", 0)
    port, fd = listener.getsockname()[1], listener.fileno()
    cmd = [sys.executable, "-m", "daphne", "--fd", str(fd), "mindsearch.asgi:application"]
    # daphne's output goes to stderr: stdout carries only this benchmark's JSON.
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=process_env(**extra), stdout=sys.stderr, pass_fds=[fd])
        for _ in range(processes)
    ]
    listener.close()
    try:
        for proc in procs:
            wait_for_port(port, proc)
        while not answers_http("127.0.0.1", port):
            time.sleep(0.1)
        time.sleep(2 if processes > 1 else 0)  # the others load Django meanwhile
        yield port
    finally:
        for proc in procs:
            stop(proc)


# --- Websocket delivery ----------------------------------------------------------------------------


@dataclass
class Watcher:
    """One websocket client: when it first saw each event's line."""

    seen: dict[int, float] = field(default_factory=dict)
    messages: int = 0

    async def watch(self, connection: Any) -> None:
        async for message in connection:
            now = time.time()
            self.messages += 1
            for seq in SEQ.findall(message):
                self.seen.setdefault(int(seq), now)


async def websocket_delivery(port: int, cookie: str, topic: Any, args: argparse.Namespace) -> dict[str, Any]:
    url = f"ws://127.0.0.1:{port}/ws/topics/{topic.pk}/?since={topic.last_event_seq}"
    options = {
        "additional_headers": {"Cookie": cookie},
        "origin": f"http://127.0.0.1:{port}",
        "open_timeout": 60,
    }
    cpu_before = daphne_cpu_seconds()
    if args.warm_up:
        await warm_up(url, options)
    started = time.perf_counter()
    opened = await asyncio.wait_for(
        asyncio.gather(*(open_socket(url, options) for _ in range(args.clients)), return_exceptions=True),
        timeout=90,
    )
    connect_seconds = time.perf_counter() - started
    connections = [c for c in opened if not isinstance(c, BaseException)]
    errors = Counter(f"{type(e).__name__}: {e}" for e in opened if isinstance(e, BaseException))
    watchers = [Watcher() for _ in connections]
    tasks = [asyncio.create_task(w.watch(c)) for w, c in zip(watchers, connections, strict=True)]
    try:
        await asyncio.sleep(1.0)  # each consumer subscribes to its channel just after the handshake
        published, publish_ms = await publish_events(topic, args.events, args.interval)
        await wait_for_delivery(watchers, set(published), timeout=30)
        cpu_seconds = daphne_cpu_seconds() - cpu_before
        listening = await asyncio.to_thread(listen_connections)
    finally:
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)
        for task in tasks:
            task.cancel()
    report = delivery_report(watchers, published, publish_ms, args)
    return {
        **report,
        "connect_seconds": round(connect_seconds, 2),
        "connect_errors": dict(errors),
        "daphne_cpu_seconds": round(cpu_seconds, 2),
        "listen_connections": listening,
    }


def daphne_cpu_seconds() -> float:
    """CPU time (user + system) so far of the daphne processes this benchmark started."""
    import psutil

    daphnes = [p for p in psutil.Process().children() if "daphne" in p.cmdline()]
    return sum(p.cpu_times().user + p.cpu_times().system for p in daphnes)


def listen_connections() -> int:
    """Connections to this benchmark's database waiting in LISTEN: the PostgreSQL channel layer's."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query ILIKE 'LISTEN%'"
        )
        return cursor.fetchone()[0]


async def open_socket(url: str, options: dict[str, Any]) -> Any:
    from websockets.asyncio.client import connect

    return await connect(url, **options)


async def warm_up(url: str, options: dict[str, Any]) -> None:
    """One socket first, as on a server already in use: channels-postgres opens its LISTEN
    connection on the first receive — and another on every receive until that one is up."""
    connection = await open_socket(url, options)
    await asyncio.sleep(1.0)
    await connection.close()


async def publish_events(topic: Any, count: int, interval: float) -> tuple[dict[int, float], list[float]]:
    """Publish `count` events at a steady pace; the wall-clock time each publish started, by seq."""
    from research.progress import record_event

    published: dict[int, float] = {}
    durations: list[float] = []
    first = topic.last_event_seq + 1
    tick = time.perf_counter()
    for i in range(count):
        published[first + i] = time.time()
        began = time.perf_counter()
        event = await asyncio.to_thread(
            record_event, topic, "search", f"bench {i + 1}", done=i + 1, total=count
        )
        durations.append((time.perf_counter() - began) * 1000)
        assert event.seq == first + i, f"expected seq {first + i}, got {event.seq}"
        tick += interval
        await asyncio.sleep(max(0.0, tick - time.perf_counter()))
    return published, durations


async def wait_for_delivery(watchers: list[Watcher], seqs: set[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(seqs <= w.seen.keys() for w in watchers):
            return
        await asyncio.sleep(0.05)


def delivery_report(
    watchers: list[Watcher], published: dict[int, float], publish_ms: list[float], args: argparse.Namespace
) -> dict[str, Any]:
    latencies = [
        (w.seen[seq] - at) * 1000 for w in watchers for seq, at in published.items() if seq in w.seen
    ]
    return {
        "clients": args.clients,
        "connected": len(watchers),
        "events": len(published),
        "interval_seconds": args.interval,
        "expected": args.clients * len(published),
        "delivered": len(latencies),
        "latency_ms": summary(latencies, with_p99=True),
        "publish_call_ms": summary(publish_ms),
        "messages_received": sum(w.messages for w in watchers),
    }


def run_redis_variant(args: argparse.Namespace, timeout: float = 180) -> dict[str, Any]:
    """The same websocket run with the Redis channel layer, in a process configured for it."""
    cmd = [sys.executable, __file__, "--layer", "redis"]
    cmd += ["--clients", str(args.clients), "--events", str(args.events), "--interval", str(args.interval)]
    cmd += [] if args.warm_up else ["--no-warm-up"]
    # Its own process group, so that a run that hangs is stopped together with its daphne.
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGTERM)
        child.communicate(timeout=20)
        flush_redis()
        return {"error": f"timed out after {timeout:.0f} s"}
    if child.returncode != 0:
        return {"error": f"exited with {child.returncode}; its traceback is on stderr"}
    return json.loads(out)


def websocket_only(args: argparse.Namespace, user: Any, cookie: str) -> dict[str, Any]:
    """The websocket delivery alone, with the layer --layer names (Redis: db 13, emptied before
    and after)."""
    redis = args.layer == "redis"
    if redis:
        flush_redis()
    try:
        with daphne() as port:
            return asyncio.run(websocket_delivery(port, cookie, running_topic(user), args))
    finally:
        if redis:
            flush_redis()


def flush_redis() -> None:
    import redis

    with redis.Redis.from_url(REDIS_URL) as store:
        store.flushdb()


# --- Page latency ----------------------------------------------------------------------------------

QUESTIONS = [
    "Как изменились цены на жильё в Казани за {n} год?",
    "What limits the range of sodium-ion batteries in {n}?",
    "Сравнение фреймворков для веб-разработки на Python, вариант {n}",
    "How do regional banks hedge interest-rate risk (case {n})?",
    "Влияние удалённой работы на производительность: обзор {n}",
]


def create_topics(user: Any, count: int) -> None:
    """`count` topics of every status; every 20th has sub-queries, scored hits and events."""
    from research.models import Topic

    statuses = list(Topic.Status.values)
    topics = Topic.objects.bulk_create(
        Topic(
            owner=user,
            question=QUESTIONS[i % len(QUESTIONS)].format(n=i),
            status=statuses[i % len(statuses)],
            mode=Topic.Mode.DEEP if i % 7 == 0 else Topic.Mode.QUICK,
        )
        for i in range(count)
    )
    for topic in topics[::20]:
        fill_topic(topic)


def fill_topic(topic: Any, subqueries: int = 3, hits: int = 8, events: int = 12) -> None:
    from research.models import Hit, HitScore, RunEvent, SubQuery

    rows = SubQuery.objects.bulk_create(
        SubQuery(topic=topic, position=p, text=f"{topic.question} — aspect {p}") for p in range(subqueries)
    )
    made = Hit.objects.bulk_create(
        Hit(
            topic=topic,
            subquery=sq,
            url=f"https://example.org/{topic.pk}/{sq.pk}/{n}",
            normalized_url=f"example.org/{topic.pk}/{sq.pk}/{n}",
            title=f"Result {n} for {sq.text[:40]}",
            snippet="A snippet of the page that the search engine returned. " * 3,
            position=n,
        )
        for sq in rows
        for n in range(hits)
    )
    scores = dict.fromkeys(HitScore.CRITERIA, 6.0)
    HitScore.objects.bulk_create(HitScore(hit=hit, total=6.0, **scores) for hit in made[::2])
    RunEvent.objects.bulk_create(
        RunEvent(topic=topic, seq=s, stage="search", message=f"searched {s}", done=s, total=events)
        for s in range(1, events + 1)
    )
    topic.last_event_seq = events
    topic.save(update_fields=["last_event_seq"])


def topic_sample(user: Any, size: int = 100) -> list[int]:
    """Half topics with hits and events, half picked at random from all of them."""
    from research.models import Topic

    topics = Topic.objects.for_user(user)
    rich = list(topics.filter(events__isnull=False).values_list("pk", flat=True).distinct()[: size // 2])
    everything = list(topics.values_list("pk", flat=True))
    return rich + random.Random(0).sample(everything, size - len(rich))


async def page_latency(
    port: int, cookie: str, sample: list[int], args: argparse.Namespace
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], dict[str, Any]]:
    """The latency of the topic list and topic pages, of the floor under them (a static file, a
    signed-in 404), and of pages asked for with think time between them."""
    import httpx

    pages = [f"/topics/{sample[i % len(sample)]}/" for i in range(args.requests)]
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Cookie": cookie},
        limits=httpx.Limits(max_connections=args.concurrency),
        timeout=30,
    ) as client:
        await load(client, ["/"] * 20 + pages[:20], args.concurrency, timeout=60)  # warm-up, not measured
        topic_list = await load(client, ["/"] * args.requests, args.concurrency)
        topic_page = await load(client, pages, args.concurrency)
        # The same load on what costs the least: a static file, and a signed-in 404 (session,
        # user, middleware, no view work) — the floor under any page on this machine.
        floor = {
            "static_file": await load(client, [STATIC_FILE] * args.requests, args.concurrency),
            "signed_in_404": await load(client, ["/no-such-page/"] * args.requests, args.concurrency),
        }
        # People read between two clicks: each client asks for a page every `--think` seconds.
        mixed = [path for pair in zip(["/"] * len(pages), pages, strict=True) for path in pair]
        paced = await load(client, mixed[: args.requests], args.concurrency, think=args.think)
    return {"topic_list": topic_list, "topic_page": topic_page}, floor, paced


async def load(
    client: Any, paths: list[str], concurrency: int, timeout: float = 90, think: float = 0.0
) -> dict[str, Any]:
    """GET every path with `concurrency` clients at once (each waiting `think` seconds between
    its requests); latency of each and the throughput."""
    import httpx

    queue: asyncio.Queue[str] = asyncio.Queue()
    for path in paths:
        queue.put_nowait(path)
    latencies: list[float] = []
    statuses: Counter[str] = Counter()

    async def worker() -> None:
        if think:
            await asyncio.sleep(random.uniform(0, think))  # people do not click in step
        while not queue.empty():
            path = queue.get_nowait()
            began = time.perf_counter()
            try:
                statuses[str((await client.get(path)).status_code)] += 1
            except httpx.HTTPError as error:
                statuses[type(error).__name__] += 1
            latencies.append((time.perf_counter() - began) * 1000)
            if think:
                await asyncio.sleep(think)

    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), timeout=timeout)
    wall = time.perf_counter() - started
    stats = summary(latencies)
    return {
        "requests": len(paths),
        "statuses": dict(sorted(statuses.items())),
        "p50_ms": stats["p50"],
        "p95_ms": stats["p95"],
        "max_ms": stats["max"],
        "requests_per_second": round(len(paths) / wall, 1),
    }


# --- Numbers ---------------------------------------------------------------------------------------


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    index = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


def summary(values: list[float], with_p99: bool = False) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    stats = {"p50": percentile(ordered, 50), "p95": percentile(ordered, 95)}
    if with_p99:
        stats["p99"] = percentile(ordered, 99)
    stats.update(max=ordered[-1], mean=sum(ordered) / len(ordered))
    return {name: round(value, 1) for name, value in stats.items()}


if __name__ == "__main__":
    main()
