"""Tasks that the tests enqueue for a real qcluster to run."""

from __future__ import annotations

from research.models import Topic
from research.progress import record_event


def publish_events(topic_id: int, first: int, count: int) -> int:
    topic = Topic.objects.get(pk=topic_id)
    for number in range(first, first + count):
        record_event(topic, "test", f"event {number}", done=number, total=first + count - 1)
    return count
