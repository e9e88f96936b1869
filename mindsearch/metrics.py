"""Service figures: Prometheus metrics at /metrics, and their history for the admin desk's charts.

Every figure is computed from the database (and Redis, when it holds the rate-limit log) at
scrape time, so any number of web processes and workers report the same numbers and nothing is
lost when a process restarts: no per-process counters to merge (prometheus-client's
multiprocess mode and its directory of files are not needed). The collector hands the figures
to prometheus-client, which writes the exposition format.

/metrics answers only with `Authorization: Bearer <METRICS_TOKEN>`; without METRICS_TOKEN set
it is off (404). Every worker's watcher records a sample of each figure once a minute (one
worker does it, whichever comes first), kept METRICS_HISTORY_DAYS, for the admin desk's charts.

The figures describe this service's own work: rows an imported archive brought along (LLM calls
marked `imported`, the run events of a topic with `archive_bytes`) are another run's record and
stay out, so an archive can neither inflate the counts nor add a label (a series) per forged
stage name; the labels are the stages the code writes.
"""

from __future__ import annotations

import hmac
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q, Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django_q.models import OrmQ
from django_q.status import Stat
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from mindsearch.clients import ratelimit
from mindsearch.models import MetricSample
from research.models import CacheEntry, LLMCall, Topic

SAMPLE_EVERY_SECONDS = 60
Labels = dict[str, str]


@dataclass
class Figure:
    name: str  # without the _total a counter gets in the exposition format
    help: str
    kind: str  # "gauge" or "counter"
    labels: tuple[str, ...] = ()
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        self.samples.append((labels, float(value)))


def figures() -> list[Figure]:
    return [
        _topics(),
        *_stages(),
        *_llm_calls(),
        *_cache(),
        _queue(),
        *_workers(),
        *_rate_limit_waits(),
    ]


def _topics() -> Figure:
    figure = Figure("mindsearch_topics", "Topics by status.", "gauge", ("status",))
    counts = dict(Topic.objects.values_list("status").annotate(n=Count("id")))
    for status in Topic.Status.values:
        figure.add(counts.get(status, 0), status=status)
    return figure


STAGE_SPANS = """
SELECT stage, count(*), coalesce(sum(extract(epoch FROM last - first)), 0)
FROM (
    SELECT event.topic_id, event.stage, min(event.created_at) AS first, max(event.created_at) AS last
    FROM research_runevent AS event JOIN research_topic AS topic ON topic.id = event.topic_id
    WHERE event.stage <> '' AND topic.archive_bytes = 0
    GROUP BY event.topic_id, event.stage
) AS spans
GROUP BY stage
"""


def _stages() -> list[Figure]:
    """A stage's duration in a topic: from its first progress event to its last."""
    seconds = Figure(
        "mindsearch_stage_seconds", "Time spent in each stage, summed over topics.", "counter", ("stage",)
    )
    runs = Figure("mindsearch_stage_runs", "Topics that went through each stage.", "counter", ("stage",))
    with connection.cursor() as cursor:
        cursor.execute(STAGE_SPANS)
        for stage, count, total in cursor.fetchall():
            runs.add(count, stage=stage)
            seconds.add(total, stage=stage)
    return [seconds, runs]


def _llm_calls() -> list[Figure]:
    calls = Figure("mindsearch_llm_calls", "LLM calls made (cache hits excluded).", "counter", ("stage",))
    failures = Figure("mindsearch_llm_failures", "LLM calls that failed.", "counter", ("stage",))
    tokens = Figure("mindsearch_llm_tokens", "LLM tokens used.", "counter", ("stage", "direction"))
    rows = (
        LLMCall.objects.filter(cache_hit=False, imported=False)
        .values("stage")
        .annotate(
            n=Count("id"),
            failed=Count("id", filter=~Q(error="")),
            prompt=Sum("prompt_tokens"),
            completion=Sum("completion_tokens"),
        )
    )
    for row in rows:
        calls.add(row["n"], stage=row["stage"])
        failures.add(row["failed"], stage=row["stage"])
        tokens.add(row["prompt"] or 0, stage=row["stage"], direction="prompt")
        tokens.add(row["completion"] or 0, stage=row["stage"], direction="completion")
    return [calls, failures, tokens]


def _cache() -> list[Figure]:
    """Hits are the entries' hit counts; each entry was stored on a miss (expired ones purged)."""
    hits = Figure("mindsearch_cache_hits", "Answers served from the cache.", "counter", ("kind",))
    misses = Figure(
        "mindsearch_cache_misses", "Answers fetched and stored in the cache.", "counter", ("kind",)
    )
    rows = {
        r["kind"]: r for r in CacheEntry.objects.values("kind").annotate(n=Count("id"), hits=Sum("hit_count"))
    }
    for kind in CacheEntry.Kind.values:
        row = rows.get(kind, {})
        hits.add(row.get("hits") or 0, kind=kind)
        misses.add(row.get("n") or 0, kind=kind)
    return [hits, misses]


def _queue() -> Figure:
    figure = Figure("mindsearch_queue_depth", "Background tasks waiting or being worked on.", "gauge")
    figure.add(OrmQ.objects.count())
    return figure


def _workers() -> list[Figure]:
    clusters = Stat.get_all()
    count = Figure("mindsearch_worker_processes", "Worker processes of live clusters.", "gauge")
    age = Figure(
        "mindsearch_worker_heartbeat_age_seconds",
        "Seconds since each worker cluster last reported.",
        "gauge",
        ("host", "cluster"),
    )
    count.add(sum(len(stat.workers) for stat in clusters))
    now = timezone.now()
    for stat in clusters:
        age.add((now - stat.timestamp).total_seconds(), host=stat.host, cluster=str(stat.cluster_id))
    return [count, age]


def _rate_limit_waits() -> list[Figure]:
    calls = Figure(
        "mindsearch_ratelimit_grants", "Calls granted under each global rate limit.", "counter", ("service",)
    )
    seconds = Figure(
        "mindsearch_ratelimit_wait_seconds",
        "Seconds callers waited for each global rate limit, summed.",
        "counter",
        ("service",),
    )
    for service, (granted, waited) in sorted(ratelimit.wait_figures().items()):
        calls.add(granted, service=service)
        seconds.add(waited, service=service)
    return [calls, seconds]


# --- Prometheus ------------------------------------------------------------------------------


class DatabaseCollector:
    def collect(self) -> Iterator[Metric]:
        for figure in figures():
            family_class = CounterMetricFamily if figure.kind == "counter" else GaugeMetricFamily
            family = family_class(figure.name, figure.help, labels=list(figure.labels))
            for labels, value in figure.samples:
                family.add_metric([labels[name] for name in figure.labels], value)
            yield family


def exposition() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return generate_latest(registry)


def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.METRICS_TOKEN
    if not token:
        raise Http404("METRICS_TOKEN is not set")
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), token.encode()):
        response = HttpResponse("A bearer token is required.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)


# --- History for the admin desk --------------------------------------------------------------


def series_key(labels: Labels) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def record_samples() -> int:
    """Store one sample of every figure, unless another process did within the last minute."""
    now = timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('mindsearch:metric-samples'))")
        recent = now - timedelta(seconds=SAMPLE_EVERY_SECONDS - 5)
        if MetricSample.objects.filter(at__gt=recent).exists():
            return 0
        rows = [
            MetricSample(at=now, name=figure.name, labels=series_key(labels), value=value)
            for figure in figures()
            for labels, value in figure.samples
        ]
        MetricSample.objects.bulk_create(rows)
        MetricSample.objects.filter(at__lt=now - timedelta(days=settings.METRICS_HISTORY_DAYS)).delete()
    return len(rows)


def history(names: list[str], since: datetime) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """{figure: {series labels: [(epoch seconds, value), ...]}} in time order."""
    found: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    rows = MetricSample.objects.filter(name__in=names, at__gte=since).order_by("at")
    for name, labels, at, value in rows.values_list("name", "labels", "at", "value"):
        found[name][labels].append((at.timestamp(), value))
    return found
