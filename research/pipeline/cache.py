"""The LLM, search and reader cache as `CacheEntry` rows: get and put by kind and a hash of the inputs.

Keys include everything that changes the answer (inputs, model, prompt version), so a changed
prompt or model never serves a stale payload. Payloads derived from a user's private documents
are stored with `owner` and are only ever served back to that owner.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from research.models import CacheCounter, CacheEntry

Kind = CacheEntry.Kind


def make_key(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def get(
    kind: str, key: str, owner_id: int | None = None, *, newer_than: datetime | None = None
) -> Any | None:
    """The payload stored under the key, or None. `newer_than` refuses older entries: a new
    version of a topic (research/versions.py) searches and reads the web again, as of its run."""
    entries = CacheEntry.objects.live().filter(kind=kind, key_hash=key, owner_id=owner_id)
    if newer_than is not None:
        entries = entries.filter(created_at__gte=newer_than)
    entry = entries.first()
    _count(kind, hit=entry is not None)
    if entry is None:
        return None
    CacheEntry.objects.filter(pk=entry.pk).update(hit_count=F("hit_count") + 1, last_hit_at=timezone.now())
    return entry.payload


def put(
    kind: str,
    key: str,
    payload: Any,
    *,
    owner_id: int | None = None,
    description: str = "",
    ttl: timedelta | None = None,
) -> None:
    size = len(json.dumps(payload, ensure_ascii=False, default=str).encode())
    CacheEntry.objects.update_or_create(
        kind=kind,
        key_hash=key,
        owner_id=owner_id,
        defaults={
            "payload": payload,
            "size_bytes": size,
            "description": description[:300],
            "created_at": timezone.now(),
            "expires_at": timezone.now() + (ttl or timedelta(days=settings.CACHE_TTL_DAYS)),
        },
    )


def purge_expired() -> int:
    deleted, _ = CacheEntry.objects.expired().delete()
    return deleted


def stats() -> dict[str, dict[str, int | float]]:
    """Per kind: live entries, bytes, hits and misses of lookups, and the hit rate."""
    rows = {kind: {"entries": 0, "bytes": 0, "hits": 0, "misses": 0, "hit_rate": 0.0} for kind in Kind.values}
    live = (
        CacheEntry.objects.live().values("kind").annotate(n=Count("id"), size=Coalesce(Sum("size_bytes"), 0))
    )
    for row in live:
        rows[row["kind"]].update(entries=row["n"], bytes=row["size"])
    counters = CacheCounter.objects.values("kind").annotate(hits=Sum("hits"), misses=Sum("misses"))
    for counter in counters:
        lookups = counter["hits"] + counter["misses"]
        rows[counter["kind"]].update(
            hits=counter["hits"],
            misses=counter["misses"],
            hit_rate=round(counter["hits"] / lookups, 3) if lookups else 0.0,
        )
    return rows


def _count(kind: str, *, hit: bool) -> None:
    field = "hits" if hit else "misses"
    today = timezone.localdate()
    updated = CacheCounter.objects.filter(kind=kind, day=today).update(**{field: F(field) + 1})
    if not updated:
        counter, _ = CacheCounter.objects.get_or_create(kind=kind, day=today)
        CacheCounter.objects.filter(pk=counter.pk).update(**{field: F(field) + 1})
