"""Usage accounting: prices per 1k tokens from settings, a topic's tokens and estimated cost, each
user's spending over a period, and what the cache saved."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from mindsearch.env import env_prices
from research import usage
from research.models import CacheCounter, CacheEntry, LLMCall, SearchQuery, Topic
from research.pipeline import cache
from research.pipeline.run import plan_topic, run_topic
from tests.support.world import TOPIC, World

pytestmark = pytest.mark.django_db

Kind = CacheEntry.Kind


@pytest.fixture
def prices(settings: Any) -> None:
    settings.LLM_PRICE_INPUT_PER_1K = 0.5
    settings.LLM_PRICE_OUTPUT_PER_1K = 2.0
    settings.LLM_MODEL_PRICES = {"big": (10.0, 30.0), "big-mini": (1.0, 3.0)}
    settings.LLM_PRICE_CURRENCY = "EUR"


@pytest.fixture
def no_prices(settings: Any) -> None:
    settings.LLM_PRICE_INPUT_PER_1K = 0.0
    settings.LLM_PRICE_OUTPUT_PER_1K = 0.0
    settings.LLM_MODEL_PRICES = {}


def call(user: User | None, topic: Topic | None, **fields: Any) -> LLMCall:
    fields = {"stage": "summarise", "model": "small", "cache_kind": Kind.SUMMARIES, **fields}
    return LLMCall.objects.create(user=user, topic=topic, **fields)


def topic_of(owner: User, **fields: Any) -> Topic:
    fields = {"question": "What is MoT?", "status": Topic.Status.COMPLETED, **fields}
    return Topic.objects.create(owner=owner, **fields)


# --- Prices ------------------------------------------------------------------------------------------


def test_a_model_is_priced_by_its_own_name_its_longest_prefix_or_the_default(prices: None) -> None:
    assert usage.price_for("big") == usage.Price(10.0, 30.0)
    assert usage.price_for("big-mini-2024-07-18") == usage.Price(1.0, 3.0)  # not "big"
    assert usage.price_for("big-2025") == usage.Price(10.0, 30.0)
    assert usage.price_for("small") == usage.Price(0.5, 2.0)
    assert usage.price_for("small").of(2000, 500) == pytest.approx(2.0)
    assert usage.prices_configured()


def test_without_prices_nothing_is_priced(no_prices: None) -> None:
    assert not usage.prices_configured()
    assert usage.price_for("anything").of(10_000, 10_000) == 0


def test_model_prices_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRICES", "gpt-4o-mini=0.00015/0.0006, openai/gpt-4o=0.0025/0.01,llama3.1:8b=0/0")
    assert env_prices("PRICES") == {
        "gpt-4o-mini": (0.00015, 0.0006),
        "openai/gpt-4o": (0.0025, 0.01),
        "llama3.1:8b": (0.0, 0.0),
    }
    monkeypatch.delenv("PRICES")
    assert env_prices("PRICES") == {}
    for wrong in ("gpt-4o=0.1", "gpt-4o=a/b", "=0.1/0.2", "gpt-4o"):
        monkeypatch.setenv("PRICES", wrong)
        with pytest.raises(ImproperlyConfigured, match="PRICES"):
            env_prices("PRICES")


# --- A topic ------------------------------------------------------------------------------------------


def test_a_topics_usage_counts_paid_cached_and_failed_calls_in_one_query(
    alice: User, prices: None, django_assert_num_queries: Any
) -> None:
    topic = topic_of(alice)
    call(alice, topic, prompt_tokens=1000, completion_tokens=500)  # 0.5 + 1.0
    call(alice, topic, model="big", prompt_tokens=100, completion_tokens=100)  # 1.0 + 3.0
    call(alice, topic, prompt_tokens=4000, completion_tokens=1000, cache_hit=True)  # saved 2.0 + 2.0
    call(alice, topic, error="timeout", attempts=3)
    call(alice, topic_of(alice), prompt_tokens=99_999)  # another topic
    with django_assert_num_queries(1):
        spent = usage.topic_usage(topic)
    assert (spent.calls, spent.cached_calls, spent.failed_calls) == (3, 1, 1)
    assert (spent.prompt_tokens, spent.completion_tokens, spent.total_tokens) == (1100, 600, 1700)
    assert spent.cost == pytest.approx(5.5)
    assert (spent.saved_tokens, spent.saved_cost) == (5000, pytest.approx(4.0))


def test_the_topic_page_shows_tokens_and_the_estimated_cost(
    alice: User, alice_client: Client, prices: None
) -> None:
    topic = topic_of(alice)
    call(alice, topic, prompt_tokens=1000, completion_tokens=500)
    call(alice, topic, prompt_tokens=1000, completion_tokens=500, cache_hit=True)
    html = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "LLM: 1 calls (1 from cache), 1000 prompt + 500 completion tokens." in html
    assert "Estimated cost: 1.5000 EUR." in html


def test_without_prices_the_topic_page_says_so(alice: User, alice_client: Client, no_prices: None) -> None:
    topic = topic_of(alice)
    call(alice, topic, prompt_tokens=1000, completion_tokens=500)
    html = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "No LLM prices are configured, so no cost is estimated." in html
    assert "Estimated cost" not in html


# --- Users and periods ------------------------------------------------------------------------------


def test_spend_by_user_over_a_period(alice: User, bob: User, prices: None) -> None:
    alice_topic, bob_topic = topic_of(alice), topic_of(bob)
    call(alice, alice_topic, prompt_tokens=2000)  # 1.0
    call(alice, topic_of(alice), completion_tokens=1000)  # 2.0
    old = call(alice, alice_topic, prompt_tokens=100_000)
    LLMCall.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=10))
    call(bob, bob_topic, model="big", prompt_tokens=1000)  # 10.0
    call(bob, bob_topic, prompt_tokens=50_000, imported=True)  # alice's record, not bob's spending
    call(bob, bob_topic, prompt_tokens=2000, cache_hit=True)  # saved 1.0

    week = usage.spend_by_user(usage.period_start(7))
    assert [s.label for s in week] == ["bob", "alice"]
    bob_spend, alice_spend = week
    assert (bob_spend.usage.calls, bob_spend.usage.cost, bob_spend.usage.saved_cost) == (1, 10.0, 1.0)
    assert (alice_spend.usage.calls, alice_spend.usage.cost, alice_spend.extra["topics"]) == (2, 3.0, 2)
    assert alice_spend.usage.prompt_tokens == 2000

    ever = {s.label: s.usage for s in usage.spend_by_user(None)}
    assert ever["alice"].cost == pytest.approx(53.0) and ever["bob"].cost == 10.0
    assert [s.label for s in usage.spend_by_user(None, "ali")] == ["alice"]


def test_the_period_starts_at_midnight_days_back() -> None:
    start = usage.period_start(7)
    assert timezone.localtime(start).time().isoformat() == "00:00:00"
    assert timezone.localdate(start) == timezone.localdate() - timedelta(days=6)
    day = usage.period_start(1)
    assert day is not None and day.date() == timezone.localdate() and usage.period_start(0) is None


def test_the_costliest_topics(alice: User, bob: User, prices: None) -> None:
    cheap, dear = topic_of(alice), topic_of(bob, question="Dear")
    call(alice, cheap, prompt_tokens=1000)
    call(bob, dear, model="big", prompt_tokens=1000)
    topics = usage.spend_by_topic(None)
    assert [(t.key, t.extra["owner"], t.usage.cost) for t in topics] == [
        (dear.pk, "bob", 10.0),
        (cheap.pk, "alice", 0.5),
    ]


# --- The cache -------------------------------------------------------------------------------------------


def test_cache_lookups_are_counted_per_day() -> None:
    cache.put(Kind.DOCS, "k", {"markdown": "x"})
    cache.get(Kind.DOCS, "k")
    cache.get(Kind.DOCS, "missing")
    today = CacheCounter.objects.get(kind=Kind.DOCS, day=timezone.localdate())
    assert (today.hits, today.misses) == (1, 1)
    CacheCounter.objects.create(
        kind=Kind.DOCS, day=timezone.localdate() - timedelta(days=30), hits=5, misses=3
    )
    assert cache.stats()[Kind.DOCS]["hits"] == 6 and cache.stats()[Kind.DOCS]["misses"] == 4
    week, _total = usage.cache_report(usage.period_start(7))
    docs = next(row for row in week if row.kind == Kind.DOCS)
    assert (docs.hits, docs.misses, docs.lookups, docs.hit_rate) == (1, 1, 2, 0.5)
    ever, _ = usage.cache_report(None)
    assert next(row for row in ever if row.kind == Kind.DOCS).hits == 6


def test_cache_report_entries_bytes_and_expired() -> None:
    cache.put(Kind.SEARCH_RESULTS, "a", {"results": [1]})
    cache.put(Kind.SEARCH_RESULTS, "b", {"results": [2, 3]})
    cache.put(Kind.SEARCH_RESULTS, "old", {"results": []})
    CacheEntry.objects.filter(key_hash="old").update(expires_at=timezone.now() - timedelta(seconds=1))
    rows, total = usage.cache_report(None)
    search = next(row for row in rows if row.kind == Kind.SEARCH_RESULTS)
    live_bytes = sum(CacheEntry.objects.live().values_list("size_bytes", flat=True))
    assert (search.entries, search.bytes, search.expired, search.new) == (2, live_bytes, 1, 3)
    assert (total.entries, total.expired) == (2, 1)
    assert {row.kind for row in rows} == set(Kind.values)


def research(owner: User) -> Topic:
    topic = Topic.objects.create(owner=owner, question=TOPIC, auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED, topic.error
    return topic


def test_what_a_repeated_topic_saved(alice: User, bob: User, loopback: World, prices: None) -> None:
    first = research(alice)
    paid = usage.topic_usage(first)
    before = {row.kind: row.hits for row in usage.cache_report(None)[0]}
    second = research(bob)
    rows, total = usage.cache_report(usage.period_start(7))
    by_kind = {row.kind: row for row in rows}

    again = usage.topic_usage(second)
    assert again.calls == 0 and again.cost == 0 and again.cached_calls == paid.calls
    assert total.saved.saved_tokens == paid.total_tokens > 0
    assert total.saved.saved_cost == pytest.approx(paid.cost) and paid.cost > 0
    llm_kinds = (
        Kind.SEARCH_QUERIES,
        Kind.RANKED_RESULTS,
        Kind.SUMMARIES,
        Kind.RANKED_SUMMARIES,
        Kind.ANSWERS,
    )
    for kind in llm_kinds:
        saved_calls = LLMCall.objects.filter(topic=second, cache_kind=kind).count()
        assert by_kind[kind].saved.cached_calls == saved_calls > 0, kind
        assert by_kind[kind].hits - before[kind] == saved_calls, kind
    # Searches and page reads saved: one hit per search query and per page of the second topic.
    searches = SearchQuery.objects.filter(subquery__topic=second).count()
    assert by_kind[Kind.SEARCH_RESULTS].hits - before[Kind.SEARCH_RESULTS] == searches > 0
    assert by_kind[Kind.DOCS].hits > before[Kind.DOCS]
    bob_spend = usage.spend_by_user(usage.period_start(1), "bob")[0].usage
    assert (bob_spend.cost, bob_spend.saved_cost) == (0, pytest.approx(paid.cost))
