"""An event published by a task in a real qcluster reaches a websocket on a real daphne.

Run once over the PostgreSQL LISTEN/NOTIFY layer (the embedded default) and once over Redis.
"""

from __future__ import annotations

import asyncio
import re

import pytest
import redis
from django.contrib.auth.models import User
from django.test import Client
from django_q.tasks import async_task
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from research.models import RunEvent, Topic
from tests.support import processes

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

EVENT = re.compile(r'data-seq="(\d+)"')


def session_cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def receive_seqs(ws: ClientConnection, until: int, timeout: float = 30) -> list[int]:
    seqs: list[int] = []
    async with asyncio.timeout(timeout):
        while not seqs or seqs[-1] < until:
            message = await ws.recv(decode=True)
            seqs.extend(int(seq) for seq in EVENT.findall(message))
    return seqs


async def stream_from_worker(host: str, cookie: str, topic: Topic) -> None:
    origin = Origin(f"http://{host}")
    url = f"ws://{host}/ws/topics/{topic.pk}/"
    # A script states where it starts in the URL; a browser says so in its first message.
    async with connect(f"{url}?since=0", additional_headers={"Cookie": cookie}, origin=origin) as ws:
        # Two tasks in a row: the worker process keeps sending after its first task ended.
        await asyncio.to_thread(async_task, "tests.support.tasks.publish_events", topic.pk, 1, 20)
        assert await receive_seqs(ws, 20) == list(range(1, 21))
        await asyncio.to_thread(async_task, "tests.support.tasks.publish_events", topic.pk, 21, 20)
        assert await receive_seqs(ws, 40) == list(range(21, 41))
    # A client that reconnects says what it has seen and gets only what it missed.
    async with connect(f"{url}?since=35", additional_headers={"Cookie": cookie}, origin=origin) as ws:
        assert await receive_seqs(ws, 40) == [36, 37, 38, 39, 40]


async def assert_refused(url: str, cookie: str | None, origin: Origin) -> None:
    headers = {"Cookie": cookie} if cookie else {}
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, additional_headers=headers, origin=origin):
            pass
    assert refused.value.response.status_code == 403


def run_live_progress(env: dict[str, str], alice: User, bob: User) -> None:
    topic = Topic.objects.create(owner=alice, question="How do channel layers cross processes?")
    with processes.daphne(env) as host, processes.qcluster(env):
        asyncio.run(stream_from_worker(host, session_cookie(alice), topic))
        url = f"ws://{host}/ws/topics/{topic.pk}/"
        asyncio.run(assert_refused(url, session_cookie(bob), Origin(f"http://{host}")))
        asyncio.run(assert_refused(url, None, Origin(f"http://{host}")))
        asyncio.run(assert_refused(url, session_cookie(alice), Origin("http://evil.example")))
    assert list(RunEvent.objects.filter(topic=topic).values_list("seq", flat=True)) == list(range(1, 41))


def test_postgres_layer_carries_worker_events_to_websocket(alice: User, bob: User) -> None:
    run_live_progress(processes.process_env(), alice, bob)


def test_redis_layer_carries_worker_events_to_websocket(alice: User, bob: User, redis_base: str) -> None:
    url = f"{redis_base}/15"
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        run_live_progress(processes.process_env(REDIS_URL=url), alice, bob)
    finally:
        client.flushdb()
