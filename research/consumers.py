"""The websocket a topic page listens on: what the page missed, then every new event.

A browser says which event it shows last ({"since": n}) when it connects, so a reload, a second
tab or a dropped connection gets exactly the missing events. With each batch of events the
consumer also sends the parts of the page those events changed, as HTMX out-of-band swaps;
research/feeds.py renders both once per process for all the topic's watchers.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.translation.trans_real import parse_accept_lang_header

from research import feeds
from research.forms import ShareLinkForm
from research.models import Topic
from research.progress import topic_group


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
        self.feed = feeds.watch(topic_id)
        self.group = topic_group(topic_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        since = self._since_from_query()
        if since is not None:
            await self._catch_up(since)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            feeds.unwatch(self.feed)
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
            await self._send_since(self.last_seq, upto=message["seq"])

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

    async def _send_since(self, since: int, upto: int | None = None) -> None:
        # Reading rows (not messages) keeps order and fills any gap left by lost messages.
        events = await self.feed.events_after(since, upto)
        if not events:
            return
        self.last_seq = events[-1].seq
        language = self._language()
        await self.send(text_data=self.feed.lines(events, language))
        # Forms in re-rendered panels need the CSRF token; the cookie's value is one Django accepts.
        csrf_token = self.scope.get("cookies", {}).get("csrftoken", "")
        stages = {event.stage for event in events}
        await self.send(text_data=await self.feed.panels(self.last_seq, stages, language, csrf_token))
        if "done" in stages:
            await self.send(text_data=await self._sharing_panel(language, csrf_token))

    def _language(self) -> str:
        """The page's language, chosen as LocaleMiddleware chose it: the switch's cookie first,
        then the browser's Accept-Language."""
        chosen = self.scope.get("cookies", {}).get(settings.LANGUAGE_COOKIE_NAME)
        if chosen and translation.check_for_language(chosen):
            return translation.get_supported_language_variant(chosen)
        headers = dict(self.scope.get("headers", []))
        accept = headers.get(b"accept-language", b"").decode("latin-1")
        for code, _quality in parse_accept_lang_header(accept):
            try:
                return translation.get_supported_language_variant(code)
            except LookupError:
                continue
        return settings.LANGUAGE_CODE

    @database_sync_to_async
    def _sharing_panel(self, language: str, csrf_token: str) -> str:
        """The finished report can now be shared; the share panel lists this owner's links, so it
        is rendered here rather than once in the feed for everyone."""
        topic = Topic.objects.get(pk=self.topic_id)
        context = {
            "topic": topic,
            "report": hasattr(topic, "report"),
            "share_form": ShareLinkForm(),
            "share_links": list(topic.share_links.all()),
            "csrf_token": csrf_token,
        }
        with translation.override(language):
            return render_to_string("research/_sharing.html", context)

    @database_sync_to_async
    def _owns(self, user: Any, topic_id: int) -> bool:
        return Topic.objects.for_user(user).filter(pk=topic_id).exists()
