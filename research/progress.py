"""Progress of a run: a durable `RunEvent` row first, then a nudge to live websockets.

The row is the truth; the channel-layer message only carries its id, so a client that missed
messages (a reload, a dropped socket) catches up by replaying rows since its last `seq`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from channels.layers import get_channel_layer

from research.event_text import I18N_KEY, english, phrase
from research.models import RunEvent, Topic

log = logging.getLogger(__name__)

# Long enough for a busy database, short enough that a database that is down does not stall a run.
PUBLISH_TIMEOUT_SECONDS = 5.0


def topic_group(topic_id: int) -> str:
    return f"topic-{topic_id}"


def record_event(
    topic: Topic,
    stage: str,
    message: str,
    *,
    done: int | None = None,
    total: int | None = None,
    level: str = RunEvent.Level.INFO,
    data: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
) -> RunEvent:
    """Save and announce one line of progress.

    With `args` (`{}` for a line without placeholders), `message` is a msgid marked with
    gettext_noop: it is stored formatted in English and, under `data["i18n"]`, kept for the page
    to translate (research/event_text.py).
    """
    if args is not None:
        spec = phrase(message, **args)
        message, data = english(spec), {**(data or {}), I18N_KEY: spec}
    event = RunEvent.objects.create(
        topic=topic,
        seq=topic.next_event_seq(),
        stage=stage,
        message=message,
        done=done,
        total=total,
        level=level,
        data=data or {},
    )
    notify(event)
    return event


def notify(event: RunEvent) -> None:
    """Tell live websockets about a saved event; losing this message loses nothing."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "run.event", "event_id": event.pk, "seq": event.seq}
    future = asyncio.run_coroutine_threadsafe(
        layer.group_send(topic_group(event.topic_id), message), _publisher_loop()
    )
    try:
        future.result(timeout=PUBLISH_TIMEOUT_SECONDS)
    except Exception:
        future.cancel()
        # The event row is saved; clients replay it on their next connect.
        log.exception("could not publish run event %s of topic %s", event.seq, event.topic_id)


_publisher: tuple[int, asyncio.AbstractEventLoop] | None = None
_publisher_lock = threading.Lock()


def _publisher_loop() -> asyncio.AbstractEventLoop:
    """One event loop per process, alive as long as the process, for every publish.

    The channel layer's connection pool belongs to the loop that opened it: its upkeep (replacing
    broken or old connections) runs as tasks on that loop. With a fresh loop per async_to_sync
    call, as in a worker, that loop was gone after the first event, and once the database had
    restarted every publish waited out the pool's 30-s timeout, stalling the run.
    """
    global _publisher
    with _publisher_lock:
        if _publisher is None or _publisher[0] != os.getpid():  # a forked child has no thread
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="run-event-publisher", daemon=True).start()
            _publisher = (os.getpid(), loop)
        return _publisher[1]
