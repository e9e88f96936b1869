"""Global request-rate limits that hold across every worker process and host.

A reservation log, not a token bucket: a bucket allows a full burst and then a refill inside
one window, which a provider counting "requests in the last minute" sees as twice the limit.
Under a lock, the caller looks at the `limit`-th most recent grant g (future reservations
included) and takes the slot max(now, g + window + margin); so no window of `window` seconds
ever holds more than `limit` grants. "Now" comes from the shared store, so hosts with skewed
clocks agree. PostgreSQL holds the log by default; Redis when REDIS_URL is set.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from redis import asyncio as aioredis

from mindsearch.models import RateLimitGrant

# Network jitter between our clock and the provider's must not squeeze two windows into one.
MARGIN_FRACTION = 0.02
MIN_MARGIN_SECONDS = 0.05
REDIS_PREFIX = "mindsearch:ratelimit:"

_RESERVE_LUA = """
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local margin = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window - margin)
local kth = redis.call('ZREVRANGE', KEYS[1], limit - 1, limit - 1, 'WITHSCORES')
local slot = now
if #kth > 0 then slot = math.max(now, tonumber(kth[2]) + window + margin) end
redis.call('ZADD', KEYS[1], slot, ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.ceil((slot - now + window + margin) * 1000) + 1000)
return {string.format('%.6f', slot), string.format('%.6f', now)}
"""


def window_of(limit: float, per_seconds: float) -> tuple[int, float]:
    """(grants, seconds) of the window to enforce; 1.5 per second becomes 1 per 0.667 s."""
    if float(limit).is_integer():
        return int(limit), per_seconds
    return 1, per_seconds / limit


def margin_for(window: float) -> float:
    return max(window * MARGIN_FRACTION, MIN_MARGIN_SECONDS)


def next_slot(now: float, kth_recent: float | None, window: float, margin: float) -> float:
    """The earliest time a new grant may take, given the `limit`-th most recent grant."""
    if kth_recent is None:
        return now
    return max(now, kth_recent + window + margin)


async def acquire(name: str, limit: float, per_seconds: float) -> float:
    """Wait until one more request to `name` is allowed; return the seconds waited."""
    if limit <= 0:
        return 0.0
    started = time.monotonic()
    grants, window = window_of(limit, per_seconds)
    delay = await _reserve(name, grants, window, margin_for(window))
    if delay > 0:
        await asyncio.sleep(delay)
    return time.monotonic() - started


async def acquire_llm() -> float:
    return await acquire("llm", settings.LIMIT_AITUNNEL_RPS, 1.0)


async def acquire_search() -> float:
    return await acquire("searxng", settings.LIMIT_SEARCHXNG_RPM, 60.0)


async def acquire_reader() -> float:
    return await acquire("reader", settings.LIMIT_JINA_RPS, 1.0)


async def _reserve(name: str, grants: int, window: float, margin: float) -> float:
    """Record a grant and return how long until its slot."""
    if settings.REDIS_URL:
        return await _reserve_redis(name, grants, window, margin)
    return await sync_to_async(_reserve_postgres, thread_sensitive=False)(name, grants, window, margin)


async def _reserve_redis(name: str, grants: int, window: float, margin: float) -> float:
    async with aioredis.from_url(settings.REDIS_URL) as client:
        script = client.register_script(_RESERVE_LUA)
        args = [grants, repr(window), repr(margin), uuid.uuid4().hex]
        slot, now = await script(keys=[REDIS_PREFIX + name], args=args)
    return float(slot) - float(now)


def _reserve_postgres(name: str, grants: int, window: float, margin: float) -> float:
    # This runs on a pool thread outside any request, so it manages its own connection.
    close_old_connections()
    try:
        with transaction.atomic():
            now = _locked_now(name)
            return _record_grant(name, now, grants, window, margin)
    finally:
        close_old_connections()


def _locked_now(name: str) -> datetime:
    """Take the per-name lock (released at commit) and read the database's clock."""
    with connection.cursor() as cursor:
        # Two statements: "now" must be read after the lock is held, not while waiting for it.
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"ratelimit:{name}"])
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def _record_grant(name: str, now: datetime, grants: int, window: float, margin: float) -> float:
    log = RateLimitGrant.objects.filter(name=name)
    log.filter(granted_at__lt=now - timedelta(seconds=window + margin)).delete()
    recent = list(log.order_by("-granted_at").values_list("granted_at", flat=True)[grants - 1 : grants])
    kth = recent[0].timestamp() if recent else None
    slot = next_slot(now.timestamp(), kth, window, margin)
    RateLimitGrant.objects.create(name=name, granted_at=datetime.fromtimestamp(slot, UTC))
    return slot - now.timestamp()
