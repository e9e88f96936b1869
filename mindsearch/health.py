"""Health endpoints for orchestrators: unauthenticated, cheap, and telling nothing private.

/healthz: the process answers (liveness). /readyz: the database answers, a worker cluster has
reported within WORKER_STALE_SECONDS, and the channel layer answers (readiness); 503 with the
failing part named otherwise. The PostgreSQL layer is checked through its own connection pool and
message table, in a transaction rolled back (`_postgres_layer`); Redis by a message sent and
received.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_postgres.models import Message
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from django_q.status import Stat
from psycopg import sql

from mindsearch import heartbeat

# django-q2 clusters report every few seconds (GUARD_CYCLE); a minute of silence is a dead one.
WORKER_STALE_SECONDS = heartbeat.LIFETIME_SECONDS
CHANNEL_TIMEOUT_SECONDS = 2.0
MESSAGE_TABLE = Message._meta.db_table


@login_not_required
@require_safe
@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok\n", content_type="text/plain")


@login_not_required
@require_safe
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database(), "worker": _worker(), "channels": _channels()}
    ready = all(state == "ok" for state in checks.values())
    return JsonResponse({"ready": ready, **checks}, status=200 if ready else 503)


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:  # which error says nothing to an orchestrator; the logs have it
        return "unreachable"
    return "ok"


def _worker() -> str:
    """A cluster's stats within the minute, or, as they lapse after 3 s when the machine is busy,
    the worker's own heartbeat (mindsearch/heartbeat.py)."""
    try:
        clusters: list[Stat] | None = Stat.get_all()
    except Exception:
        clusters = None
    now = timezone.now()
    if any((now - stat.timestamp).total_seconds() < WORKER_STALE_SECONDS for stat in clusters or []):
        return "ok"
    with contextlib.suppress(Exception):  # the cache is the database here: its error is that check's
        if heartbeat.seconds_since() is not None:
            return "ok"
    if clusters is None:
        return "unknown"
    return "no worker has reported" if not clusters else "silent"


def _channels() -> str:
    layer = get_channel_layer()
    if layer is None:
        return "not configured"
    try:
        return async_to_sync(_check_layer)(layer)
    except Exception:
        return "unreachable"


async def _check_layer(layer: object) -> str:
    database = getattr(layer, "django_db", None)
    if database is None:  # Redis: a message there and back on a channel of the probe's own
        return await _round_trip(layer)
    return await asyncio.wait_for(_postgres_layer(database), CHANNEL_TIMEOUT_SECONDS)


async def _postgres_layer(database: Any) -> str:
    """The PostgreSQL layer's own pool writes a message row and reads it back, in a transaction
    rolled back: nothing is left behind and no NOTIFY goes out. A message sent to itself and
    received instead (the probe before) raced the layer's listener: a notification for a channel
    whose advisory lock receive() had not yet taken is dropped, and each probe's channel kept a
    session advisory lock on a pooled connection for good."""
    pool = await database.get_db_pool(db_params=database.db_params)
    payload = f"readyz {time.monotonic()}".encode()
    async with pool.connection() as conn, conn.transaction(force_rollback=True):
        cursor = await conn.execute(
            sql.SQL("INSERT INTO {} (channel, message, expire) VALUES (%s, %s, now()) RETURNING id").format(
                sql.Identifier(MESSAGE_TABLE)
            ),
            ("readyz.probe", payload),
        )
        (message_id,) = await cursor.fetchone()
        cursor = await conn.execute(
            sql.SQL("SELECT message FROM {} WHERE id = %s").format(sql.Identifier(MESSAGE_TABLE)),
            (message_id,),
        )
        row = await cursor.fetchone()
    return "ok" if row is not None and bytes(row[0]) == payload else "garbled"


async def _round_trip(layer: Any) -> str:
    channel = await layer.new_channel("readyz.")
    sent = time.monotonic()
    await layer.send(channel, {"type": "readyz.probe", "sent": sent})
    message = await asyncio.wait_for(layer.receive(channel), CHANNEL_TIMEOUT_SECONDS)
    return "ok" if message.get("sent") == sent else "garbled"
