"""Progress of a run: a durable `RunEvent` row first, then a nudge to live websockets.

The row is the truth; the channel-layer message only carries its id, so a client that missed
messages (a reload, a dropped socket) catches up by replaying rows since its last `seq`.

The report's text while the LLM writes it goes the same way, without filling the event log: a
`ReportDraft` row (the page renders it on a reload), then a `report.draft` nudge with its version.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from channels.layers import get_channel_layer
from django.db.models import F

from research.event_text import I18N_KEY, english, phrase
from research.models import FollowUp, ReportDraft, RunEvent, Topic

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
    message = {"type": "run.event", "event_id": event.pk, "seq": event.seq}
    _publish(event.topic_id, message)  # on failure: the row is saved, clients replay it on connect


def save_draft(topic_id: int, text: str) -> int:
    """Save the report's text so far and tell live pages; its new version."""
    updated = ReportDraft.objects.filter(topic_id=topic_id).update(text=text, version=F("version") + 1)
    if not updated:
        ReportDraft.objects.update_or_create(topic_id=topic_id, defaults={"text": text, "version": 1})
    version = ReportDraft.objects.values_list("version", flat=True).get(topic_id=topic_id)
    _publish(topic_id, {"type": "report.draft", "version": version})
    return version


def drop_draft(topic_id: int) -> None:
    """The draft is no longer the report being written (the LLM failed; another engine writes)."""
    if ReportDraft.objects.filter(topic_id=topic_id).delete()[0]:
        _publish(topic_id, {"type": "report.draft", "version": 0})


def save_followup_draft(topic_id: int, followup_id: int, text: str) -> int:
    """Save a follow-up's answer so far ("" when it is dropped) and tell live pages; its version."""
    FollowUp.objects.filter(pk=followup_id).update(draft=text, draft_version=F("draft_version") + 1)
    version = FollowUp.objects.filter(pk=followup_id).values_list("draft_version", flat=True).first() or 0
    _publish(topic_id, {"type": "followup.draft", "followup_id": followup_id, "version": version})
    return version


def _publish(topic_id: int, message: dict[str, Any]) -> bool:
    layer = get_channel_layer()
    if layer is None:
        return True
    future = asyncio.run_coroutine_threadsafe(
        layer.group_send(topic_group(topic_id), message), _publisher_loop()
    )
    try:
        future.result(timeout=PUBLISH_TIMEOUT_SECONDS)
    except Exception:
        future.cancel()
        log.exception("could not publish %s to topic %s", message["type"], topic_id)
        return False
    return True


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
