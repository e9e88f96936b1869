"""The two places that override a third party's channel code, and why each is still needed.

Each test first shows the package's own behaviour that the override works around, so it fails
when Channels or channels-postgres changes underneath (the override is then either useless —
remove it — or no longer called — rewrite it), and then shows the override doing its job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from channels.consumer import AsyncConsumer
from channels_postgres.core import PostgresChannelLayer as PackageLayer
from django.conf import settings

from mindsearch.channel_layers import PostgresChannelLayer
from research.consumers import TopicProgressConsumer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Each trip Channels makes to the database thread before handing a message over."""
    made: list[str] = []

    async def counted() -> None:
        made.append("close_old_connections")

    monkeypatch.setattr("channels.consumer.aclose_old_connections", counted)
    yield made


class Plain(AsyncConsumer):
    async def run_event(self, message: dict[str, Any]) -> None:
        pass


async def test_channels_makes_a_database_trip_per_message_which_run_events_skip(trips: list[str]) -> None:
    # Channels' own dispatch: one trip to the (single) database thread per message. At 200
    # sockets on a topic that is 200 trips per event (delivery p95 237 ms instead of 108 ms in
    # bench/web.py, docs/BENCHMARKS.md); the shared watchers read the database once for all sockets instead.
    await Plain().dispatch({"type": "run.event", "seq": 1})
    assert trips == ["close_old_connections"]

    consumer = TopicProgressConsumer()
    consumer.last_seq = None  # not yet told where the client is: the event is only dispatched
    await consumer.dispatch({"type": "run.event", "seq": 1})
    assert trips == ["close_old_connections"]  # none for a run event
    consumer.last_seq = None
    await consumer.dispatch({"type": "report.draft", "version": 1})
    assert trips == ["close_old_connections"] * 2  # other messages still go through Channels


def _layer(cls: type[PackageLayer]) -> PackageLayer:
    return cls(**settings.CHANNEL_LAYERS["default"]["CONFIG"])


async def _listeners_started(cls: type[PackageLayer], monkeypatch: pytest.MonkeyPatch) -> int:
    """How many LISTEN tasks eight receive()s on a fresh layer start before the first is up."""
    started: list[int] = []
    release = asyncio.Event()

    async def listen(self: PackageLayer) -> None:
        started.append(1)
        await release.wait()  # a LISTEN connection still opening

    monkeypatch.setattr(PackageLayer, "listen_to_all_channels", listen)

    async def no_lock(self: PackageLayer, channel: str) -> None:
        return None

    monkeypatch.setattr(PackageLayer, "_get_or_create_channel_advisory_lock", no_lock)
    layer = _layer(cls)
    receivers = [asyncio.create_task(layer.receive(f"topic.n{n}")) for n in range(8)]
    await asyncio.sleep(0.2)
    release.set()
    for task in receivers:
        task.cancel()
    await asyncio.gather(*receivers, return_exceptions=True)
    await asyncio.sleep(0)
    return len(started)


@pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"])
async def test_the_package_starts_a_listener_per_early_receive_and_ours_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # channels-postgres 1.1.4: every receive() before the first LISTEN connection is up starts
    # another (two hundred sockets on a fresh daphne made 10-36 in bench/web.py, docs/BENCHMARKS.md, each
    # handling every message).
    assert await _listeners_started(PackageLayer, monkeypatch) == 8
    # The override of its private _get_or_create_listener_task: one per event loop.
    assert await _listeners_started(PostgresChannelLayer, monkeypatch) == 1
