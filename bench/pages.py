"""Benchmark: what the fragment cache saves a page, in-process (no server, no network).

A database of its own with --topics topics of every status for one user (every 20th with
sub-queries, scored hits and events, as bench/web.py makes them) and one finished topic with a
report, citations, documents and summaries. Django's test client asks for the topic list and
the finished topic's page --requests times each, with the fragment cache (warm) and without it
(CACHES["fragments"] a DummyCache), and the topic's version query (research/fragments.py) alone.
Server time only: what daphne, the network and a browser add comes on top (bench/web.py).

Prints JSON: milliseconds per request (wall, and this process's CPU), p50 / p95 / mean, and the
number of SQL queries of one request, per page and mode (without the cache: a topic page's
first view, every panel rendered).

    DEBUG=0 ALLOWED_HOSTS=testserver SECURE_SSL_REDIRECT=0 SECRET_KEY=... \
        .venv/bin/python bench/pages.py [--topics 1000] [--requests 200]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import argument_parser, setup_django

DATABASE = "mindsearch_bench_pages"


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    setup_django(DATABASE)
    print(json.dumps(run(args), indent=2))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.test import Client

    from bench.web import create_topics, fill_topic

    user = User.objects.create_user("bench-pages")
    create_topics(user, args.topics)
    topic = finished_topic(user)
    fill_topic(topic, subqueries=3, hits=20, events=60)
    client = Client()
    client.force_login(user)
    pages = {"topic_list": "/", "topic_page": f"/topics/{topic.pk}/"}
    report: dict[str, Any] = {"benchmark": "pages", "topics": args.topics, "requests": args.requests}
    report["with_fragment_cache"] = {kind: timed(client, path, args.requests) for kind, path in pages.items()}
    report["without_fragment_cache"] = without_cache(client, pages, args.requests)
    report["version_query_ms"] = version_query(topic.pk, args.requests)
    report["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return report


def finished_topic(user: Any) -> Any:
    """A completed topic with a report citing its documents, checked citations and a long log."""
    from research.models import Citation, Report
    from tests.research.test_views import completed

    body = "\n\n".join(f"Paragraph {n}: tokens are mixed across examples [1]." for n in range(30))
    topic = completed(user, markdown=f"# Answer\n\n{body}")
    report = Report.objects.get(topic=topic)
    Citation.objects.bulk_create(
        Citation(
            report=report,
            sentence_index=n,
            sentence=f"Paragraph {n}: tokens are mixed across examples.",
            n=1,
            verdict=Citation.Verdict.SUPPORTED,
            local_verdict=Citation.Verdict.SUPPORTED,
            method=Citation.Method.LOCAL,
            score=0.9,
        )
        for n in range(30)
    )
    return topic


def timed(client: Any, path: str, requests: int) -> dict[str, Any]:
    """Wall time, and this process's CPU time (what other work on the machine barely moves;
    the database's own time is in its process, not counted there); the queries of one request."""
    from django.db import connection

    client.get(path)  # warm: templates compiled, the fragments (if cached) rendered once
    queries = 0

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal queries
        queries += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        client.get(path)
    wall, cpu = [], []
    for _ in range(requests):
        began, began_cpu = time.perf_counter(), time.process_time()
        response = client.get(path)
        cpu.append((time.process_time() - began_cpu) * 1000)
        wall.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    return {"wall_ms": summary(wall), "cpu_ms": summary(cpu), "queries": queries}


def without_cache(client: Any, pages: dict[str, str], requests: int) -> dict[str, Any]:
    from django.conf import settings
    from django.test import override_settings

    caches = {**settings.CACHES, "fragments": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}
    with override_settings(CACHES=caches):
        return {kind: timed(client, path, requests) for kind, path in pages.items()}


def version_query(topic_id: int, requests: int) -> dict[str, float]:
    from research import fragments

    samples = []
    for _ in range(requests):
        began = time.perf_counter()
        fragments.version_of(topic_id)
        samples.append((time.perf_counter() - began) * 1000)
    return summary(samples)


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": round(ordered[len(ordered) // 2], 2),
        "p95": round(ordered[int(len(ordered) * 0.95)], 2),
        "mean": round(sum(ordered) / len(ordered), 2),
    }


if __name__ == "__main__":
    main()
