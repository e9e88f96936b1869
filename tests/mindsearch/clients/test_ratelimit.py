"""Global rate limits: the reservation maths, and the limit holding across real OS processes."""

from __future__ import annotations

import asyncio
import itertools
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


def most_in_any_window(times: list[float], window: float) -> int:
    """The largest number of times inside any half-open window [t, t + window)."""
    times = sorted(times)
    return max((sum(1 for u in times[i:] if u < t + window) for i, t in enumerate(times)), default=0)


def simulate(arrivals: list[float], limit: float, per_seconds: float) -> list[float]:
    """Run the reservation algorithm over an in-memory log, as the stores do (one user)."""
    grants, window = window_of(limit, per_seconds)
    margin = margin_for(window)
    log: list[float] = []
    for now in sorted(arrivals):
        recent = sorted(log, reverse=True)
        kth = recent[grants - 1] if len(recent) >= grants else None
        last = recent[0] if recent else None
        log.append(next_slot(now, kth, window, margin, last=last, spacing=window / grants))
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


def test_margin_is_two_percent_but_at_least_150_ms() -> None:
    assert margin_for(60.0) == pytest.approx(1.2)
    assert margin_for(1.0) == pytest.approx(0.15)
    assert margin_for(0.1) == pytest.approx(0.15)


def test_next_slot() -> None:
    assert next_slot(100.0, None, 1.0, 0.05) == 100.0
    assert next_slot(100.0, 99.5, 1.0, 0.05) == pytest.approx(100.55)
    assert next_slot(100.0, 90.0, 1.0, 0.05) == 100.0


def test_next_slot_spaces_grants_evenly() -> None:
    assert next_slot(100.0, None, 1.0, 0.05, last=99.9, spacing=0.5) == pytest.approx(100.4)
    assert next_slot(100.0, 99.5, 1.0, 0.05, last=99.9, spacing=0.5) == pytest.approx(100.55)
    assert next_slot(100.0, None, 1.0, 0.05, last=99.0, spacing=0.5) == 100.0


def test_a_burst_is_spread_evenly_so_no_window_holds_more_than_the_limit() -> None:
    slots = simulate([0.0] * 10, 3, 1.0)
    assert most_in_any_window(slots, 1.0) == 3
    # Evenly spaced, not three at once: a provider sees one call every third of a second.
    assert slots[:3] == pytest.approx([0.0, 1 / 3, 2 / 3])
    assert slots[3] == pytest.approx(1.15)
    assert max(slots) == pytest.approx(3.45)


def test_no_burst_then_refill_inside_one_window() -> None:
    # A token bucket would allow 3 at t=0.9 and 3 more at t=1.0; the log must not.
    slots = simulate([0.9, 0.9, 0.9, 1.0, 1.0, 1.0], 3, 1.0)
    assert most_in_any_window(slots, 1.0) == 3
    assert min(slots[3:]) >= 0.9 + 1.0
    assert min(b - a for a, b in itertools.pairwise(slots)) >= 1 / 3 - 1e-9


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
    assert asyncio.run(ratelimit.acquire("anything", 0, 1.0, user=1)) == 0.0
    assert asyncio.run(ratelimit.acquire("anything", -1, 1.0, user=None)) == 0.0


async def _acquire_many(name: str, count: int, limit: float, per: float, user: int | None = 1) -> list[float]:
    async def one() -> float:
        await ratelimit.acquire(name, limit, per, user=user)
        return time.monotonic()

    return list(await asyncio.gather(*(one() for _ in range(count))))


@pytest.mark.django_db(transaction=True)
def test_postgres_spreads_concurrent_callers() -> None:
    name = f"test-{uuid.uuid4().hex}"
    started = time.monotonic()
    times = asyncio.run(_acquire_many(name, 7, 3, 0.5))
    assert most_in_any_window(times, 0.5) <= 3
    assert max(times) - started == pytest.approx(2 * 0.65, abs=0.5)


@pytest.mark.django_db(transaction=True)
def test_postgres_prunes_grants_older_than_the_window() -> None:
    name = f"test-{uuid.uuid4().hex}"
    asyncio.run(_acquire_many(name, 2, 2, 0.2))
    old = set(RateLimitGrant.objects.filter(name=name).values_list("pk", flat=True))
    time.sleep(0.6)  # longer than the window and its margin (0.2 + 0.15 s)
    asyncio.run(ratelimit.acquire(name, 2, 0.2, user=1))
    kept = set(RateLimitGrant.objects.filter(name=name).values_list("pk", flat=True))
    assert kept and not kept & old


@pytest.mark.django_db(transaction=True)
def test_convenience_functions_read_the_settings(settings) -> None:
    settings.LIMIT_AITUNNEL_RPS, settings.LIMIT_SEARXNG_RPM, settings.LIMIT_JINA_RPS = 50, 600, 0

    async def all_three() -> None:
        await ratelimit.acquire_llm(user=7)
        await ratelimit.acquire_search(user=None)
        await ratelimit.acquire_reader(user=7)

    asyncio.run(all_three())
    # (A reservation answered late, on a busy machine, is given up and taken again: more rows.)
    rows = set(RateLimitGrant.objects.values_list("name", "owner"))
    assert rows == {("llm", "7"), ("searxng", ratelimit.NO_USER)}


@pytest.fixture
def redis_url(redis_base: str) -> str:
    """Database 14 of the tests' Redis (the machine's, a private one, or a skip by name)."""
    return f"{redis_base}/14"


@pytest.fixture
def redis_db14(redis_url: str):
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def test_redis_spreads_concurrent_callers(settings, redis_db14, redis_url: str) -> None:
    settings.REDIS_URL = redis_url
    name = f"test-{uuid.uuid4().hex}"
    started = time.monotonic()
    times = asyncio.run(_acquire_many(name, 7, 3, 0.5))
    assert most_in_any_window(times, 0.5) <= 3
    assert max(times) - started == pytest.approx(2 * 0.65, abs=0.5)
    assert redis_db14.zcard(ratelimit.REDIS_PREFIX + name) <= 7
    assert redis_db14.pttl(ratelimit.REDIS_PREFIX + name) > 0


# --- Fair between users, and leaving at the grant time -----------------------------------------


async def _backlog_then_newcomer(name: str, limit: float, backlog: int, newcomer_after: float) -> dict:
    """User 1 queues `backlog` calls; user 2 asks for one call `newcomer_after` s later."""
    loop_started = time.monotonic()
    granted: dict[int, list[float]] = {1: [], 2: []}

    async def call(user: int) -> None:
        await ratelimit.acquire(name, limit, 1.0, user=user)
        granted[user].append(time.monotonic() - loop_started)

    async def newcomer() -> float:
        await asyncio.sleep(newcomer_after)
        asked = time.monotonic() - loop_started
        await call(2)
        return asked

    results = await asyncio.gather(newcomer(), *(call(1) for _ in range(backlog)))
    return {"asked": results[0], "granted": granted}


def assert_newcomer_served_within_one_turn(outcome: dict, limit: float) -> None:
    spacing = 1.0 / limit
    asked, (newcomer,) = outcome["asked"], outcome["granted"][2]
    backlog = outcome["granted"][1]
    # The backlog was still long when the newcomer asked...
    assert sum(1 for t in backlog if t > newcomer) >= 5, outcome
    # ...yet only the slot it already held went before the newcomer's, and one more when the
    # newcomer's reservation reached the store just as that slot came (the store's round trip).
    before = [t for t in backlog if asked < t < newcomer]
    assert len(before) <= 2, outcome
    assert newcomer - asked <= 2 * spacing + 0.15, outcome


@pytest.mark.django_db(transaction=True)
def test_postgres_one_users_backlog_delays_another_by_one_turn_at_most() -> None:
    outcome = asyncio.run(_backlog_then_newcomer(f"test-{uuid.uuid4().hex}", 10, 20, 0.35))
    assert_newcomer_served_within_one_turn(outcome, 10)


def test_redis_one_users_backlog_delays_another_by_one_turn_at_most(
    settings, redis_db14, redis_url: str
) -> None:
    settings.REDIS_URL = redis_url
    outcome = asyncio.run(_backlog_then_newcomer(f"test-{uuid.uuid4().hex}", 10, 20, 0.35))
    assert_newcomer_served_within_one_turn(outcome, 10)


async def _two_backlogs(name: str, limit: float, each: int) -> list[tuple[float, int | None]]:
    order: list[tuple[float, int | None]] = []

    async def call(user: int | None) -> None:
        await ratelimit.acquire(name, limit, 1.0, user=user)
        order.append((time.monotonic(), user))

    await asyncio.gather(*(call(user) for user in (1, None) for _ in range(each)))
    return sorted(order)


@pytest.mark.django_db(transaction=True)
def test_two_backlogs_take_turns_and_calls_for_nobody_have_a_share() -> None:
    order = asyncio.run(_two_backlogs(f"test-{uuid.uuid4().hex}", 10, 8))
    users: list[int | None] = [user for _, user in order]
    # While both have calls waiting, neither gets two grants in a row. Both start together, but
    # a call reserves from a thread of its own: under load the second user's first reservation
    # can come after the first user's second grant, so their turns are counted from the grant
    # before the second user's first.
    second = next(n for n, user in enumerate(users) if user != users[0])
    fair = users[second - 1 :]
    both_waiting = fair[: 2 * min(fair.count(1), fair.count(None)) - 1]
    assert all(a != b for a, b in itertools.pairwise(both_waiting)), users
    assert most_in_any_window([t for t, _ in order], 1.0) <= 10


@pytest.mark.django_db(transaction=True)
def test_a_call_woken_late_takes_a_new_slot_instead_of_crowding_the_next() -> None:
    """A busy event loop wakes sleepers late; they must not all leave together."""
    name = f"test-{uuid.uuid4().hex}"

    async def scenario() -> list[float]:
        left: list[float] = []

        async def call() -> None:
            await ratelimit.acquire(name, 1, 0.2, user=1)
            left.append(time.monotonic())

        async def hog() -> None:
            await asyncio.sleep(0.1)
            time.sleep(0.6)  # the loop is blocked past the second and third slots

        await asyncio.gather(hog(), *(call() for _ in range(4)))
        return left

    left = asyncio.run(scenario())
    assert len(left) == 4
    # One per 0.2 s at the receiver, even though two sleepers woke at the same late moment.
    assert most_in_any_window(left, 0.2) <= 1, [round(t - min(left), 3) for t in sorted(left)]


# --- Across real OS processes ------------------------------------------------------------------

WORKER = """
import asyncio, json, sys, time
import django
django.setup()
import httpx
from mindsearch.clients import ratelimit

name, count, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
limit, user, busy = float(sys.argv[4]), sys.argv[5] or None, sys.argv[6] == "busy"

async def one(client):
    await ratelimit.acquire(name, limit, 1.0, user=user)
    granted = time.time()
    await client.get(url + "hit")
    return granted

async def hog(done):
    # A busy worker: its loop is blocked for 40 ms in every 100 ms (parsing, scoring).
    while not done.is_set():
        time.sleep(0.04)
        await asyncio.sleep(0.06)

async def main():
    async with httpx.AsyncClient() as client:
        # Warm up the database connection and the HTTP pool, so the first grants are not late.
        await ratelimit.acquire(name + "-warm-up", 1000, 1.0, user=None)
        await client.get(url + "warm-up")
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        done = asyncio.Event()
        hogging = asyncio.create_task(hog(done)) if busy else None
        granted = await asyncio.gather(*(one(client) for _ in range(count)))
        done.set()
        if hogging:
            await hogging
        print(json.dumps(granted), flush=True)

asyncio.run(main())
"""


def run_two_workers(
    env: dict[str, str],
    per_process: int,
    limit: float = 3,
    *,
    users: tuple[str, str] = ("", ""),
    busy: bool = False,
) -> tuple[list[float], list[float]]:
    """Two processes each take `per_process` grants for `limit` per 1 s, then hit a fake.

    Returns the grant times (wall clock, as each caller got its grant) and the fake's
    arrival times (monotonic)."""
    name = f"test-{uuid.uuid4().hex}"
    with FakeService(fallback=lambda request: Response(200, "ok")) as fake:
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    WORKER,
                    name,
                    str(per_process),
                    fake.url,
                    str(limit),
                    user,
                    "busy" * busy,
                ],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for user in users
        ]
        try:
            grants = _run_together(procs)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
        return grants, [request.arrived for request in fake.requests_to("/hit")]


def _run_together(procs: list[subprocess.Popen[str]]) -> list[float]:
    pipes = []
    for proc in procs:
        assert proc.stdout is not None and proc.stdin is not None
        pipes.append((proc.stdin, proc.stdout))
    for _stdin, stdout in pipes:
        assert stdout.readline().strip() == "ready"
    for stdin, _stdout in pipes:
        stdin.write("go\n")
        stdin.flush()
    grants = [granted for _stdin, stdout in pipes for granted in json.loads(stdout.readline())]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    return grants


def assert_limit_held(grants: list[float], arrivals: list[float], total: int) -> None:
    assert len(grants) == len(arrivals) == total
    base = min(grants)
    assert most_in_any_window(grants, 1.0) <= 3, [round(t - base, 3) for t in sorted(grants)]
    # Dense packing: total / 3 windows of 1.15 s, three evenly spaced grants in each.
    ideal = (total / 3 - 1) * 1.15 + 2 / 3
    assert max(grants) - min(grants) == pytest.approx(ideal, abs=0.3)
    # The server sees the same spacing, give or take the HTTP round trip's jitter.
    assert most_in_any_window(arrivals, 0.9) <= 3


@pytest.mark.django_db(transaction=True)
def test_two_processes_share_the_postgres_limit() -> None:
    env = process_env(DJANGO_SETTINGS_MODULE="mindsearch.settings")
    assert_limit_held(*run_two_workers(env, 6), 12)


@pytest.mark.parametrize(("service", "limit"), [("LLM", 2), ("reader", 5)])
@pytest.mark.django_db(transaction=True)
def test_two_busy_workers_at_the_default_limits_never_exceed_them_at_the_receiver(
    service: str, limit: int
) -> None:
    """Two worker processes whose loops are busy, calling for two users at the default limits:
    every 1-s window at the loopback server holds at most the limit."""
    env = process_env(DJANGO_SETTINGS_MODULE="mindsearch.settings")
    grants, arrivals = run_two_workers(env, 3 * limit, limit, users=("1", "2"), busy=True)
    assert len(arrivals) == 6 * limit
    base = min(arrivals)
    assert most_in_any_window(arrivals, 1.0) <= limit, [round(t - base, 3) for t in sorted(arrivals)]
    assert most_in_any_window(grants, 1.0) <= limit


@pytest.mark.django_db(transaction=True)
def test_two_processes_share_the_redis_limit(redis_db14, redis_url: str) -> None:
    env = process_env(DJANGO_SETTINGS_MODULE="mindsearch.settings", REDIS_URL=redis_url)
    assert_limit_held(*run_two_workers(env, 6), 12)
    assert not RateLimitGrant.objects.exists()
