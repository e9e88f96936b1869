"""Health endpoints for orchestrators: unauthenticated, cheap, and telling nothing private.

/healthz: the process answers (liveness). /readyz: the database answers, a worker cluster has
reported within WORKER_STALE_SECONDS, and the channel layer passes a message (readiness); 503
with the failing part named otherwise.
"""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from django_q.status import Stat

# django-q2 clusters report every few seconds (GUARD_CYCLE); a minute of silence is a dead one.
WORKER_STALE_SECONDS = 60
CHANNEL_TIMEOUT_SECONDS = 2.0


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
    try:
        clusters = Stat.get_all()
    except Exception:
        return "unknown"
    now = timezone.now()
    if any((now - stat.timestamp).total_seconds() < WORKER_STALE_SECONDS for stat in clusters):
        return "ok"
    return "no worker has reported" if not clusters else "silent"


def _channels() -> str:
    layer = get_channel_layer()
    if layer is None:
        return "not configured"
    try:
        return async_to_sync(_round_trip)(layer)
    except Exception:
        return "unreachable"


async def _round_trip(layer: object) -> str:
    channel = await layer.new_channel("readyz.")
    sent = time.monotonic()
    await layer.send(channel, {"type": "readyz.probe", "sent": sent})
    message = await asyncio.wait_for(layer.receive(channel), CHANNEL_TIMEOUT_SECONDS)
    return "ok" if message.get("sent") == sent else "garbled"
