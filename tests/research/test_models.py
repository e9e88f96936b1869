"""Research rows: per-user scoping, event numbering, scores, share links and the shared cache."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.models import AnonymousUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from research.models import (
    CacheEntry,
    Hit,
    HitScore,
    LLMCall,
    RunEvent,
    ShareLink,
    SubQuery,
    Topic,
)
from research.progress import record_event, topic_group


@pytest.fixture
def topic(alice):
    return Topic.objects.create(owner=alice, question="Does Mixture of Tokens beat Mixture of Experts?")


@pytest.fixture
def bobs_topic(bob):
    return Topic.objects.create(owner=bob, question="What is pgvector's HNSW index?")


@pytest.fixture
def subquery(topic):
    return SubQuery.objects.create(topic=topic, text="Mixture of Tokens benchmarks")


def make_hit(subquery: SubQuery, normalized_url: str = "example.com/paper") -> Hit:
    return Hit.objects.create(
        topic=subquery.topic,
        subquery=subquery,
        url=f"https://{normalized_url}",
        normalized_url=normalized_url,
    )


# --- Scoping to a user --------------------------------------------------------------------------


def test_topics_for_user_are_their_own(topic, bobs_topic, alice):
    assert list(Topic.objects.for_user(alice)) == [topic]


def test_topics_for_anonymous_user_are_none(topic):
    assert not Topic.objects.for_user(AnonymousUser()).exists()


def share_link_for(topic: Topic) -> ShareLink:
    return ShareLink.issue(topic)[0]


def run_event_for(topic: Topic) -> RunEvent:
    return RunEvent.objects.create(topic=topic, seq=1, stage="plan", message="Planning")


def llm_call_for(topic: Topic) -> LLMCall:
    return LLMCall.objects.create(user=topic.owner, topic=topic, stage="plan", model="test-model")


ROWS_OF_A_TOPIC = pytest.mark.parametrize(
    "make_row", [share_link_for, run_event_for, llm_call_for], ids=["ShareLink", "RunEvent", "LLMCall"]
)


@ROWS_OF_A_TOPIC
def test_rows_for_user_are_from_their_own_topics(make_row, topic, bobs_topic, alice):
    alices_row = make_row(topic)
    make_row(bobs_topic)
    assert list(type(alices_row).objects.for_user(alice)) == [alices_row]


@ROWS_OF_A_TOPIC
def test_rows_for_anonymous_user_are_none(make_row, topic):
    row = make_row(topic)
    assert not type(row).objects.for_user(AnonymousUser()).exists()


# --- Topic state and progress events ------------------------------------------------------------


def test_topic_fail_records_error_and_finish(topic):
    topic.fail("boom")
    topic.refresh_from_db()
    assert topic.status == Topic.Status.FAILED
    assert topic.error == "boom"
    assert topic.finished_at is not None
    assert topic.is_finished


def test_next_event_seq_counts_up_from_one(topic):
    assert [topic.next_event_seq() for _ in range(3)] == [1, 2, 3]
    topic.refresh_from_db()
    assert topic.last_event_seq == 3


def test_next_event_seq_is_one_statement(topic, django_assert_num_queries):
    """Nearly every step of a run writes an event: its number costs one round trip."""
    with django_assert_num_queries(1):
        assert topic.next_event_seq() == 1
    topic.refresh_from_db()
    assert topic.heartbeat_at is not None


def test_next_event_seq_of_a_deleted_topic_raises(topic):
    Topic.objects.filter(pk=topic.pk).delete()
    with pytest.raises(Topic.DoesNotExist):
        topic.next_event_seq()


def test_record_event_saves_rows_in_sequence(topic, caplog):
    with caplog.at_level(logging.ERROR, logger="research.progress"):
        for n in range(3):
            record_event(topic, "search", f"Searched {n + 1} of 3", done=n + 1, total=3)
    events = RunEvent.objects.filter(topic=topic)
    assert [(e.seq, e.done, e.total) for e in events] == [(1, 1, 3), (2, 2, 3), (3, 3, 3)]
    assert caplog.records == []  # publishing to the channel layer did not fail


async def receive_one(channel: str) -> dict:
    return await asyncio.wait_for(get_channel_layer().receive(channel), timeout=10)


def test_record_event_notifies_the_topic_group(topic):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(topic_group(topic.pk), channel)
    event = record_event(topic, "plan", "Planning")
    message = async_to_sync(receive_one)(channel)
    assert message == {"type": "run.event", "event_id": event.pk, "seq": event.seq}


# --- Hits and their scores ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("criteria", "total"),
    [((7, 8, 9, 6, 5), 7.0), ((7, 7, 8, 8, 9), 7.8), ((10, 10, 10, 10, 9), 9.8)],
)
def test_hit_score_total_is_mean_of_criteria(subquery, criteria, total):
    score = HitScore.objects.create(
        hit=make_hit(subquery), **dict(zip(HitScore.CRITERIA, criteria, strict=True))
    )
    score.refresh_from_db()
    assert score.total == total


def test_hit_url_is_unique_per_topic(subquery):
    make_hit(subquery)
    with pytest.raises(IntegrityError), transaction.atomic():
        make_hit(subquery)


def test_same_hit_url_in_another_topic_is_fine(subquery, bobs_topic):
    make_hit(subquery)
    other = SubQuery.objects.create(topic=bobs_topic, text="HNSW")
    make_hit(other)
    assert Hit.objects.filter(normalized_url="example.com/paper").count() == 2


# --- Share links --------------------------------------------------------------------------------


def test_share_link_stores_only_the_token_hash(topic):
    link, token = ShareLink.issue(topic)
    link.refresh_from_db()
    assert token not in link.token_hash
    assert link.token_hash == hashlib.sha256(token.encode()).hexdigest()


def test_share_link_is_found_by_its_token(topic):
    link, token = ShareLink.issue(topic)
    assert ShareLink.objects.find(token) == link


def test_share_link_is_not_found_by_wrong_token(topic):
    ShareLink.issue(topic)
    assert ShareLink.objects.find(secrets.token_urlsafe(32)) is None


def test_revoked_share_link_is_not_found(topic):
    link, token = ShareLink.issue(topic)
    link.revoke()
    assert ShareLink.objects.find(token) is None


def test_expired_share_link_is_not_found(topic):
    _link, token = ShareLink.issue(topic, expires_in=timedelta(seconds=-1))
    assert ShareLink.objects.find(token) is None


def test_share_link_before_expiry_is_found(topic):
    link, token = ShareLink.issue(topic, expires_in=timedelta(hours=1))
    assert ShareLink.objects.find(token) == link


# --- Cache entries ------------------------------------------------------------------------------


def cache_entry(owner=None, key: str = "query", expires_in: timedelta = timedelta(days=1)) -> CacheEntry:
    return CacheEntry.objects.create(
        kind=CacheEntry.Kind.SEARCH_RESULTS,
        key_hash=hashlib.sha256(key.encode()).hexdigest(),
        owner=owner,
        payload={"results": []},
        expires_at=timezone.now() + expires_in,
    )


def test_shared_cache_key_is_unique_even_without_owner(db):
    cache_entry(owner=None)
    with pytest.raises(IntegrityError), transaction.atomic():
        cache_entry(owner=None)


def test_cache_key_is_unique_per_owner(alice):
    cache_entry(owner=alice)
    with pytest.raises(IntegrityError), transaction.atomic():
        cache_entry(owner=alice)


def test_same_cache_key_for_two_owners_is_fine(alice, bob):
    cache_entry(owner=alice)
    cache_entry(owner=bob)
    cache_entry(owner=None)
    assert CacheEntry.objects.count() == 3


def test_cache_entries_split_into_live_and_expired(db):
    live = cache_entry(key="fresh")
    stale = cache_entry(key="stale", expires_in=timedelta(seconds=-1))
    assert list(CacheEntry.objects.live()) == [live]
    assert list(CacheEntry.objects.expired()) == [stale]


def test_cache_entries_visible_to_user_are_shared_and_their_own(alice, bob):
    shared = cache_entry(key="shared")
    alices = cache_entry(owner=alice, key="alice's")
    cache_entry(owner=bob, key="bob's")
    assert set(CacheEntry.objects.visible_to(alice)) == {shared, alices}


def test_cache_entries_visible_to_anonymous_user_are_shared_only(alice):
    shared = cache_entry(key="shared")
    cache_entry(owner=alice, key="alice's")
    assert list(CacheEntry.objects.visible_to(AnonymousUser())) == [shared]
