"""What the topic websockets of one process send, rendered once and shared by all of them.

Two hundred people watching one topic must not mean two hundred identical queries and renders
per event: each process keeps, per watched topic, the recent event lines and the latest panels,
computed by whichever consumer asks first while the others wait for that result.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.template.loader import render_to_string

from research import presenters
from research.models import RunEvent, Topic

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
# Placeholder for each client's own CSRF token in panels rendered once for everyone.
CSRF_PLACEHOLDER = "__csrf_token_placeholder__"
KEEP_LINES = 2000


@dataclass(frozen=True)
class Line:
    seq: int
    stage: str
    html: str


@dataclass
class TopicFeed:
    topic_id: int
    lines: list[Line] = field(default_factory=list)
    watchers: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    panels_key: tuple[int, frozenset[str]] | None = None
    panels_html: str = ""

    async def lines_after(self, since: int, upto: int | None = None) -> list[Line]:
        """Event lines after `since`; with `upto` (the newest seq announced) the database is only
        read when this feed has not seen that event yet."""
        async with self.lock:
            if not self.lines or since < self.lines[0].seq - 1:
                # Older history than is kept (a client coming back after long): read it afresh.
                self.lines = await _render_lines(self.topic_id, since)
            elif upto is None or self.lines[-1].seq < upto:
                self.lines.extend(await _render_lines(self.topic_id, self.lines[-1].seq))
                del self.lines[:-KEEP_LINES]
            return [line for line in self.lines if line.seq > since]

    async def panels(self, upto: int, stages: set[str], csrf_token: str) -> str:
        async with self.lock:
            key = (upto, frozenset(stages))
            if key != self.panels_key:
                self.panels_html = await _render_panels(self.topic_id, stages)
                self.panels_key = key
            return self.panels_html.replace(CSRF_PLACEHOLDER, csrf_token)


_feeds: dict[int, TopicFeed] = {}


def watch(topic_id: int) -> TopicFeed:
    feed = _feeds.setdefault(topic_id, TopicFeed(topic_id))
    feed.watchers += 1
    return feed


def unwatch(feed: TopicFeed) -> None:
    feed.watchers -= 1
    if feed.watchers <= 0:
        _feeds.pop(feed.topic_id, None)


@database_sync_to_async
def _render_lines(topic_id: int, since: int) -> list[Line]:
    events = RunEvent.objects.filter(topic_id=topic_id).since(since)
    return [Line(e.seq, e.stage, render_to_string("research/_run_event.html", {"event": e})) for e in events]


@database_sync_to_async
def _render_panels(topic_id: int, stages: set[str]) -> str:
    """The status header and progress bars, plus the panels these stages changed."""
    topic = Topic.objects.get(pk=topic_id)
    names = {"status", "progress"} | {panel for stage in stages for panel in PANELS.get(stage, ())}
    if topic.is_finished:
        names |= {"report", "documents", "hits", "plan"}
    context = {**presenters.panel_context(topic, names), "csrf_token": CSRF_PLACEHOLDER}
    return "".join(render_to_string(f"research/_{name}.html", context) for name in sorted(names))
