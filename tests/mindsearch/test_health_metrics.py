"""/healthz, /readyz, /metrics and the admin desk's service charts."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from mindsearch import heartbeat, metrics, worker
from mindsearch.admin_charts import build_chart, per_minute
from mindsearch.clients import ratelimit
from mindsearch.models import MetricSample
from mindsearch.status import check_worker
from mindsearch.status_check import ERROR, OK
from research.models import LLMCall, Topic
from tests.support import processes

TOKEN = "metrics-token-for-tests"


def test_healthz_answers_anyone() -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.content == b"ok\n"


@pytest.mark.django_db(transaction=True)
def test_readyz_names_the_missing_worker() -> None:
    # The cache table outlives a test's flush: a worker started by an earlier test of this
    # process may have left its cluster stats there.
    cache.clear()
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "ready": False,
        "database": "ok",
        "worker": "no worker has reported",
        "channels": "ok",
    }


@pytest.mark.django_db(transaction=True)
def test_readyz_reads_the_worker_s_own_heartbeat_when_django_q_s_stats_lapse(monkeypatch) -> None:
    """django-q2's cluster stats expire 3 s after the sentinel last wrote them: on a busy
    machine one late guard cycle made /readyz answer 503 for a live worker. The worker's own
    beat lasts the minute a silent worker is allowed."""
    cache.clear()  # no cluster stats, as between two late guard cycles
    heartbeat.beat()
    response = Client().get("/readyz")
    assert response.status_code == 200, response.json()
    assert response.json()["worker"] == "ok"
    assert check_worker().state == OK
    # A minute later with no beat since: the worker is gone.
    later = time.time() + heartbeat.LIFETIME_SECONDS + 1
    monkeypatch.setattr(heartbeat.time, "time", lambda: later)
    assert Client().get("/readyz").json()["worker"] == "no worker has reported"
    assert check_worker().state == ERROR
    monkeypatch.undo()
    heartbeat.forget()
    assert Client().get("/readyz").status_code == 503


@pytest.mark.django_db(transaction=True)
def test_a_full_cache_does_not_cull_the_worker_s_heartbeat() -> None:
    """The database cache culls a third of its rows, by key order, on every write past its
    maximum: with Django's default of 300 the worker's heartbeat went with the first writes."""
    cache.clear()
    heartbeat.beat()
    cache.set_many({f"zz-filler-{n}": n for n in range(400)})
    assert heartbeat.seconds_since() is not None
    cache.clear()


@pytest.mark.django_db(transaction=True)
def test_the_worker_s_watcher_beats_even_when_resuming_topics_fails(monkeypatch) -> None:
    cache.clear()
    rounds = iter([False, True])  # one round, then the stop

    class OneRound:
        def wait(self, timeout: float) -> bool:
            return next(rounds)

    def broken() -> None:
        raise RuntimeError("the database is restarting")

    monkeypatch.setattr("research.tasks.resume_stalled_topics", broken)
    worker.watch_stalled_topics(OneRound())  # type: ignore[arg-type]
    assert heartbeat.seconds_since() is not None


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_readyz_is_ready_once_a_worker_reports() -> None:
    with processes.qcluster(processes.process_env(LOG_LEVEL="WARNING")):
        deadline = time.monotonic() + 60
        while (response := Client().get("/readyz")).status_code != 200:
            assert time.monotonic() < deadline, response.json()
            time.sleep(0.5)
    assert response.json() == {"ready": True, "database": "ok", "worker": "ok", "channels": "ok"}


def scrape(client: Client, token: str | None = TOKEN) -> dict[str, dict[tuple, float]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    found: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


@pytest.mark.django_db
def test_metrics_need_the_token(settings) -> None:
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics", headers={"Authorization": "Bearer x"}).status_code == 404
    settings.METRICS_TOKEN = TOKEN
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_metrics_count_what_the_database_holds(settings, alice: User) -> None:
    settings.METRICS_TOKEN = TOKEN
    Topic.objects.create(owner=alice, question="one", status=Topic.Status.COMPLETED)
    Topic.objects.create(owner=alice, question="two", status=Topic.Status.COMPLETED)
    Topic.objects.create(owner=alice, question="three", status=Topic.Status.FAILED)
    common = {"user": alice, "model": "m"}
    LLMCall.objects.create(stage="plan", prompt_tokens=100, completion_tokens=20, **common)
    LLMCall.objects.create(stage="plan", prompt_tokens=50, completion_tokens=5, error="HTTP 500", **common)
    LLMCall.objects.create(stage="plan", prompt_tokens=999, cache_hit=True, **common)
    asyncio.run(ratelimit.acquire(f"metrics-{uuid.uuid4().hex[:6]}", 1000, 1.0, user=alice.pk))

    found = scrape(Client())
    topics = found["mindsearch_topics"]
    assert topics[(("status", "completed"),)] == 2
    assert topics[(("status", "failed"),)] == 1
    assert topics[(("status", "running"),)] == 0
    assert found["mindsearch_llm_calls_total"][(("stage", "plan"),)] == 2  # the cache hit is no call
    assert found["mindsearch_llm_failures_total"][(("stage", "plan"),)] == 1
    assert found["mindsearch_llm_tokens_total"][(("direction", "prompt"), ("stage", "plan"))] == 150
    assert sum(found["mindsearch_ratelimit_grants_total"].values()) >= 1
    assert "mindsearch_queue_depth" in found
    assert found["mindsearch_worker_processes"][()] == 0


def test_counters_are_charted_as_their_change_per_minute() -> None:
    points = [(0.0, 0.0), (60.0, 10.0), (120.0, 10.0), (180.0, 4.0), (210.0, 9.0)]
    assert per_minute(points) == [(60.0, 10.0), (120.0, 0.0), (180.0, 0.0), (210.0, 10.0)]


def test_a_chart_scales_its_lines_to_the_busiest_series() -> None:
    found = {
        "stage=plan": [(0.0, 1.0), (50.0, 4.0)],
        "stage=read": [(0.0, 0.0), (100.0, 2.0)],
        "x=0": [(0.0, 0.0)],
    }
    chart = build_chart("LLM", found, counter=False, start=0.0, end=100.0)
    assert chart.top == 4.0
    assert [s.label for s in chart.series] == ["stage=plan", "stage=read"]  # all-zero series left out
    assert chart.series[0].points == "0.0,120.0 320.0,0.0"
    assert chart.series[1].points == "0.0,160.0 640.0,80.0"


@pytest.mark.django_db(transaction=True)
def test_samples_are_recorded_once_a_minute_and_drawn_on_the_admin_desk(settings, alice: User) -> None:
    settings.METRICS_HISTORY_DAYS = 1
    old = MetricSample.objects.create(
        at=timezone.now() - timedelta(days=2), name="mindsearch_topics", value=1
    )
    Topic.objects.create(owner=alice, question="one", status=Topic.Status.COMPLETED)
    assert metrics.record_samples() > 0
    assert metrics.record_samples() == 0  # another worker already did, within the minute
    assert not MetricSample.objects.filter(pk=old.pk).exists()  # older than the history kept
    # An earlier sample, as the previous minute's would be.
    earlier = timezone.now() - timedelta(minutes=5)
    MetricSample.objects.create(at=earlier, name="mindsearch_topics", labels="status=completed", value=0)

    staff = User.objects.create_user("operator", password="x", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(staff)
    page = client.get("/admin/mindsearch/metricsample/charts/?hours=1")
    assert page.status_code == 200
    body = page.content.decode()
    assert "<polyline" in body
    assert "status=completed" in body
    assert "style=" not in body.split('id="content-main"')[1]  # the CSP allows no inline style
    assert client.get("/admin/").content.decode().count("/admin/mindsearch/metricsample/charts/") == 1
    assert Client().get("/admin/mindsearch/metricsample/charts/").status_code == 302


@pytest.mark.django_db
def test_charts_begin_where_the_samples_do() -> None:
    """15 minutes of figures are drawn across the chart's width, not in the last sliver of a
    24-hour axis (issue 29)."""
    from mindsearch.admin_charts import data_start

    now = timezone.now()
    period = now - timedelta(hours=24)
    assert data_start(period) == period  # no samples: the period as asked
    MetricSample.objects.create(
        at=now - timedelta(minutes=15), name="mindsearch_topics", labels="", value=1.0
    )
    MetricSample.objects.create(at=now - timedelta(minutes=1), name="mindsearch_topics", labels="", value=2.0)
    assert data_start(period) == now - timedelta(minutes=15)
    MetricSample.objects.create(at=now - timedelta(hours=30), name="mindsearch_topics", labels="", value=1.0)
    assert data_start(period) == now - timedelta(minutes=15)  # older samples are outside the period
    assert data_start(now - timedelta(days=7)) == now - timedelta(hours=30)


@pytest.mark.django_db
def test_the_charts_page_begins_at_the_first_sample() -> None:
    """The admin's charts, not only the helper, begin where 15 minutes of figures do (issue 29)."""
    from django.utils.formats import date_format

    first = timezone.now() - timedelta(minutes=15)
    MetricSample.objects.create(at=first, name="mindsearch_topics", labels="", value=1.0)
    MetricSample.objects.create(
        at=timezone.now() - timedelta(minutes=1), name="mindsearch_topics", labels="", value=2.0
    )
    client = Client()
    client.force_login(User.objects.create_user("operator", password="x", is_staff=True, is_superuser=True))
    body = client.get("/admin/mindsearch/metricsample/charts/?hours=24").content.decode()
    shown = date_format(timezone.localtime(first), "DATETIME_FORMAT")
    assert f"from {shown} to" in body
