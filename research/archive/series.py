"""A topic's earlier versions and what changed between them, in a topic archive (issue 31).

The archive of a version carries the versions before it under "versions", oldest first, each
written as a topic archive's body is (its topic, report, tables, citations, follow-ups and
picture, without "versions" of its own), and every report its "changes" (research/versions.py).
On import each earlier version is checked like the archive's own topic before anything is
saved, then created in the same transaction, oldest first, as one series with the archive's
topic as its newest version.

An imported series is data, not history: every version is marked imported (its LLM calls are a
record, never spending, and its rows stay out of the service figures and the cost estimate). The
bounds of an archive hold for the whole series: at most MAX_VERSIONS earlier versions, at most
`checks.MAX_ROWS` rows in all, at most what the JSON unpacks to (the size and quota checks, and
the streamed shape count, see only one file). Archives without versions import as they always
did.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from research.archive.checks import MAX_REPORT_CHARS, MAX_ROWS, TABLES, WEB_SCHEMES, ArchiveError
from research.archive.checks import _parse_time as parse_time
from research.models import Topic

KEY = "versions"
# A weekly schedule's year, with room: an export carries at most the newest of them.
MAX_VERSIONS = 60
# What one change lists at most: a report has a few hundred claims and sources.
MAX_ITEMS = 5_000
MAX_TEXT_CHARS = 20_000


def earlier_versions(topic: Topic) -> list[Topic]:
    """The finished versions before `topic`, oldest first, at most MAX_VERSIONS (the newest)."""
    from research.versions import versions_of

    before = []
    for version in versions_of(topic):
        if version.pk == topic.pk:
            break
        if version.status not in Topic.ACTIVE_STATUSES:
            before.append(version)
    return before[-MAX_VERSIONS:]


def row_count(data: dict[str, Any]) -> int:
    """The rows of one topic's body (its tables and report rows), as `checks.check` counts them."""
    names = [table.name for table in TABLES] + ["citations", "followups"]
    return sum(len(data[name]) for name in names if isinstance(data.get(name), list))


def trim(bodies: list[dict[str, Any]], own_rows: int) -> list[dict[str, Any]]:
    """The newest earlier versions whose rows fit, with the topic's own, in one archive."""
    kept: list[dict[str, Any]] = []
    total = own_rows
    for body in reversed(bodies):
        total += row_count(body)
        if total > MAX_ROWS:
            break
        kept.append(body)
    return kept[::-1]


def bodies(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The archive's earlier versions, not yet checked one by one; [] when it has none."""
    rows = data.get(KEY, [])
    if rows is None:
        return []
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ArchiveError(_("In the archive, %(table)s is not a list.") % {"table": KEY})
    if len(rows) > MAX_VERSIONS:
        message = _("The archive holds more than %(n)d earlier versions.")
        raise ArchiveError(message % {"n": MAX_VERSIONS})
    if any(KEY in row for row in rows):
        raise _bad(KEY)
    if row_count(data) + sum(row_count(row) for row in rows) > MAX_ROWS:
        raise ArchiveError(_("The archive holds more than %(n)d rows.") % {"n": MAX_ROWS})
    return rows


# --- What changed, checked -----------------------------------------------------------------------


def check_changes(raw: Any, where: str) -> dict[str, Any] | None:
    """A report's "changes" as research/versions.py writes them, rebuilt from checked values
    (nothing else kept), or None when it has none; ArchiveError for anything else."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or parse_time(raw.get("since")) is None:
        raise _bad(where)
    sources, claims = raw.get("sources"), raw.get("claims")
    if not isinstance(sources, dict) or not isinstance(claims, dict):
        raise _bad(where)
    since = parse_time(raw["since"])
    assert since is not None
    claims_checked: dict[str, list[dict[str, Any]]] = {
        "added": [_claim(item, where) for item in _items(claims.get("added"), where)],
        "removed": [_claim(item, where) for item in _items(claims.get("removed"), where)],
        "changed": [_pair(item, where) for item in _items(claims.get("changed"), where)],
    }
    checked: dict[str, Any] = {
        "since": since.isoformat(),
        "previous_topic": None,  # the exporter's id: set to the imported version's on import
        "sources": {
            name: [_source(item, where) for item in _items(sources.get(name), where)]
            for name in ("added", "dropped")
        },
        "claims": claims_checked,
    }
    size = sum(
        len(claim["text"]) + len(claim["passage"])
        for name in ("added", "removed")
        for claim in claims_checked[name]
    )
    if size > MAX_REPORT_CHARS:
        raise _bad(where)
    from research.versions import count

    checked["empty"] = not count(checked)
    return checked


def _items(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise _bad(where)
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT_CHARS or "\x00" in value:
        raise _bad(where)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(where) from None
    return value


def _source(raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise _bad(where)
    url = _text(raw.get("url", ""), where)
    if url and not url.lower().startswith(WEB_SCHEMES):
        raise _bad(where)
    return {"title": _text(raw.get("title", ""), where), "url": url}


def _claim(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _bad(where)
    cited = _items(raw.get("sources"), where)
    return {
        "text": _text(raw.get("text"), where),
        "sources": [_text(source, where) for source in cited],  # addresses or titles, shown as text
        "passage": _text(raw.get("passage", ""), where),
    }


def _pair(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _bad(where)
    return {"before": _claim(raw.get("before"), where), "after": _claim(raw.get("after"), where)}


def _bad(where: str) -> ArchiveError:
    message = _("In the archive, %(row)s is not a record of what changed that MindSearch writes.")
    return ArchiveError(message % {"row": where})
