"""Benchmark: what one abusive client or one greedy user can take from everyone else (issue 15).

Two figures, each against a database of its own and real processes:

1. **Bodies.** One daphne with production settings (DEBUG off) and the default request limits.
   20 clients at once each POST a 100 MB body to ordinary URLs — half declare it
   (`Content-Length`), half stream it (`Transfer-Encoding: chunked`); half stop sending when an
   answer comes, half keep pushing regardless. Meanwhile a browser asks for the sign-in page
   every 0.2 s. Measured: daphne's resident memory (sampled every 50 ms) over its idle size, the
   answers the 20 got, and the normal page's latency during the flood.
   Targets: under +100 MB; every page answered within 1 s.

2. **Fair share.** One qcluster with two worker processes and the global LLM limit (2/s, its
   default) against a loopback LLM answering in 1 s. User B's new topic is planned (route + plan,
   two LLM calls) once with nothing else running, then again while user A's topic of 600
   sub-queries runs its queries stage (600 LLM calls, five minutes of the limit). A's topic is
   written to the database directly: the sub-query cap (RESEARCH_MAX_SUBQUERIES) refuses such a
   plan through every door, but a greedy user can still queue several topics' worth, and the
   limiter must share its turns whatever the backlog. Measured: B's plan time, unloaded and
   loaded. Target: loaded ≤ 2 × unloaded. This figure depends on the global limiter
   (mindsearch/clients/ratelimit.py); the JSON names the commit it was measured at.

3. **Connections** (issue 26). The same daphne; 200 clients open `GET /mcp` with a valid token,
   200 more connect and say nothing, 20 send their headers a byte a second, while `/readyz` is
   probed 200 times. Measured: daphne's open file descriptors over its idle count 40 s later
   (idle and slow clients cut off: WEB_IDLE_TIMEOUT_SECONDS 30), the /mcp answers, /readyz's
   channel-layer check (no worker runs here). Targets: /mcp 405 for all, descriptors back within
   +20, the channel layer ok on 200 of 200 probes.

Prints JSON; exits 1 when a target is missed.

    nice -n 10 .venv/bin/python bench/abuse.py [--clients 20] [--megabytes 100] [--subqueries 600]
"""

from __future__ import annotations

import argparse
import os
import secrets
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, argument_parser, print_report, setup_django

DATABASE = "mindsearch_bench_abuse"
CHUNK = 64 * 1024
PAGE = "/accounts/login/"
TARGETS = ["/accounts/login/", "/", "/api/topics", "/no/such/page/", "/admin/login/"]


def main() -> None:
    args = parse_args()
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    setup_django(DATABASE)
    report: dict[str, Any] = {"load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    if not args.skip_bodies:
        report["bodies"] = bodies(args)
    if not args.skip_fairness:
        report["fair_share"] = fair_share(args)
    if not args.skip_connections:
        report["connections"] = connections()
    report["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["ok"] = all(part.get("ok", True) for part in report.values() if isinstance(part, dict))
    print_report(report, ok=report["ok"])


def parse_args() -> argparse.Namespace:
    parser = argument_parser(__doc__)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--subqueries", type=int, default=600)
    parser.add_argument("--llm-rps", type=float, default=2.0, help="LIMIT_AITUNNEL_RPS (its default: 2)")
    parser.add_argument("--skip-bodies", action="store_true")
    parser.add_argument("--skip-fairness", action="store_true")
    parser.add_argument("--skip-connections", action="store_true")
    return parser.parse_args()


def production_env(**extra: str) -> dict[str, str]:
    from tests.support.processes import process_env

    production = {"DEBUG": "0", "SECURE_SSL_REDIRECT": "0", "LOG_LEVEL": "WARNING"}
    return process_env(**production, SECRET_KEY=os.environ["SECRET_KEY"], **extra)


@contextmanager
def daphne(env: dict[str, str]) -> Iterator[tuple[int, subprocess.Popen]]:
    from mindsearch.management.commands.serve import answers_http
    from tests.support.processes import free_port, stop, wait_for_port

    port = free_port()
    cmd = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "mindsearch.asgi:application"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sys.stderr)
    try:
        wait_for_port(port, proc, timeout=180)
        while not answers_http("127.0.0.1", port):
            time.sleep(0.1)
        yield port, proc
    finally:
        stop(proc)


# --- 1. Bodies -------------------------------------------------------------------------------------


def bodies(args: argparse.Namespace) -> dict[str, Any]:
    import psutil

    size = args.megabytes * 2**20
    with daphne(production_env()) as (port, proc):
        process = psutil.Process(proc.pid)
        for _ in range(5):  # warm: the first pages load templates and connections
            get_page(port)
        idle = process.memory_info().rss
        peak = [idle]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], process.memory_info().rss)
                time.sleep(0.05)

        pages: list[float] = []

        def browse() -> None:
            while not stop.is_set():
                pages.append(get_page(port))
                time.sleep(0.2)

        answers: list[dict[str, Any]] = []
        senders = [
            threading.Thread(target=lambda n=n: answers.append(send_body(port, n, size)), daemon=True)
            for n in range(args.clients)
        ]
        watchers = [
            threading.Thread(target=sample, daemon=True),
            threading.Thread(target=browse, daemon=True),
        ]
        for thread in watchers:
            thread.start()
        time.sleep(0.5)
        started = time.monotonic()
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join()
        flood = time.monotonic() - started
        time.sleep(0.5)
        stop.set()
        for thread in watchers:
            thread.join()
    grown = (peak[0] - idle) / 2**20
    statuses = sorted({answer["status"] for answer in answers})
    latencies = sorted(pages)
    ok = grown < 100 and bool(latencies) and max(latencies) < 1.0 and statuses == ["413"]
    return {
        "clients": args.clients,
        "body_mb_each": args.megabytes,
        "answers": statuses,
        "bytes_the_clients_got_to_send_mb": round(sum(a["sent"] for a in answers) / 2**20, 1),
        "flood_seconds": round(flood, 1),
        "daphne_rss_idle_mb": round(idle / 2**20, 1),
        "daphne_rss_peak_mb": round(peak[0] / 2**20, 1),
        "daphne_rss_growth_mb": round(grown, 1),
        "normal_page_during_flood": {
            "requests": len(latencies),
            "p50_ms": round(statistics.median(latencies) * 1000) if latencies else None,
            "max_ms": round(max(latencies) * 1000) if latencies else None,
            "all_200": all(latency >= 0 for latency in latencies),
        },
        "targets": {"rss_growth_mb_under": 100, "page_max_s_under": 1.0},
        "ok": ok,
    }


def get_page(port: int) -> float:
    import http.client

    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", PAGE)
        response = conn.getresponse()
        response.read()
        return time.monotonic() - started if response.status == 200 else -1.0
    finally:
        conn.close()


def send_body(port: int, n: int, size: int) -> dict[str, Any]:
    """One client's 100 MB POST. Even clients declare the length, odd ones stream it chunked;
    clients n % 4 < 2 stop when an answer arrives, the others push on regardless."""
    chunked, polite = n % 2 == 1, n % 4 < 2
    path = TARGETS[n % len(TARGETS)]
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=x\r\n"
        f"{framing}\r\n\r\n"
    ).encode()
    piece = b"x" * CHUNK
    sent, answer = 0, b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        try:
            while sent < size:
                data = f"{CHUNK:x}\r\n".encode() + piece + b"\r\n" if chunked else piece
                sock.sendall(data)
                sent += CHUNK
                if polite and select.select([sock], [], [], 0)[0]:
                    break
            if chunked and sent >= size:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server stopped listening: its answer is what counts
        try:
            while len(answer) < 12 and (data := sock.recv(4096)):
                answer += data
        except OSError:
            pass
    status = answer[9:12].decode("latin-1") if answer.startswith(b"HTTP/1.1 ") else "none"
    return {"status": status, "sent": sent}


# --- 2. Fair share ---------------------------------------------------------------------------------


def fair_share(args: argparse.Namespace) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django_q.tasks import async_task

    from bench.load import ASPECTS, load_world
    from research.models import SubQuery, Topic
    from tests.support.processes import stop
    from tests.support.world import TOPIC

    with ExitStack() as stack:
        w = stack.enter_context(load_world())
        limits = {"LIMIT_AITUNNEL_RPS": str(args.llm_rps), "LIMIT_JINA_RPS": "5", "LIMIT_SEARXNG_RPM": "30"}
        env = production_env(**{**w.env(), **limits})
        env["MINDSEARCH_WORKERS"] = "2"
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env, stdout=sys.stderr
        )
        stack.callback(stop, worker)
        greedy = User.objects.get_or_create(username="abuse-greedy")[0]
        other = User.objects.get_or_create(username="abuse-other")[0]

        def plan_time(n: int) -> float:
            topic = Topic.objects.create(owner=other, question=f"{TOPIC} (тема {n})")
            started = time.monotonic()
            async_task("research.tasks.plan", topic.pk, task_name=f"abuse plan {topic.pk}")
            while Topic.objects.get(pk=topic.pk).status == Topic.Status.PLANNING:
                if time.monotonic() - started > 600:
                    raise TimeoutError("the plan never came")
                time.sleep(0.05)
            return time.monotonic() - started

        plan_time(1)  # warm the worker processes (imports, connections)
        unloaded = statistics.median(plan_time(n) for n in (2, 3, 4))
        big = Topic.objects.create(
            owner=greedy, question=f"{TOPIC} (тема 500)", status=Topic.Status.QUEUED, auto_approve=True
        )
        SubQuery.objects.bulk_create(
            SubQuery(topic=big, position=i, text=f"{ASPECTS[i % 3][0]} (тема {1000 + i})")
            for i in range(args.subqueries)
        )
        greedy_requests_before = len(w.llm.requests)
        async_task("research.tasks.run", big.pk, task_name=f"abuse greedy {big.pk}")
        while len(w.llm.requests) - greedy_requests_before < 20:  # its backlog is building
            time.sleep(0.2)
        time.sleep(3)
        loaded = [plan_time(n) for n in (5, 6, 7)]
        backlog_calls = len(w.llm.requests) - greedy_requests_before
        Topic.objects.filter(pk=big.pk).update(status=Topic.Status.CANCELLED)
    limiter = subprocess.run(
        ["git", "log", "-1", "--format=%h %cs", "--", "mindsearch/clients/ratelimit.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ratio = statistics.median(loaded) / unloaded
    return {
        "llm_limit_per_s": args.llm_rps,
        "llm_latency_s": 1.0,
        "greedy_topic_subqueries": args.subqueries,
        "llm_calls_while_measuring": backlog_calls,
        "plan_seconds_unloaded_median_of_3": round(unloaded, 2),
        "plan_seconds_loaded": [round(x, 2) for x in loaded],
        "loaded_over_unloaded": round(ratio, 2),
        "target_ratio_at_most": 2.0,
        "rate_limiter_commit": limiter,
        "ok": ratio <= 2.0,
    }


# --- 3. Connections --------------------------------------------------------------------------------


def connections() -> dict[str, Any]:
    import psutil
    from django.contrib.auth.models import User

    from mindsearch.models import ApiToken

    owner = User.objects.get_or_create(username="abuse-streams")[0]
    _row, token = ApiToken.issue(owner, "bench")
    with daphne(production_env()) as (port, proc):
        process = psutil.Process(proc.pid)
        idle_fds = process.num_fds()
        mcp = [_raw(port, mcp_request(token)) for _ in range(200)]
        statuses = [_status(sock) for sock in mcp]
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        for sock in slow:
            sock.sendall(b"GET / HTTP/1.1\r\n")
        peak_fds = process.num_fds()
        ready = [_readyz(port) for _ in range(200)]
        time.sleep(40)
        after_fds = process.num_fds()
        for sock in [*mcp, *silent, *slow]:
            sock.close()
    return {
        "mcp_get_statuses": {str(code): statuses.count(code) for code in sorted(set(statuses))},
        "fds_idle": idle_fds,
        "fds_with_420_clients": peak_fds,
        "fds_40s_later": after_fds,
        "readyz_channels_ok_of_200": ready.count(True),
        "ok": statuses.count(405) == 200 and after_fds - idle_fds <= 20 and all(ready),
    }


def mcp_request(token: str) -> str:
    return f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"


def _raw(port: int, request: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(request.encode())
    return sock


def _status(sock: socket.socket) -> int:
    sock.settimeout(10)
    try:
        head = sock.recv(64)
    except TimeoutError:
        return 0  # an open stream: no answer
    return int(head.split(b" ")[1]) if head.startswith(b"HTTP/") else -1


def _readyz(port: int) -> bool:
    """The channel layer's part of /readyz (no worker runs here, so the whole answers 503)."""
    import json
    import urllib.request
    from urllib.error import HTTPError

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=30) as response:
            body = response.read()
    except HTTPError as error:
        body = error.read()
    return json.loads(body).get("channels") == "ok"


if __name__ == "__main__":
    main()
