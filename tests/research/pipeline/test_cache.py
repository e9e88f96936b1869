"""The result cache: get/put by kind and key, owner isolation, expiry, purge and statistics."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from research.models import CacheEntry
from research.pipeline import cache

pytestmark = pytest.mark.django_db

Kind = CacheEntry.Kind


def test_a_put_is_got_back_and_counted() -> None:
    key = cache.make_key("search", "mixture of tokens", "en")
    assert cache.get(Kind.SEARCH_RESULTS, key) is None
    cache.put(Kind.SEARCH_RESULTS, key, {"results": [1, 2]})
    assert cache.get(Kind.SEARCH_RESULTS, key) == {"results": [1, 2]}
    entry = CacheEntry.objects.get(key_hash=key)
    assert entry.hit_count == 1 and entry.size_bytes == len('{"results": [1, 2]}')
    stats = cache.stats()[Kind.SEARCH_RESULTS]
    assert (stats["entries"], stats["hits"], stats["misses"], stats["hit_rate"]) == (1, 1, 1, 0.5)


def test_keys_differ_with_any_input() -> None:
    assert cache.make_key("a", 1, {"x": 2}) == cache.make_key("a", 1, {"x": 2})
    assert cache.make_key("a", 1) != cache.make_key("a", 2)


def test_private_entries_are_only_served_to_their_owner(alice: User, bob: User) -> None:
    key = cache.make_key("summary of a private document")
    cache.put(Kind.SUMMARIES, key, "alice's notes", owner_id=alice.pk)
    assert cache.get(Kind.SUMMARIES, key, alice.pk) == "alice's notes"
    assert cache.get(Kind.SUMMARIES, key, bob.pk) is None
    assert cache.get(Kind.SUMMARIES, key) is None


def test_expired_entries_are_not_served_and_are_purged(settings: Any) -> None:
    settings.CACHE_TTL_DAYS = 30
    cache.put(Kind.DOCS, "old", {"markdown": "x"})
    cache.put(Kind.DOCS, "new", {"markdown": "y"})
    CacheEntry.objects.filter(key_hash="old").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert cache.get(Kind.DOCS, "old") is None
    assert CacheEntry.objects.get(key_hash="new").expires_at > timezone.now() + timedelta(days=29)
    call_command("purge_cache")
    assert list(CacheEntry.objects.values_list("key_hash", flat=True)) == ["new"]


def test_a_put_again_refreshes_payload_and_expiry() -> None:
    cache.put(Kind.ANSWERS, "k", "first", ttl=timedelta(hours=1))
    cache.put(Kind.ANSWERS, "k", "second")
    entry = CacheEntry.objects.get(key_hash="k")
    assert entry.payload == "second" and entry.expires_at > timezone.now() + timedelta(days=1)


def test_stats_list_every_kind_even_when_empty(capsys: pytest.CaptureFixture) -> None:
    assert set(cache.stats()) == set(Kind.values)
    call_command("purge_cache", "--stats")
    out = capsys.readouterr().out
    assert all(kind in out for kind in Kind.values)
