"""The one fragment cache: HTML rendered once per version of the rows it shows.

Key rule. A fragment is stored under

    fragment:<name>:<language>:<settings generation>:<version of the rows it is rendered from>

and nothing else names a fragment. The version is read from PostgreSQL: each row version's
identity (its table, `ctid` and `xmin`). PostgreSQL writes a new row version (a new `ctid`, the
writing transaction's `xmin`) for every INSERT and UPDATE and takes one away with a DELETE, so
any committed change of those rows — by any process, through the ORM or raw SQL, with or without
an event — makes a new version; locking a row (`SELECT ... FOR UPDATE`) writes none. What a
fragment shows that is not a row (a page number, the words searched for) is in its name; the
settings generation moves when a setting changes (`override_settings` in tests; a process's
settings never change). Three kinds of fragment:

- a topic's read-only panels (research/presenters.py `cached_panels`), versioned by
  `version_of`: over the topic's row and every row that belongs to it — every model reached
  from `Topic` through relations pointing at it, found by walking the models (`ROW_KINDS`), so
  a new model that belongs to a topic counts without anyone listing it — the number of rows
  and the sum of a 64-bit hash of each row version's identity (one query);
- the rows of a page of the topic list (research/views.py `topic_rows`): the listed Topic rows,
  read with their versions in the list's own query (`row_version`, `version_of_rows`);
- the blank new-topic form: no rows (`NO_ROWS`), the language and settings alone.

Invalidation rule: there is none to keep by hand. Old versions are never asked for again and
age out of the cache (`CACHES["fragments"]`, a per-process LocMemCache: every process computes
the same key from the database, so none needs telling).

What may be cached here: a fragment rendered from its rows, the language and settings alone —
no request, no user, no CSRF token, no clock; panels with forms are rendered per request.
`tests/research/test_fragments.py` changes every row kind the cached panels show behind the
app's back and asserts each panel changes with it, that every field of every row kind moves the
version, that every model belonging to a topic is in ROW_KINDS, and that the list's rows are
rendered from the listed rows alone (no query).

The version is read before the fragment is rendered: a change in between is stored under the
older version (newer text than that version, never older text under a newer one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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
class Version:
    """What the database says of the rows a fragment is rendered from."""

    token: str

    def key(self, name: str) -> str:
        language = get_language() or "-"
        return f"fragment:{name}:{language}:{_settings_generation}:{self.token}"


# A fragment rendered from no rows at all (the language and settings alone).
NO_ROWS = Version("-")


def row_version(model: type[models.Model]) -> models.expressions.RawSQL:
    """An annotation: this row's version (a hash of its table, ctid and xmin), new with every
    write of the row. A list annotates its rows with it, and `version_of_rows` reads it."""
    table = connection.ops.quote_name(model._meta.db_table)
    identity = f"{table}.tableoid::text || {table}.ctid::text || {table}.xmin::text"
    # The table name from the model's own meta; nothing from outside.
    return models.expressions.RawSQL(f"hashtextextended({identity}, 0)", [])  # noqa: S611


def version_of_rows(rows: Iterable[models.Model]) -> Version:
    """The version of exactly these rows, each annotated `row_version=row_version(Model)`."""
    return Version("rows:" + ",".join(f"{row.pk}.{row.row_version}" for row in rows))  # type: ignore[attr-defined]


def _version_sql() -> str:
    """One query over every row kind: its rows' count and the sum of their versions' hashes."""
    parts = []
    for model, lookup in ROW_KINDS:
        rows = model._base_manager.filter(**{lookup: 0}).order_by()
        query = rows.values_list(row_version(model))
        sql, params = query.query.sql_with_params()
        parts.append(sql % tuple("%s" for _ in params))
    union = " UNION ALL ".join(parts)
    return f"SELECT count(*), coalesce(sum(v), 0) FROM ({union}) AS row_versions(v)"  # noqa: S608


_SQL: str | None = None


def version_of(topic_id: int) -> Version:
    """The version of the topic's row and every row that belongs to it, now (one query)."""
    global _SQL
    if _SQL is None:
        _SQL = _version_sql()
    with connection.cursor() as cursor:
        cursor.execute(_SQL, [topic_id] * len(ROW_KINDS))
        rows, digest = cursor.fetchone()
    return Version(f"topic:{topic_id}:{int(rows)}:{int(digest)}")


def fragment(version: Version, name: str, render: Callable[[], str]) -> SafeString:
    """The fragment `name` of this version of its rows in the active language: from the cache,
    or rendered (by `render`, from those rows alone) and kept."""
    cache = caches["fragments"]
    key = version.key(name)
    html = cache.get(key)
    if html is None:
        html = str(render())
        cache.set(key, html)
    return mark_safe(html)  # noqa: S308 — a rendered template
