"""Global rate limits: the reservation maths, and the limit holding across real OS processes."""

from __future__ import annotations

import asyncio
import json
import math
import random
import subprocess
import sys
import time
import uuid

import pytest
import redis

from mindsearch.clients import ratelimit
from mindsearch.clients.ratelimit import margin_for, next_slot, window_of
from mindsearch.models import RateLimitGrant
from tests.support.fakes import FakeService, Response
from tests.support.processes import ROOT, process_env

REDIS_TEST_URL = "redis://127.0.0.1:6379/14"


def most_in_any_window(times: list[float], window: float) -> int:
    """The largest number of times inside any half-open window [t, t + window)."""
    times = sorted(times)
    return max((sum(1 for u in times[i:] if u < t + window) for i, t in enumerate(times)), default=0)


def simulate(arrivals: list[float], limit: float, per_seconds: float) -> list[float]:
    """Run the reservation algorithm over an in-memory log, as the stores do."""
    grants, window = window_of(limit, per_seconds)
    margin = margin_for(window)
    log: list[float] = []
    for now in sorted(arrivals):
        recent = sorted(log, reverse=True)
        log.append(next_slot(now, recent[grants - 1] if len(recent) >= grants else None, window, margin))
    return log


# --- Pure maths --------------------------------------------------------------------------------


def test_integer_limits_keep_their_window() -> None:
    assert window_of(3, 1.0) == (3, 1.0)
    assert window_of(10.0, 60.0) == (10, 60.0)


def test_fractional_limits_become_one_per_interval() -> None:
    grants, window = window_of(1.5, 1.0)
    assert grants == 1
    assert window == pytest.approx(1 / 1.5)
    assert window_of(0.5, 1.0) == (1, 2.0)


def test_margin_is_two_percent_but_at_least_50_ms() -> None:
    assert margin_for(60.0) == pytest.approx(1.2)
    assert margin_for(1.0) == pytest.approx(0.05)
    assert margin_for(0.1) == pytest.approx(0.05)


def test_next_slot() -> None:
    assert next_slot(100.0, None, 1.0, 0.05) == 100.0
    assert next_slot(100.0, 99.5, 1.0, 0.05) == pytest.approx(100.55)
    assert next_slot(100.0, 90.0, 1.0, 0.05) == 100.0


def test_a_burst_is_spread_so_no_window_holds_more_than_the_limit() -> None:
    slots = simulate([0.0] * 10, 3, 1.0)
    assert most_in_any_window(slots, 1.0) == 3
    assert slots[:3] == [0.0, 0.0, 0.0]
    assert slots[3] == pytest.approx(1.05)
    assert max(slots) == pytest.approx(3.15)


def test_no_burst_then_refill_inside_one_window() -> None:
    # A token bucket would allow 3 at t=0.9 and 3 more at t=1.0; the log must not.
    slots = simulate([0.9, 0.9, 0.9, 1.0, 1.0, 1.0], 3, 1.0)
    assert most_in_any_window(slots, 1.0) == 3
    assert min(slots[3:]) >= 0.9 + 1.0


@pytest.mark.parametrize("seed", range(20))
def test_random_arrivals_never_exceed_the_limit(seed: int) -> None:
    rng = random.Random(seed)
    limit, per = rng.choice([(1, 1.0), (2, 1.0), (3, 1.0), (5, 2.0), (10, 60.0), (1.5, 1.0), (2.5, 1.0)])
    arrivals = sorted(rng.uniform(0, per * 5) for _ in range(60))
    slots = simulate(arrivals, limit, per)
    assert most_in_any_window(slots, per) <= math.ceil(limit)
    grants, window = window_of(limit, per)
    assert most_in_any_window(slots, window) <= grants
    assert all(slot >= arrival for slot, arrival in zip(slots, arrivals, strict=True))


def test_fractional_limit_never_exceeds_the_rate_over_a_second() -> None:
    slots = simulate([0.0] * 12, 1.5, 1.0)
    assert most_in_any_window(slots, 1.0) <= 2  # 1.5 per second: never 3 in one second


# --- Acquire, in one process -------------------------------------------------------------------


def test_unlimited_returns_at_once() -> None:
    assert asyncio.run(ratelimit.acquire("anything", 0, 1.0)) == 0.0
    assert asyncio.run(ratelimit.acquire("anything", -1, 1.0)) == 0.0


async def _acquire_many(name: str, count: int, limit: float, per: float) -> list[float]:
    async def one() -> float:
        await ratelimit.acquire(name, limit, per)
        return time.monotonic()

    return list(await asyncio.gather(*(one() for _ in range(count))))


@pytest.mark.django_db(transaction=True)
def test_postgres_spreads_concurrent_callers() -> None:
    name = f"test-{uuid.uuid4().hex}"
    started = time.monotonic()
    times = asyncio.run(_acquire_many(name, 7, 3, 0.5))
    assert most_in_any_window(times, 0.5) <= 3
    assert max(times) - started == pytest.approx(2 * 0.55, abs=0.3)


@pytest.mark.django_db(transaction=True)
def test_postgres_prunes_grants_older_than_the_window() -> None:
    name = f"test-{uuid.uuid4().hex}"
    asyncio.run(_acquire_many(name, 2, 2, 0.2))
    time.sleep(0.4)
    asyncio.run(ratelimit.acquire(name, 2, 0.2))
    assert RateLimitGrant.objects.filter(name=name).count() == 1


@pytest.mark.django_db(transaction=True)
def test_convenience_functions_read_the_settings(settings) -> None:
    settings.LIMIT_AITUNNEL_RPS, settings.LIMIT_SEARCHXNG_RPM, settings.LIMIT_JINA_RPS = 50, 600, 0

    async def all_three() -> None:
        await ratelimit.acquire_llm()
        await ratelimit.acquire_search()
        await ratelimit.acquire_reader()

    asyncio.run(all_three())
    assert sorted(RateLimitGrant.objects.values_list("name", flat=True)) == ["llm", "searxng"]


@pytest.fixture
def redis_db14():
    client = redis.Redis.from_url(REDIS_TEST_URL)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def test_redis_spreads_concurrent_callers(settings, redis_db14) -> None:
    settings.REDIS_URL = REDIS_TEST_URL
    name = f"test-{uuid.uuid4().hex}"
    started = time.monotonic()
    times = asyncio.run(_acquire_many(name, 7, 3, 0.5))
    assert most_in_any_window(times, 0.5) <= 3
    assert max(times) - started == pytest.approx(2 * 0.55, abs=0.3)
    assert redis_db14.zcard(ratelimit.REDIS_PREFIX + name) <= 7
    assert redis_db14.pttl(ratelimit.REDIS_PREFIX + name) > 0


# --- Across real OS processes ------------------------------------------------------------------

WORKER = """
import asyncio, json, sys, time
import django
django.setup()
import httpx
from mindsearch.clients import ratelimit

name, count, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]

async def one(client):
    await ratelimit.acquire(name, 3, 1.0)
    granted = time.time()
    await client.get(url + "hit")
    return granted

async def main():
    async with httpx.AsyncClient() as client:
        # Warm up the database connection and the HTTP pool, so the first grants are not late.
        await ratelimit.acquire(name + "-warm-up", 1000, 1.0)
        await client.get(url + "warm-up")
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        print(json.dumps(await asyncio.gather(*(one(client) for _ in range(count)))), flush=True)

asyncio.run(main())
"""


def run_two_workers(env: dict[str, str], per_process: int) -> tuple[list[float], list[float]]:
    """Two processes each take `per_process` grants for limit 3 per 1 s, then hit a fake.

    Returns the grant times (wall clock, as each caller got its grant) and the fake's
    arrival times (monotonic)."""
    name = f"test-{uuid.uuid4().hex}"
    with FakeService(fallback=lambda request: Response(200, "ok")) as fake:
        cmd = [sys.executable, "-c", WORKER, name, str(per_process), fake.url]
        procs = [
            subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        try:
            grants = _run_together(procs)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
        return grants, [request.arrived for request in fake.requests_to("/hit")]


def _run_together(procs: list[subprocess.Popen]) -> list[float]:
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    grants = [granted for proc in procs for granted in json.loads(proc.stdout.readline())]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    return grants


def assert_limit_held(grants: list[float], arrivals: list[float], total: int) -> None:
    assert len(grants) == len(arrivals) == total
    base = min(grants)
    assert most_in_any_window(grants, 1.0) <= 3, [round(t - base, 3) for t in sorted(grants)]
    # Dense packing: total / 3 windows of 1.05 s, the first starting at once.
    ideal = (total / 3 - 1) * 1.05
    assert max(grants) - min(grants) == pytest.approx(ideal, abs=0.3)
    # The server sees the same spacing, give or take the HTTP round trip's jitter.
    assert most_in_any_window(arrivals, 0.9) <= 3


@pytest.mark.django_db(transaction=True)
def test_two_processes_share_the_postgres_limit() -> None:
    env = process_env(DJANGO_SETTINGS_MODULE="mindsearch.settings")
    assert_limit_held(*run_two_workers(env, 6), 12)


@pytest.mark.django_db(transaction=True)
def test_two_processes_share_the_redis_limit(redis_db14) -> None:
    env = process_env(DJANGO_SETTINGS_MODULE="mindsearch.settings", REDIS_URL=REDIS_TEST_URL)
    assert_limit_held(*run_two_workers(env, 6), 12)
    assert not RateLimitGrant.objects.exists()
