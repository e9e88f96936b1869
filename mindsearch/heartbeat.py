"""The worker's own heartbeat, read by /readyz and the status page.

django-q2's cluster stats (`Stat`) are written by the cluster's sentinel every guard cycle and
expire after 3 seconds: on a loaded machine one late cycle and a live cluster is gone from them,
so the readiness probe answered 503 "no worker has reported" of a healthy instance (1 of 200
probes in CI's slow tier, tests/mindsearch/test_readyz.py). The worker's main process, which ends
itself within half a second of its sentinel's death (mindsearch/worker.py), writes this key every
few seconds, and it lives for the minute of silence a dead worker is allowed; a worker that stops
cleanly removes it. Several workers share the key: any one's beat is a live worker.
"""

from __future__ import annotations

import time

from django.core.cache import cache

KEY = "mindsearch:worker-heartbeat"
# django-q2 clusters report every few seconds; a minute of silence is a dead one.
LIFETIME_SECONDS = 60


def beat() -> None:
    cache.set(KEY, time.time(), LIFETIME_SECONDS)


def forget() -> None:
    cache.delete(KEY)


def seconds_since() -> float | None:
    """Seconds since a worker last beat; None when none has within LIFETIME_SECONDS."""
    value = cache.get(KEY)
    if value is None:
        return None
    since = max(0.0, time.time() - float(value))
    return since if since < LIFETIME_SECONDS else None
