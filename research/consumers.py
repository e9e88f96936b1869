"""The websocket a topic page listens on: what the page missed, then every new event.

A browser says which event it shows last ({"since": n}) when it connects, so a reload, a second
tab or a dropped connection gets exactly the missing events. With each batch of events the
consumer also sends the parts of the page those events changed, as HTMX out-of-band swaps;
research/watchers.py renders both once per process for all the topic's watchers. The panels carry
no CSRF token (the same HTML goes to every watcher): static/js/topic.js gives their forms the
page's own.

While the report is written, `report.draft` messages say its text has grown: the consumer sends
the report card again, with the text so far (from the fragment cache, research/fragments.py;
rendered once per draft version for all the topic's watchers of the process).
A client that says where it is also gets the card with the current draft, so a reload or a new
connection mid-stream goes on from the text so far.
"""

from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.translation.trans_real import parse_accept_lang_header

from mindsearch.querysets import AnyUser
from research import presenters, watchers
from research.models import FollowUp, ReportDraft, Topic
from research.progress import topic_group

# Event numbers are 32-bit in PostgreSQL.
MAX_SEQ = 2**31 - 1


def valid_since(value: object) -> int:
    """An event number from a client: a whole number from 0 up, at most MAX_SEQ; ValueError for
    anything else (1e999, NaN, "3", true, a list …)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("since must be a number")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError("since must be a whole number")
    return min(max(0, int(value)), MAX_SEQ)


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
        self.watched = watchers.watch(topic_id)
        self.group = topic_group(topic_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        since = self._since_from_query()
        if since is not None:
            await self._catch_up(since)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            watchers.unwatch(self.watched)
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            since = valid_since(json.loads(text_data or "{}").get("since", 0))
        except (ValueError, TypeError, AttributeError, RecursionError):
            return  # not a number of an event: ignored, the socket stays as it was
        await self._catch_up(max(since, self.last_seq or 0))

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels closes stale database connections before every message; for the group's
        run events (one per event per socket) that is a trip to the shared database thread each,
        and they need none: `TopicWatchers` reads the database once for all sockets (and
        database_sync_to_async closes stale connections around each of its reads). Without this,
        200 sockets make 200 trips per event. `bench/web.py --layer postgres` (docs/BENCHMARKS.md
        "bench/web.py", 7 runs each way) gave delivery p95 237 ms instead of 108 ms and 2.4 s of
        daphne CPU instead of 2.0 s. tests/research/test_channel_overrides.py fails when
        Channels stops making the trips."""
        if message["type"] == "run.event":
            await self.run_event(message)
        else:
            await super().dispatch(message)

    async def report_draft(self, message: dict[str, Any]) -> None:
        if self.last_seq is not None:  # as for events: not before the client says where it is
            await self._send_draft(message.get("version", 0))

    async def _send_draft(self, version: int | None = None) -> None:
        """The report card with the text written so far; `version` None: only when a draft exists."""
        language = self._language()
        if version:
            html = await self.watched.shared(
                "draft",
                (version, language),
                lambda: _report_card(self.topic_id, language, only_with_draft=False),
            )
        else:
            html = await _report_card(self.topic_id, language, only_with_draft=version is None)
        if html:
            await self.send(text_data=html)

    async def followup_draft(self, message: dict[str, Any]) -> None:
        """A follow-up's answer has grown: its item of the thread, with the text so far."""
        if self.last_seq is None:
            return
        followup_id, version = message.get("followup_id"), message.get("version", 0)
        if not isinstance(followup_id, int):
            return
        language = self._language()
        key = (followup_id, version, language)
        html = await self.watched.shared(
            "followup", key, lambda: _followup_card(self.topic_id, followup_id, language)
        )
        if html:
            await self.send(text_data=html)

    async def run_event(self, message: dict[str, Any]) -> None:
        # Until the client has said where it is, it would only get duplicates.
        if self.last_seq is not None and message.get("seq", 0) > self.last_seq:
            await self._send_since(self.last_seq, upto=message["seq"])

    def _since_from_query(self) -> int | None:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        if "since" not in query:
            return None
        try:
            return valid_since(int(query["since"][0]))
        except ValueError:
            return 0

    async def _catch_up(self, since: int) -> None:
        self.last_seq = since
        await self._send_since(since)
        await self._send_draft()

    async def _send_since(self, since: int, upto: int | None = None) -> None:
        # Reading rows (not messages) keeps order and fills any gap left by lost messages.
        events = await self.watched.events_after(since, upto)
        if not events:
            return
        self.last_seq = events[-1].seq
        language = self._language()
        stages = {event.stage for event in events}
        panels = await self.watched.panels(self.last_seq, stages, language)
        # One frame per batch: writing frames is most of a socket's cost per event.
        await self.send(text_data=self.watched.lines(events, language) + panels)

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
    def _owns(self, user: AnyUser, topic_id: int) -> bool:
        return Topic.objects.for_user(user).filter(pk=topic_id).exists()


@database_sync_to_async
def _report_card(topic_id: int, language: str, *, only_with_draft: bool) -> str:
    """The report card as it is now (the draft while one is written, the report once saved);
    with `only_with_draft`, "" unless a draft is being written."""
    topic = Topic.objects.filter(pk=topic_id).first()
    if topic is None:
        return ""
    if only_with_draft and (topic.is_finished or not ReportDraft.objects.filter(topic=topic).exists()):
        return ""
    with translation.override(language):
        return presenters.cached_panels(topic, ["report"])["report"]


@database_sync_to_async
def _followup_card(topic_id: int, followup_id: int, language: str) -> str:
    """One follow-up of the thread as it is now (its text so far while it is written), swapped
    into the page by its id; "" once it is no longer being answered (the thread panel follows)."""
    followup = FollowUp.objects.filter(pk=followup_id, topic_id=topic_id).first()
    if followup is None or not followup.is_pending:
        return ""
    context = {"item": presenters.followup_item(followup, 0), "oob": True}
    with translation.override(language):
        return render_to_string("research/_followup.html", context)
