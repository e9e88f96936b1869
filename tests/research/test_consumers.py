"""The topic websocket, in-process with Channels' WebsocketCommunicator on the real channel layer."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser, User

from research.models import Topic
from research.progress import record_event
from research.routing import websocket_urlpatterns

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"]),
    pytest.mark.anyio,
]

application = URLRouter(websocket_urlpatterns)


def communicator(topic: Topic, user: object, query: str = "") -> WebsocketCommunicator:
    path = f"/ws/topics/{topic.pk}/{query}"
    comm = WebsocketCommunicator(application, path)
    comm.scope["user"] = user
    comm.scope["cookies"] = {"csrftoken": "t" * 32}
    return comm


async def receive_all(comm: WebsocketCommunicator, quiet: float = 1.0) -> str:
    """Everything sent until the socket has been quiet for a while."""
    chunks = []
    while not await comm.receive_nothing(timeout=quiet):
        chunks.append(await comm.receive_from())
    return "".join(chunks)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def topic(alice: User) -> Topic:
    return Topic.objects.create(
        owner=alice, question="How do websockets replay?", status=Topic.Status.RUNNING
    )


def emit(topic: Topic, count: int, stage: str = "search") -> None:
    for n in range(count):
        record_event(topic, stage, f"step {n + 1}", done=n + 1, total=count)


async def test_owner_gets_the_missed_events_then_new_ones(topic: Topic, alice: User) -> None:
    await database_sync_to_async(emit)(topic, 3)
    comm = communicator(topic, alice)
    connected, _ = await comm.connect()
    assert connected
    await comm.send_json_to({"since": 1})
    replay = await receive_all(comm)
    assert 'data-seq="2"' in replay and 'data-seq="3"' in replay and 'data-seq="1"' not in replay
    assert 'id="progress"' in replay and 'id="hits"' in replay  # panels the events changed
    # The same HTML for every watcher: no CSRF token in it (static/js/topic.js adds the page's).
    assert 'id="plan"' in replay and "t" * 32 not in replay and "csrfmiddlewaretoken" not in replay
    await sync_to_async(record_event)(topic, "score_hits", "Scored 10 hits", done=10, total=20)
    live = await receive_all(comm)
    assert 'data-seq="4"' in live and "Scored 10 hits" in live
    await comm.disconnect()


async def test_nothing_is_sent_before_the_browser_says_where_it_is(topic: Topic, alice: User) -> None:
    await database_sync_to_async(emit)(topic, 2)
    comm = communicator(topic, alice)
    await comm.connect()
    await sync_to_async(record_event)(topic, "search", "more")
    assert await comm.receive_nothing(timeout=1.0)
    await comm.send_json_to({"since": 3})
    assert await comm.receive_nothing(timeout=1.0)
    await comm.disconnect()


async def test_a_query_parameter_replays_at_once(topic: Topic, alice: User) -> None:
    await database_sync_to_async(emit)(topic, 3)
    comm = communicator(topic, alice, "?since=0")
    await comm.connect()
    replay = await receive_all(comm)
    assert [f'data-seq="{n}"' in replay for n in (1, 2, 3)] == [True] * 3
    await comm.disconnect()


async def test_a_finished_topic_sends_its_report_panel(topic: Topic, alice: User) -> None:
    await database_sync_to_async(Topic.objects.filter(pk=topic.pk).update)(status=Topic.Status.COMPLETED)
    await sync_to_async(record_event)(topic, "done", "The report is ready")
    comm = communicator(topic, alice, "?since=0")
    await comm.connect()
    replay = await receive_all(comm)
    assert 'id="report"' in replay and 'id="topic-status"' in replay and "Completed" in replay
    await comm.disconnect()


@pytest.mark.parametrize("who", ["bob", "anonymous"])
async def test_others_are_refused(topic: Topic, bob: User, who: str) -> None:
    user = bob if who == "bob" else AnonymousUser()
    comm = communicator(topic, user)
    connected, code = await comm.connect()
    assert not connected and code == 4404


async def test_an_unknown_topic_is_refused_like_someone_elses(alice: User) -> None:
    comm = WebsocketCommunicator(application, "/ws/topics/999999/")
    comm.scope["user"] = alice
    connected, code = await comm.connect()
    assert not connected and code == 4404


async def test_garbage_from_the_client_is_ignored(topic: Topic, alice: User) -> None:
    comm = communicator(topic, alice)
    await comm.connect()
    await comm.send_to(text_data="not json")
    await comm.send_to(text_data='{"since": "x"}')
    await comm.send_to(text_data="[1, 2]")
    assert await comm.receive_nothing(timeout=0.5)
    await comm.disconnect()


async def test_updates_come_in_the_language_of_the_page(topic: Topic, alice: User) -> None:
    await sync_to_async(record_event)(topic, "score_hits", "Scored 10 hits", done=10, total=20)
    russian = communicator(topic, alice, "?since=0")
    russian.scope["cookies"]["django_language"] = "ru"
    english = communicator(topic, alice, "?since=0")
    english.scope["headers"] = [(b"accept-language", b"en-GB,en;q=0.9")]
    await russian.connect()
    await english.connect()
    in_russian, in_english = await receive_all(russian), await receive_all(english)
    assert "Оценка результатов" in in_russian and "Ход работы" in in_russian
    assert "Score hits" in in_english and "Progress" in in_english
    assert "Progress" not in in_russian
    await russian.disconnect()
    await english.disconnect()
