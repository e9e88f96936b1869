"""The PostgreSQL channel layer, with one fix: a single LISTEN connection per event loop.

channels-postgres starts a listener from every receive() that arrives before the first listener
is up, and each of them then handles every notification. Two hundred sockets opening on a freshly
started daphne (`bench/web.py --layer postgres --no-warm-up`, docs/BENCHMARKS.md "bench/web.py") made 10, 22
and 36 LISTEN connections in three runs without this class, and daphne used 3.7 s of CPU
instead of 1.9 s (medians) for delivery p50 / p95 of 96 / 238 ms instead of 55 / 195 ms. The run
that found the problem saw sixty, and delivery took seconds.

It also starts (or joins) the embedded PostgreSQL before connecting, like the database backend.

This overrides a private method of channels-postgres (1.1.4):
tests/research/test_channel_overrides.py shows the package still starting a listener per early
receive() and this class starting one, so it fails when the package changes underneath (fixed:
remove this module; renamed: the override is no longer called).
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels_postgres.core import PostgresChannelLayer as BasePostgresChannelLayer

from mindsearch import embedded_db


class PostgresChannelLayer(BasePostgresChannelLayer):
    _listener_starting_on: asyncio.AbstractEventLoop | None = None

    def __init__(self, *args: Any, **config: Any) -> None:
        # The layer builds its connection from its CONFIG (a copy of the database settings):
        # with the embedded server, its socket folder is known once the server is up.
        embedded_db.fill_host(config)
        super().__init__(*args, **config)

    def _get_or_create_listener_task(self) -> tuple[asyncio.Event, bool]:
        loop = asyncio.get_running_loop()
        stale: asyncio.Event | None = getattr(self, "listener_task_is_running", None)
        if stale is not None and getattr(stale, "_loop", None) not in (None, loop):
            # The package keeps one Event for the layer's life; once awaited in one event loop it
            # cannot be awaited in another ("bound to a different event loop"): a layer used from
            # a second loop (each test's, or a thread's of its own) starts afresh there.
            self.listener_task_is_running = None
            self.event_loop = loop
        event, is_new = super()._get_or_create_listener_task()
        if not is_new:
            return event, False
        loop = asyncio.get_running_loop()
        if self._listener_starting_on is loop:
            return event, False  # one is already on its way; wait for it
        self._listener_starting_on = loop
        return event, True

    async def listen_to_all_channels(self) -> None:
        try:
            await super().listen_to_all_channels()
        finally:
            self._listener_starting_on = None
