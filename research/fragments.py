"""The one fragment cache: a topic's read-only panels, rendered once per version of the topic.

Key rule. A fragment is stored under

    fragment:<name>:<topic id>:<language>:<settings generation>:<topic version>

and nothing else names a fragment. The topic version is read from PostgreSQL itself
(`version_of`): over the topic's row and every row that belongs to it — every model reached
from `Topic` through relations pointing at it, found by walking the models (`ROW_KINDS`), so a
new model that belongs to a topic counts without anyone listing it — the number of rows and
the sum of a 64-bit hash of each row version's identity (its table, `ctid` and `xmin`).
PostgreSQL gives every INSERT and every UPDATE a new row version (a new `ctid` and the writing
transaction's `xmin`) and a DELETE takes one away, so any committed change of any of those rows,
by any process, through the ORM or raw SQL, with or without an event, makes a new version.
Locking a row (`SELECT ... FOR UPDATE`) writes no version and changes nothing. The settings
generation moves when a setting changes (`override_settings` in tests; in a process settings
never change), since panels show a few (prices, the deep-research rule).

Invalidation rule: there is none to keep by hand. Old versions are never asked for again and
age out of the cache (`CACHES["fragments"]`, a per-process LocMemCache: every process computes
the same key from the database, so it needs no shared invalidation either).

What may be cached here: a fragment rendered from the topic's rows (ROW_KINDS), the language
and settings alone — no request, no user, no CSRF token, no clock. `tests/research/
test_fragments.py` changes every row kind the cached panels show and asserts each panel changes
with it, and that every model belonging to a topic is in ROW_KINDS.

The version is read before the fragment is rendered: a change in between is stored under the
older version (newer text than that version, never older text under a newer one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.cache import caches
from django.core.signals import setting_changed
from django.db import connection, models
from django.dispatch import receiver
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import get_language

from research.models import Topic

_settings_generation = 0


@receiver(setting_changed)
def _settings_changed(**_kwargs: Any) -> None:
    global _settings_generation
    _settings_generation += 1


def row_kinds() -> list[tuple[type[models.Model], str]]:
    """Topic and every model whose rows belong to a topic, each with its lookup path to the
    topic's id (breadth first: the shortest path)."""
    kinds: list[tuple[type[models.Model], str]] = [(Topic, "pk")]
    seen: set[type[models.Model]] = {Topic}
    queue: list[tuple[type[models.Model], str]] = [(Topic, "")]
    while queue:
        model, path = queue.pop(0)
        for relation in model._meta.related_objects:
            related = relation.related_model
            if relation.many_to_many or not isinstance(related, type) or related in seen:
                continue
            seen.add(related)
            lookup = f"{relation.field.name}__{path}" if path else relation.field.name
            kinds.append((related, lookup))
            queue.append((related, lookup))
    return kinds


ROW_KINDS = row_kinds()


@dataclass(frozen=True)
class TopicVersion:
    topic_id: int
    rows: int
    digest: int

    def key(self, name: str) -> str:
        language = get_language() or "-"
        return f"fragment:{name}:{self.topic_id}:{language}:{_settings_generation}:{self.rows}:{self.digest}"


def _version_sql() -> str:
    """One query over every row kind: its rows' count and the sum of their versions' hashes."""
    parts = []
    for model, lookup in ROW_KINDS:
        table = connection.ops.quote_name(model._meta.db_table)
        identity = f"{table}.tableoid::text || {table}.ctid::text || {table}.xmin::text"
        rows = model._base_manager.filter(**{lookup: 0}).order_by()
        # Table names from the models' own meta; the topic's id is a parameter.
        version = models.expressions.RawSQL(f"hashtextextended({identity}, 0)", [])  # noqa: S611
        query = rows.values_list(version)
        sql, params = query.query.sql_with_params()
        parts.append(sql % tuple("%s" for _ in params))
    union = " UNION ALL ".join(parts)
    return f"SELECT count(*), coalesce(sum(v), 0) FROM ({union}) AS row_versions(v)"  # noqa: S608


_SQL: str | None = None


def version_of(topic_id: int) -> TopicVersion:
    """The topic's version as the database holds it now (one query)."""
    global _SQL
    if _SQL is None:
        _SQL = _version_sql()
    with connection.cursor() as cursor:
        cursor.execute(_SQL, [topic_id] * len(ROW_KINDS))
        rows, digest = cursor.fetchone()
    return TopicVersion(topic_id, int(rows), int(digest))


def fragment(version: TopicVersion, name: str, render: Callable[[], str]) -> SafeString:
    """The fragment `name` of this version of the topic in the active language: from the cache,
    or rendered (by `render`, from the topic's rows alone) and kept."""
    cache = caches["fragments"]
    key = version.key(name)
    html = cache.get(key)
    if html is None:
        html = str(render())
        cache.set(key, html)
    return mark_safe(html)  # noqa: S308 — a rendered template
