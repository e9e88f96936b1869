"""Global request-rate limits that hold at the receiver, shared fairly between users.

A reservation log, not a token bucket: a bucket allows a full burst and then a refill inside
one window, which a provider counting "requests in the last minute" sees as twice the limit.
Under a lock, a caller takes the slot

    max(now, last grant + window / limit, limit-th most recent grant + window + margin)

so grants are spaced evenly and no window of `window + margin` seconds ever holds more than
`limit` of them. "Now" comes from the shared store, so every host's grants are ordered on one
clock; a caller then sleeps until its slot on its own clock (hosts kept in step by NTP, see
`Reservation.local_time`). PostgreSQL holds the log by default; Redis when REDIS_URL is set.

Held at the receiver: a request must leave at its grant time, not whenever its event loop gets
round to it. A caller woken more than half the margin after its slot gives the slot up (an
unused slot only lowers the rate) and takes a new one; the other half absorbs the trip from
there to the receiver (the client library, a busy loop, the network). So the receiver never
counts more than `limit` in a window. The price: a per-second limit of n is used as n per
1.15 s (LLM 2/s: 1.74 calls a second at most).

Fair between users: each user (the topic's owner; calls made for nobody, such as status
checks, share one user of their own) holds at most one reserved slot that has not come yet.
Further calls of that user wait until it has passed before they reserve, so a user arriving
behind another's backlog reserves right after the slots already held: one turn per other busy
user, never the whole backlog. In one process, a user's waiting calls queue on a lock, so the
store sees one of them at a time.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import F
from redis import asyncio as aioredis

from mindsearch import lifecycle
from mindsearch.models import RateLimitGrant, RateLimitWaits

# The way from a grant to the provider (how late a request may leave, then the client library,
# a busy event loop and the network) must not squeeze two windows into one.
MARGIN_FRACTION = 0.02
MIN_MARGIN_SECONDS = 0.15
LATE_FRACTION = 1 / 2  # of the margin: how late after its slot a request may still leave
REDIS_PREFIX = "mindsearch:ratelimit:"
REDIS_WAITS_KEY = REDIS_PREFIX + "waits"  # a hash: "<service>:calls", "<service>:seconds"
MAX_CLOCK_OFFSET_SECONDS = 1.0
NO_USER = "-"  # the share of calls made for nobody (status checks, benchmarks)

_RESERVE_LUA = """
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local margin = tonumber(ARGV[3])
local spacing = tonumber(ARGV[4])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local pending = tonumber(redis.call('GET', KEYS[2]))
if pending and pending > now then
  return {'0', string.format('%.6f', pending), string.format('%.6f', now)}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window - margin)
local slot = now
local last = redis.call('ZREVRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #last > 0 then slot = math.max(slot, tonumber(last[2]) + spacing) end
local kth = redis.call('ZREVRANGE', KEYS[1], limit - 1, limit - 1, 'WITHSCORES')
if #kth > 0 then slot = math.max(slot, tonumber(kth[2]) + window + margin) end
redis.call('ZADD', KEYS[1], slot, ARGV[5])
local keep = math.ceil((slot - now + window + margin) * 1000) + 1000
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('SET', KEYS[2], string.format('%.6f', slot), 'PX', keep)
redis.call('HINCRBY', KEYS[3], ARGV[6] .. ':calls', 1)
local waited = string.format('%.6f', tonumber(ARGV[7]) + slot - now)
redis.call('HINCRBYFLOAT', KEYS[3], ARGV[6] .. ':seconds', waited)
return {'1', string.format('%.6f', slot), string.format('%.6f', now)}
"""


@dataclass(frozen=True)
class Reservation:
    """A slot (the store's clock, epoch seconds); when not `granted`, the user's own pending one."""

    granted: bool
    slot: float
    now: float

    def local_time(self, received_at: float) -> float:
        """The slot on this host's clock.

        Hosts are expected to keep their clocks in step (NTP: milliseconds apart, well inside
        the margin), so the slot is taken as it is. A clock off by more than a second is
        corrected by the difference seen at this reservation (its error: one round trip).
        """
        offset = self.now - received_at
        return self.slot if abs(offset) <= MAX_CLOCK_OFFSET_SECONDS else self.slot - offset


def window_of(limit: float, per_seconds: float) -> tuple[int, float]:
    """(grants, seconds) of the window to enforce; 1.5 per second becomes 1 per 0.667 s."""
    if float(limit).is_integer():
        return int(limit), per_seconds
    return 1, per_seconds / limit


def margin_for(window: float) -> float:
    return max(window * MARGIN_FRACTION, MIN_MARGIN_SECONDS)


def next_slot(
    now: float,
    kth_recent: float | None,
    window: float,
    margin: float,
    *,
    last: float | None = None,
    spacing: float = 0.0,
) -> float:
    """The earliest time a new grant may take, given the last and the `limit`-th most recent grant."""
    slot = now
    if last is not None:
        slot = max(slot, last + spacing)
    if kth_recent is not None:
        slot = max(slot, kth_recent + window + margin)
    return slot


def user_key(user: int | str | None) -> str:
    return NO_USER if user is None or user == "" else str(user)


async def acquire(name: str, limit: float, per_seconds: float, *, user: int | str | None) -> float:
    """Wait until one more request to `name` for `user` may leave; return the seconds waited.

    Send the request at once after this returns: the slot is only good for a moment.
    In a worker that is stopping, raises `lifecycle.WorkerStopping` instead (see there).
    """
    if limit <= 0:
        return 0.0
    started = time.monotonic()
    grants, window = window_of(limit, per_seconds)
    margin = margin_for(window)
    key = user_key(user)
    lifecycle.track_call()  # a stop cancels a call waiting for its turn, not only one under way
    while True:
        lifecycle.raise_if_stopping()  # a stopping worker starts no new call
        async with _turn(name, key):
            due = await _take_turn(name, key, grants, window, margin, started)
        if due > time.time():
            await asyncio.sleep(due - time.time())
        lifecycle.raise_if_stopping()
        if time.time() - due <= margin * LATE_FRACTION:
            return time.monotonic() - started
        # Woken too late (a busy event loop): leaving now could crowd the next window.


async def _take_turn(name: str, key: str, grants: int, window: float, margin: float, started: float) -> float:
    """Reserve a slot once this user's pending one (if any) has come; its time on this host's clock."""
    while True:
        reservation = await _reserve(name, key, grants, window, margin, time.monotonic() - started)
        due = reservation.local_time(time.time())
        if reservation.granted:
            return due
        await asyncio.sleep(max(due - time.time(), 0.001))


_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _turn(name: str, key: str) -> asyncio.Lock:
    """This event loop's queue for one user's calls to one service (asyncio locks are FIFO)."""
    locks = _turns.setdefault(asyncio.get_running_loop(), {})
    return locks.setdefault((name, key), asyncio.Lock())


async def acquire_llm(*, user: int | str | None) -> float:
    return await acquire("llm", settings.LIMIT_AITUNNEL_RPS, 1.0, user=user)


async def acquire_search(*, user: int | str | None) -> float:
    return await acquire("searxng", settings.LIMIT_SEARXNG_RPM, 60.0, user=user)


async def acquire_reader(*, user: int | str | None) -> float:
    return await acquire("reader", settings.LIMIT_JINA_RPS, 1.0, user=user)


async def acquire_rerank(*, user: int | str | None) -> float:
    return await acquire("rerank", settings.LIMIT_RERANK_RPS, 1.0, user=user)


async def _reserve(
    name: str, key: str, grants: int, window: float, margin: float, waited: float
) -> Reservation:
    """Reserve a slot; `waited` (seconds this call has waited so far) goes into the wait figures."""
    if settings.REDIS_URL:
        return await _reserve_redis(name, key, grants, window, margin, waited)
    reserve = sync_to_async(_reserve_postgres, thread_sensitive=False)
    return await reserve(name, key, grants, window, margin, waited)


async def _reserve_redis(
    name: str, key: str, grants: int, window: float, margin: float, waited: float
) -> Reservation:
    async with aioredis.from_url(settings.REDIS_URL) as client:
        script = client.register_script(_RESERVE_LUA)
        keys = [REDIS_PREFIX + name, f"{REDIS_PREFIX}{name}:user:{key}", REDIS_WAITS_KEY]
        args: list[str | int] = [
            grants,
            repr(window),
            repr(margin),
            repr(window / grants),
            uuid.uuid4().hex,
            name,
            repr(waited),
        ]
        granted, slot, now = await script(keys=keys, args=args)
    return Reservation(granted=granted in (b"1", "1"), slot=float(slot), now=float(now))


def _reserve_postgres(
    name: str, key: str, grants: int, window: float, margin: float, waited: float = 0.0
) -> Reservation:
    # This runs on a pool thread outside any request, so it manages its own connection.
    close_old_connections()
    try:
        with transaction.atomic():
            now = _locked_now(name)
            return _record_grant(name, key, now, grants, window, margin, waited)
    finally:
        close_old_connections()


def _locked_now(name: str) -> datetime:
    """Take the per-name lock (released at commit) and read the database's clock."""
    with connection.cursor() as cursor:
        # Two statements: "now" must be read after the lock is held, not while waiting for it.
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"ratelimit:{name}"])
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def _record_grant(
    name: str, key: str, now: datetime, grants: int, window: float, margin: float, waited: float
) -> Reservation:
    log = RateLimitGrant.objects.filter(name=name)
    log.filter(granted_at__lt=now - timedelta(seconds=window + margin)).delete()
    pending = log.filter(owner=key, granted_at__gt=now).order_by("-granted_at").first()
    if pending is not None:
        return Reservation(granted=False, slot=pending.granted_at.timestamp(), now=now.timestamp())
    recent = [
        t.timestamp() for t in log.order_by("-granted_at").values_list("granted_at", flat=True)[:grants]
    ]
    kth = recent[grants - 1] if len(recent) >= grants else None
    last = recent[0] if recent else None
    slot = next_slot(now.timestamp(), kth, window, margin, last=last, spacing=window / grants)
    RateLimitGrant.objects.create(name=name, owner=key, granted_at=datetime.fromtimestamp(slot, UTC))
    waits, _created = RateLimitWaits.objects.get_or_create(name=name)  # under the name's lock
    RateLimitWaits.objects.filter(pk=waits.pk).update(
        calls=F("calls") + 1, seconds=F("seconds") + waited + slot - now.timestamp()
    )
    return Reservation(granted=True, slot=slot, now=now.timestamp())


def wait_figures() -> dict[str, tuple[int, float]]:
    """{service: (calls granted, seconds waited in all)} from the store in use."""
    if settings.REDIS_URL:
        with redis.Redis.from_url(settings.REDIS_URL) as client:
            raw = {k.decode(): float(v) for k, v in client.hgetall(REDIS_WAITS_KEY).items()}
        names = {field.rsplit(":", 1)[0] for field in raw}
        return {n: (int(raw.get(f"{n}:calls", 0)), raw.get(f"{n}:seconds", 0.0)) for n in names}
    return {w.name: (w.calls, w.seconds) for w in RateLimitWaits.objects.all()}
