"""Progress of a run: a durable `RunEvent` row first, then a nudge to live websockets.

The row is the truth; the channel-layer message only carries its id, so a client that missed
messages (a reload, a dropped socket) catches up by replaying rows since its last `seq`.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from research.models import RunEvent, Topic

log = logging.getLogger(__name__)


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
) -> RunEvent:
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
    try:
        async_to_sync(layer.group_send)(
            topic_group(event.topic_id), {"type": "run.event", "event_id": event.pk, "seq": event.seq}
        )
    except Exception:
        # The event row is saved; clients replay it on their next connect.
        log.exception("could not publish run event %s of topic %s", event.seq, event.topic_id)
