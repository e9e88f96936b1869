"""What a process's websockets watching one topic share: the events read once and the frames
rendered once for all of them (not a feed: nothing here is published or subscribed to).

Two hundred people watching one topic must not mean two hundred identical queries and renders
per event: each process keeps, per watched topic, the recent events (their lines rendered once
per language) and the latest panels, computed by whichever consumer asks first while the others
wait for that result. Without it (each socket reading and rendering for itself), 200 sockets
watching 30 events had delivery p50 / p95 of 1.8 / 2.8 s instead of 92 / 408 ms, and daphne
used 4.8 s of CPU instead of 1.95 s (`bench/web.py --layer postgres`, docs/BENCHMARKS.md "bench/web.py").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.template.loader import render_to_string
from django.utils import translation

from research import presenters
from research.models import RunEvent, Topic
from research.pipeline.stage import StageName

# Which parts of the topic page an event of each stage changes.
PANELS: dict[str, tuple[str, ...]] = {
    StageName.PLAN: ("plan",),
    StageName.QUERIES: ("plan",),
    StageName.SEARCH: ("plan", "hits"),
    StageName.SCORE_HITS: ("hits",),
    StageName.READ: ("documents",),
    StageName.SUMMARISE: ("documents",),
    StageName.SCORE_SUMMARIES: ("documents",),
    StageName.ANSWER: ("report",),
    # Only the owner watches a topic, so the owner's share panel is everyone's.
    StageName.DONE: ("report", "documents", "sharing", "thread"),
    StageName.FOLLOWUP: ("thread",),
}
KEEP_EVENTS = 500


@dataclass
class TopicWatchers:
    topic_id: int
    events: list[RunEvent] = field(default_factory=list)
    rendered: dict[tuple[int, str], str] = field(default_factory=dict)
    watchers: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The latest frame of each kind ("panels", "draft", "followup") with what it was made for.
    latest: dict[str, tuple[Hashable, str]] = field(default_factory=dict)

    async def events_after(self, since: int, upto: int | None = None) -> list[RunEvent]:
        """Events after `since`; with `upto` (the newest seq announced) the database is only read
        when these watchers have not seen that event yet."""
        async with self.lock:
            if not self.events or since < self.events[0].seq - 1:
                # Older history than is kept (a client coming back after long): read it afresh.
                self.events = await _events_since(self.topic_id, since)
            elif upto is None or self.events[-1].seq < upto:
                self.events.extend(await _events_since(self.topic_id, self.events[-1].seq))
                del self.events[:-KEEP_EVENTS]
                oldest = self.events[0].seq
                self.rendered = {key: line for key, line in self.rendered.items() if key[0] >= oldest}
            return [event for event in self.events if event.seq > since]

    def lines(self, events: list[RunEvent], language: str) -> str:
        return "".join(self._line(event, language) for event in events)

    def _line(self, event: RunEvent, language: str) -> str:
        key = (event.seq, language)
        if key not in self.rendered:
            with translation.override(language):
                self.rendered[key] = render_to_string("research/_run_event.html", {"event": event})
        return self.rendered[key]

    async def panels(self, upto: int, stages: set[str], language: str) -> str:
        """The panels a batch of events up to `upto` changed, rendered by the first watcher to
        ask and handed to the others (one batch is kept: the latest)."""
        key = (upto, frozenset(stages), language)
        return await self.shared("panels", key, lambda: _render_panels(self.topic_id, stages, language))

    async def shared(self, kind: str, key: Hashable, render: Callable[[], Awaitable[str]]) -> str:
        """What `render` makes for `key`, made once for all this process's watchers of the topic:
        the first to ask renders, the others wait and get the same text. Only the latest of each
        kind is held (the fragment cache, research/fragments.py, holds the rest)."""
        async with self.lock:
            held = self.latest.get(kind)
            if held is None or held[0] != key:
                held = (key, await render())
                self.latest[kind] = held
            return held[1]


_watched: dict[int, TopicWatchers] = {}


def watch(topic_id: int) -> TopicWatchers:
    watched = _watched.setdefault(topic_id, TopicWatchers(topic_id))
    watched.watchers += 1
    return watched


def unwatch(watched: TopicWatchers) -> None:
    watched.watchers -= 1
    if watched.watchers <= 0:
        _watched.pop(watched.topic_id, None)


@database_sync_to_async
def _events_since(topic_id: int, since: int) -> list[RunEvent]:
    """At most the newest KEEP_EVENTS after `since`: a client far behind (or new, on a topic
    with a huge log) gets the end of the log, as the page shows it, not one giant frame."""
    newest = RunEvent.objects.filter(topic_id=topic_id, seq__gt=since).order_by("-seq")[:KEEP_EVENTS]
    return list(newest)[::-1]


@database_sync_to_async
def _render_panels(topic_id: int, stages: set[str], language: str) -> str:
    """The status header and progress bars, plus the panels these stages changed: the read-only
    ones from the fragment cache, the ones with forms rendered here without a CSRF token (the
    same HTML goes to every watcher; static/js/topic.js gives each form the page's token)."""
    topic = Topic.objects.get(pk=topic_id)
    names = {"status", "progress"} | {panel for stage in stages for panel in PANELS.get(stage, ())}
    if topic.is_finished:
        names |= {"report", "documents", "hits", "plan", "sharing", "thread"}
    with translation.override(language):
        html = dict(presenters.cached_panels(topic, names & set(presenters.CACHED_PANELS)))
        context = presenters.panel_context(topic, names - set(html))
        html.update((name, render_to_string(f"research/_{name}.html", context)) for name in names - set(html))
        return "".join(html[name] for name in sorted(names))
