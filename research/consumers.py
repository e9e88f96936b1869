"""The websocket a topic page listens on: past events replayed, then new ones streamed."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string

from research.models import RunEvent, Topic
from research.progress import topic_group


class TopicProgressConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        topic_id = self.scope["url_route"]["kwargs"]["topic_id"]
        if not await self._owns(user, topic_id):
            # Same answer for "no such topic" and "not yours": nothing to learn from it.
            await self.close(code=4404)
            return
        self.topic_id = topic_id
        self.group = topic_group(topic_id)
        self.last_seq = self._requested_since()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self._send_events_since()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_event(self, message: dict[str, Any]) -> None:
        if message.get("seq", 0) > self.last_seq:
            await self._send_events_since()

    def _requested_since(self) -> int:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        try:
            return max(0, int(query.get("since", ["0"])[0]))
        except ValueError:
            return 0

    async def _send_events_since(self) -> None:
        # Reading rows (not the message) keeps order and fills any gap left by lost messages.
        for event in await self._events_since(self.last_seq):
            await self.send(text_data=render_to_string("research/_run_event.html", {"event": event}))
            self.last_seq = event.seq

    @database_sync_to_async
    def _owns(self, user: Any, topic_id: int) -> bool:
        return Topic.objects.for_user(user).filter(pk=topic_id).exists()

    @database_sync_to_async
    def _events_since(self, seq: int) -> list[RunEvent]:
        return list(RunEvent.objects.filter(topic_id=self.topic_id).since(seq))
