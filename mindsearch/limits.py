"""Counts behind limits that must hold when many requests arrive at once: each is taken in one
conditional PostgreSQL statement on a `LimitCounter` row (INSERT … ON CONFLICT DO UPDATE … WHERE),
so the row lock orders concurrent requests and none reads a count another is about to change.

A count lives `window` seconds after the last time it was taken, then starts again from one.
"""

from __future__ import annotations

import time

from django.db import connection
from django.db.models import F

from mindsearch.models import LimitCounter

TABLE = LimitCounter._meta.db_table
Params = dict[str, float | int | str]

_TAKE = f"""
INSERT INTO {TABLE} AS c (key, count, last, expires) VALUES (%(key)s, 1, %(now)s, %(now)s + %(window)s)
ON CONFLICT (key) DO UPDATE SET
    count = CASE WHEN c.expires <= %(now)s THEN 1 ELSE c.count + 1 END,
    last = %(now)s,
    expires = %(now)s + %(window)s
WHERE c.expires <= %(now)s OR c.count < %(limit)s OR c.last + {{wait}} <= %(now)s
RETURNING count
"""  # noqa: S608 — only constants are formatted in

# Past `free`, each further take waits 1, 2, 4 … seconds after the last, up to `cap`.
_BACKOFF = "LEAST(%(cap)s, power(2, GREATEST(c.count - %(limit)s, 0)))"
# A plain limit: nothing more until the window ends.
_NEVER = "'infinity'::float8"


# A count that starts afresh clears away a few ended ones, skipping any another request holds.
_SWEEP = f"""
DELETE FROM {TABLE} WHERE id IN (
    SELECT id FROM {TABLE} WHERE expires <= %(now)s LIMIT 100 FOR UPDATE SKIP LOCKED
)
"""  # noqa: S608 — only constants are formatted in


def take(key: str, limit: int, window: float, now: float | None = None) -> bool:
    """One more within `limit` per `window` seconds: True and counted, or False and unchanged."""
    params: Params = {"key": key, "limit": limit, "window": window, "now": _now(now)}
    return _take(_TAKE.format(wait=_NEVER), params)


def _take(sql: str, params: Params) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
        if row is not None and row[0] == 1:
            cursor.execute(_SWEEP, params)
    return row is not None


def take_with_backoff(key: str, free: int, cap: float, window: float, now: float | None = None) -> float:
    """One more attempt: `free` at once, then one each 1, 2, 4 … up to `cap` seconds after the
    last. 0 when taken (and counted), else the seconds still to wait (unchanged)."""
    now = _now(now)
    params: Params = {"key": key, "limit": free, "cap": cap, "window": window, "now": now}
    if _take(_TAKE.format(wait=_BACKOFF), params):
        return 0.0
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.last + {_BACKOFF} - %(now)s FROM {TABLE} AS c WHERE c.key = %(key)s",  # noqa: S608
            params,
        )
        row = cursor.fetchone()
    return max(float(row[0]) if row else 0.0, 0.001)


def give_back(key: str) -> None:
    """Uncount one take (it turned out not to count, e.g. a sign-in that succeeded)."""
    LimitCounter.objects.filter(key=key, count__gt=0).update(count=F("count") - 1)
    LimitCounter.objects.filter(key=key, count__lte=0).delete()  # nothing left to count


def forget(key: str) -> None:
    LimitCounter.objects.filter(key=key).delete()


def _now(now: float | None) -> float:
    return time.time() if now is None else now
