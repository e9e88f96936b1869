"""The websocket a topic page listens on: what the page missed, then every new event.

A browser says which event it shows last ({"since": n}) when it connects, so a reload, a second
tab or a dropped connection gets exactly the missing events. With each batch of events the
consumer also re-renders the parts of the page those events changed, as HTMX out-of-band swaps.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string

from research import presenters
from research.models import RunEvent, Topic
from research.progress import topic_group

# Which parts of the topic page an event of each stage changes.
PANELS = {
    "plan": ("plan",),
    "queries": ("plan",),
    "search": ("plan", "hits"),
    "score_hits": ("hits",),
    "read": ("documents",),
    "summarise": ("documents",),
    "score_summaries": ("documents",),
    "answer": ("report",),
    "done": ("report", "documents"),
}


class TopicProgressConsumer(AsyncWebsocketConsumer):
    last_seq: int | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        topic_id = self.scope["url_route"]["kwargs"]["topic_id"]
        if not await self._owns(user, topic_id):
            # Same answer for "no such topic" and "not yours": nothing to learn from it.
            await self.close(code=4404)
            return
        self.topic_id = topic_id
        self.group = topic_group(topic_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        since = self._since_from_query()
        if since is not None:
            await self._catch_up(since)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            since = int(json.loads(text_data or "{}").get("since", 0))
        except (ValueError, TypeError, AttributeError):
            return
        await self._catch_up(max(since, self.last_seq or 0))

    async def run_event(self, message: dict[str, Any]) -> None:
        # Until the client has said where it is, it would only get duplicates.
        if self.last_seq is not None and message.get("seq", 0) > self.last_seq:
            await self._send_since(self.last_seq)

    def _since_from_query(self) -> int | None:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        if "since" not in query:
            return None
        try:
            return max(0, int(query["since"][0]))
        except ValueError:
            return 0

    async def _catch_up(self, since: int) -> None:
        self.last_seq = since
        await self._send_since(since)

    async def _send_since(self, since: int) -> None:
        # Reading rows (not messages) keeps order and fills any gap left by lost messages.
        events = await self._events_since(since)
        if not events:
            return
        self.last_seq = events[-1].seq
        lines = "".join(render_to_string("research/_run_event.html", {"event": e}) for e in events)
        await self.send(text_data=lines)
        await self.send(text_data=await self._panels({e.stage for e in events}))

    @database_sync_to_async
    def _owns(self, user: Any, topic_id: int) -> bool:
        return Topic.objects.for_user(user).filter(pk=topic_id).exists()

    @database_sync_to_async
    def _events_since(self, seq: int) -> list[RunEvent]:
        return list(RunEvent.objects.filter(topic_id=self.topic_id).since(seq))

    @database_sync_to_async
    def _panels(self, stages: set[str]) -> str:
        """The status header and progress bars, plus the panels these stages changed."""
        topic = Topic.objects.get(pk=self.topic_id)
        names = {"status", "progress"} | {panel for stage in stages for panel in PANELS.get(stage, ())}
        if topic.is_finished:
            names |= {"report", "documents", "hits", "plan"}
        context = presenters.panel_context(topic, names)
        # Forms in re-rendered panels need the CSRF token; the cookie's value is one Django accepts.
        context["csrf_token"] = self.scope.get("cookies", {}).get("csrftoken", "")
        return "".join(render_to_string(f"research/_{name}.html", context) for name in sorted(names))
