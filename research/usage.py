"""What the LLM cost and what the cache saved: recorded token counts turned into an estimate.

Prices are per 1,000 tokens from settings (`LLM_PRICE_INPUT_PER_1K`, `LLM_PRICE_OUTPUT_PER_1K`,
per-model `LLM_MODEL_PRICES`). A cache hit costs nothing, and its `LLMCall` row carries the
tokens of the original call, so what a hit saved is exactly what that call cost. Calls copied
in with an imported topic (`imported`) describe another account's run: they count for their
topic, never as anyone's spending or the cache's savings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from research.models import CacheCounter, CacheEntry, LLMCall, Topic

# One row per model and cache hit/miss: enough to price every call, in one query.
CALL_SUMS = {
    "calls": Count("id"),
    "failed": Count("id", filter=~Q(error="")),
    "prompt": Coalesce(Sum("prompt_tokens"), 0),
    "completion": Coalesce(Sum("completion_tokens"), 0),
}


@dataclass(frozen=True)
class Price:
    input_per_1k: float
    output_per_1k: float

    def of(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_1k + completion_tokens * self.output_per_1k) / 1000


def price_for(model: str) -> Price:
    """The model's listed price, else that of the longest listed name it starts with (a dated
    variant such as gpt-4o-mini-2024-07-18 costs what gpt-4o-mini does), else the default."""
    listed = settings.LLM_MODEL_PRICES
    names = [name for name in listed if model == name or model.startswith(name)]
    if names:
        return Price(*listed[max(names, key=len)])
    return Price(settings.LLM_PRICE_INPUT_PER_1K, settings.LLM_PRICE_OUTPUT_PER_1K)


def prices_configured() -> bool:
    defaults = (settings.LLM_PRICE_INPUT_PER_1K, settings.LLM_PRICE_OUTPUT_PER_1K)
    return any(defaults) or any(any(pair) for pair in settings.LLM_MODEL_PRICES.values())


@dataclass
class Usage:
    """Calls and tokens paid for, and those a cache hit answered instead (saved)."""

    calls: int = 0
    cached_calls: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    saved_tokens: int = 0
    saved_cost: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, row: dict[str, Any]) -> None:
        """Fold in one aggregate row of `CALL_SUMS` grouped by model and cache_hit."""
        cost = price_for(row["model"]).of(row["prompt"], row["completion"])
        if row["cache_hit"]:
            self.cached_calls += row["calls"]
            self.saved_tokens += row["prompt"] + row["completion"]
            self.saved_cost += cost
            return
        self.calls += row["calls"]
        self.failed_calls += row["failed"]
        self.prompt_tokens += row["prompt"]
        self.completion_tokens += row["completion"]
        self.cost += cost


def summarise(calls: QuerySet[LLMCall]) -> Usage:
    usage = Usage()
    for row in calls.values("model", "cache_hit").annotate(**CALL_SUMS).order_by():
        usage.add(row)
    return usage


def topic_usage(topic: Topic) -> Usage:
    """What the topic's run cost, imported records included: they are this topic's history."""
    return summarise(LLMCall.objects.filter(topic=topic))


def period_start(days: int | None) -> datetime | None:
    """Midnight (in the site's time zone) at the start of the last `days` days; None = all time."""
    if not days:
        return None
    first_day = timezone.localdate() - timedelta(days=days - 1)
    return timezone.make_aware(datetime.combine(first_day, time.min))


def spent_calls(since: datetime | None) -> QuerySet[LLMCall]:
    calls = LLMCall.objects.filter(imported=False)
    return calls.filter(created_at__gte=since) if since else calls


@dataclass
class Spender:
    key: Any
    label: str
    usage: Usage = field(default_factory=Usage)
    extra: dict[str, Any] = field(default_factory=dict)


def spend_by_user(since: datetime | None, username: str = "") -> list[Spender]:
    """Each user's calls, tokens and cost since `since`, the biggest spender first."""
    calls = spent_calls(since)
    if username:
        calls = calls.filter(user__username__icontains=username)
    rows = calls.values("user", "user__username", "model", "cache_hit").annotate(**CALL_SUMS).order_by()
    spenders = _group(rows, "user", "user__username")
    topics = calls.values("user").annotate(n=Count("topic", distinct=True)).order_by()
    for row in topics:
        spenders[row["user"]].extra["topics"] = row["n"]
    return _by_spend(spenders)


def spend_by_topic(since: datetime | None, limit: int = 50) -> list[Spender]:
    """The costliest topics since `since`, with their owners."""
    calls = spent_calls(since).filter(topic__isnull=False)
    rows = calls.values("topic", "topic__question", "topic__owner__username", "model", "cache_hit")
    spenders = _group(rows.annotate(**CALL_SUMS).order_by(), "topic", "topic__question")
    return _by_spend(spenders)[:limit]


def _group(rows: QuerySet, key: str, label: str) -> dict[Any, Spender]:
    spenders: dict[Any, Spender] = {}
    for row in rows:
        spender = spenders.setdefault(row[key], Spender(row[key], row[label] or ""))
        spender.usage.add(row)
        if "topic__owner__username" in row:
            spender.extra["owner"] = row["topic__owner__username"]
    return spenders


def _by_spend(spenders: dict[Any, Spender]) -> list[Spender]:
    return sorted(spenders.values(), key=lambda s: (-s.usage.cost, -s.usage.total_tokens, s.label))


@dataclass
class KindStats:
    """One cache kind: what it holds now, and its lookups and savings over a period."""

    kind: str
    label: str
    entries: int = 0
    bytes: int = 0
    expired: int = 0
    new: int = 0
    hits: int = 0
    misses: int = 0
    saved: Usage = field(default_factory=Usage)

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.lookups if self.lookups else None

    def add(self, other: KindStats) -> None:
        for name in ("entries", "bytes", "expired", "new", "hits", "misses"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.saved.cached_calls += other.saved.cached_calls
        self.saved.saved_tokens += other.saved.saved_tokens
        self.saved.saved_cost += other.saved.saved_cost


def cache_report(since: datetime | None) -> tuple[list[KindStats], KindStats]:
    """Per kind and in total: live entries and bytes, expired ones awaiting purge, entries made
    since `since`, hits and misses since then, and the external calls, tokens and cost the hits
    saved. Every hit saved one external call (a search, a page read or an LLM call); the tokens
    and cost are those recorded for the LLM calls that hits answered."""
    rows = {kind: KindStats(kind, str(label)) for kind, label in CacheEntry.Kind.choices}
    _add_entries(rows, since)
    counters = CacheCounter.objects.all()
    if since:
        counters = counters.filter(day__gte=timezone.localdate(since))
    for row in counters.values("kind").annotate(hits=Sum("hits"), misses=Sum("misses")).order_by():
        if row["kind"] in rows:
            rows[row["kind"]].hits, rows[row["kind"]].misses = row["hits"], row["misses"]
    hits = spent_calls(since).filter(cache_hit=True)
    for row in hits.values("cache_kind", "model", "cache_hit").annotate(**CALL_SUMS).order_by():
        if row["cache_kind"] in rows:
            rows[row["cache_kind"]].saved.add(row)
    total = KindStats("", "")
    for kind in rows.values():
        total.add(kind)
    return list(rows.values()), total


def _add_entries(rows: dict[str, KindStats], since: datetime | None) -> None:
    now = timezone.now()
    live, expired = Q(expires_at__gt=now), Q(expires_at__lte=now)
    new = Q(created_at__gte=since) if since else Q()
    entries = CacheEntry.objects.values("kind").annotate(
        entries=Count("id", filter=live),
        size=Coalesce(Sum("size_bytes", filter=live), 0),
        expired=Count("id", filter=expired),
        new=Count("id", filter=new),
    )
    for row in entries.order_by():
        stats = rows.get(row["kind"])
        if stats is None:
            continue
        stats.entries, stats.bytes, stats.expired, stats.new = (
            row["entries"],
            row["size"],
            row["expired"],
            row["new"],
        )
