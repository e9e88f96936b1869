"""What a topic archive may hold: its tables and their columns, and the checks every row
passes before anything is written. Values are checked against the columns they go into, types
included, so a hostile archive gets a clear refusal instead of a database error half-way.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.translation import gettext as _

from research import event_text
from research.archive import papers as archive_papers
from research.models import (
    Document,
    Hit,
    HitScore,
    LLMCall,
    Report,
    Round,
    RunEvent,
    Scores,
    SearchQuery,
    SubQuery,
    Summary,
    SummaryScore,
    Topic,
    TopicImage,
)
from research.pipeline import outline, sites
from research.pipeline.stage import StageName

MAX_ROWS = 100_000
# What one run writes at most, with room to spare: a deep topic logs a few hundred events, its
# report is tens of kB; an archive past these is not one MindSearch wrote.
MAX_EVENTS = 20_000
MAX_EVENT_MESSAGE_CHARS = 10_000
MAX_EVENT_DATA_BYTES = 64 * 1024
MAX_REPORT_CHARS = 2_000_000
# The rows of each kind one run writes at most, with room to spare (20 sub-queries a round, five
# rounds, a few searches each); the archive's shape is held to them before it is parsed
# (research/archive/shape.py) and its rows again here.
ROW_LIMITS = {
    "subqueries": 1_000,
    "search_queries": 5_000,
    "hits": 20_000,
    "hit_scores": 20_000,
    "documents": 5_000,
    "summaries": 5_000,
    "summary_scores": 5_000,
    "rounds": 100,
    "run_events": MAX_EVENTS,
    "llm_calls": 10_000,
    "citations": 20_000,
}
# An imported LLM call is a record, never spending (research/usage.py), but what it says stays
# within what one call can be: the largest context windows hold a few million tokens.
LLM_CALL_LIMITS = {
    "prompt_tokens": 2_000_000,
    "completion_tokens": 2_000_000,
    "latency_ms": 3_600_000,
    "attempts": 20,
}
WEB_SCHEMES = ("http://", "https://")


class ArchiveError(Exception):
    """An archive that cannot be imported or a topic that cannot be exported; the message is
    for the user."""


@dataclass(frozen=True)
class Table:
    name: str
    model: type[models.Model]
    fields: tuple[str, ...]
    topic_path: str
    # Foreign keys to rows of an earlier table in the archive: field → table name.
    refs: dict[str, str] = field(default_factory=dict)
    # Values that must not repeat within the topic (database constraints), checked up front.
    unique: tuple[str, ...] = ()


SCORE_FIELDS = (*Scores.CRITERIA, "total", "origin", "created_at")
TOPIC_FIELDS = (
    "question",
    "status",
    "mode",
    "sources",
    "time_range",
    "language",
    "domain",
    "period_start",
    "period_end",
    "route",
    "years_checked",
    "vision_checked",
    "domain_data_checked",
    "auto_approve",
    "stage",
    "error",
    "llm_model",
    "last_event_seq",
    "sites_only",
    "sites_prefer",
    "sites_avoid",
    "token_cap",
    "report_kind",  # the report's shape (issue 30), re-checked on import: `_check_outline`
    "outline",
    "report_length",
    "papers",
    "created_at",
    "started_at",
    "finished_at",
)
SITE_FIELDS = ("sites_only", "sites_prefer", "sites_avoid")
REPORT_FIELDS = ("markdown", "sources", "model", "marks", "without_model", "created_at")
# A picture's outcomes the vision stage saved without describing it (as migration 0014 reads them).
SETTLED_PICTURES = (TopicImage.Analysis.NO_VISION, TopicImage.Analysis.FAILED)
# In creation order: every table refers only to tables above it.
TABLES = (
    Table("subqueries", SubQuery, ("position", "text", "origin", "round", "created_at"), "topic"),
    Table(
        "search_queries",
        SearchQuery,
        ("language", "position", "text", "result_count", "unresponsive_engines", "searched_at"),
        "subquery__topic",
        refs={"subquery": "subqueries"},
    ),
    Table(
        "hits",
        Hit,
        (
            "source",
            "url",
            "normalized_url",
            "title",
            "snippet",
            "engine",
            "position",
            "published_at",
            "paper",
            "created_at",
        ),
        "topic",
        refs={"subquery": "subqueries", "search_query": "search_queries"},
        unique=("normalized_url",),
    ),
    Table("hit_scores", HitScore, SCORE_FIELDS, "hit__topic", refs={"hit": "hits"}, unique=("hit",)),
    Table(
        "documents",
        Document,
        ("title", "url", "text", "fetched_via", "pages", "round", "created_at"),
        "topic",
        refs={"hit": "hits"},
        unique=("hit",),
    ),
    Table(
        "summaries",
        Summary,
        ("text", "origin", "created_at"),
        "document__topic",
        refs={"document": "documents"},
        unique=("document",),
    ),
    Table(
        "summary_scores",
        SummaryScore,
        SCORE_FIELDS,
        "summary__document__topic",
        refs={"summary": "summaries"},
        unique=("summary",),
    ),
    Table(
        "rounds",
        Round,
        (
            "number",
            "subqueries",
            "documents",
            "new_documents",
            "known_documents",
            "growth_rate",
            "stop_reason",
            "created_at",
        ),
        "topic",
        unique=("number",),
    ),
    Table(
        "run_events",
        RunEvent,
        ("seq", "stage", "level", "message", "done", "total", "data", "created_at"),
        "topic",
        unique=("seq",),
    ),
    Table(
        "llm_calls",
        LLMCall,
        (
            "stage",
            "model",
            "prompt_version",
            "prompt_tokens",
            "completion_tokens",
            "latency_ms",
            "attempts",
            "cache_hit",
            "cache_kind",
            "error",
            "created_at",
        ),
        "topic",
    ),
)


@dataclass
class Checked:
    """An archive's rows, every value checked against its column; refs still the archive's ids."""

    topic: dict[str, Any]
    report: dict[str, Any] | None
    tables: dict[str, list[dict[str, Any]]]
    # The ids each table's rows got when they were saved: table → {archive id: new id}.
    new_ids: dict[str, dict[int, int]] = field(default_factory=dict)


def check(data: dict[str, Any]) -> Checked:
    lists = [data.get(table.name) for table in TABLES]
    if sum(len(rows) for rows in lists if isinstance(rows, list)) > MAX_ROWS:
        raise ArchiveError(_("The archive holds more than %(n)d rows.") % {"n": MAX_ROWS})
    topic = check_row(Topic, TOPIC_FIELDS, data.get("topic"), "topic")
    if topic["status"] in Topic.ACTIVE_STATUSES:
        raise ArchiveError(_("The archive's topic was still being researched when it was exported."))
    for name in SITE_FIELDS:  # host names only: a re-run sends them to the search engine
        try:
            topic[name] = sites.clean([str(site) for site in topic[name]])
        except ValueError:
            raise ArchiveError(
                _("In the archive, the topic's site lists hold something that is not a site name.")
            ) from None
    _check_outline(topic)
    events = data.get("run_events")
    if isinstance(events, list) and len(events) > MAX_EVENTS:
        raise ArchiveError(_("The archive holds more than %(n)d run events.") % {"n": MAX_EVENTS})
    _check_row_counts(data)
    tables: dict[str, list[dict[str, Any]]] = {}
    for table in TABLES:
        tables[table.name] = _check_table(table, data.get(table.name, []), tables)
    _check_like_live_data(tables)
    _check_papers(tables["hits"], None)
    _check_llm_calls(tables["llm_calls"])
    _check_plan_size(tables["subqueries"])
    report = None
    if data.get("report") is not None:
        report = check_row(Report, REPORT_FIELDS, data["report"], "report")
        if len(report["markdown"]) > MAX_REPORT_CHARS:
            raise ArchiveError(_("The archive's report is longer than a report can be."))
        report["sources"] = _check_sources(report["sources"], tables["documents"])
        _check_papers(None, report["sources"])
    topic.update(_older_archive_states(data, topic, tables, answered=report is not None))
    return Checked(topic, report, tables)


def _older_archive_states(
    data: dict[str, Any], topic: dict[str, Any], tables: dict[str, list[dict[str, Any]]], *, answered: bool
) -> dict[str, Any]:
    """The route and the stages' "done" flags an archive from before those columns lacks, read
    from its rows as migrations 0012–0014 read them for the topics of that time: a routed topic
    with a report and no plan was answered from the owner's documents (when it took passages of
    them) or directly, any other routed topic searched; a stage that wrote an event (or the
    domain's document) had run — the vision stage only when its picture's outcome is saved too."""
    stages = {row["stage"] for row in tables["run_events"]}
    documents = tables["documents"]
    picture = data.get("image")
    settled = isinstance(picture, dict) and picture.get("analysis") in SETTLED_PICTURES
    states: dict[str, Any] = {
        "years_checked": StageName.YEARS in stages,
        "vision_checked": StageName.VISION in stages and settled,
        "domain_data_checked": StageName.DOMAIN in stages
        or any(row["fetched_via"] == Document.FetchedVia.DOMAIN for row in documents),
        "route": "",
    }
    if topic["domain"] and answered and not tables["subqueries"]:
        passages = any(
            row["fetched_via"] == Document.FetchedVia.PRIVATE and row["hit"] is None for row in documents
        )
        states["route"] = Topic.Route.DOCUMENTS if passages else Topic.Route.DIRECT
    elif topic["domain"]:
        states["route"] = Topic.Route.SEARCH
    return {name: value for name, value in states.items() if name not in data["topic"]}


# --- The rules live data keeps: web addresses only, event lines of flat arguments ---------------


def _check_like_live_data(tables: dict[str, list[dict[str, Any]]]) -> None:
    for name in ("hits", "documents"):
        for index, row in enumerate(tables[name]):
            _check_url(row["url"], f"{name}[{index}]")
    for index, row in enumerate(tables["run_events"]):
        where = f"run_events[{index}]"
        if len(row["message"]) > MAX_EVENT_MESSAGE_CHARS or not _event_data_ok(row["data"]):
            message = _("In the archive, %(row)s is not a progress line MindSearch writes.")
            raise ArchiveError(message % {"row": where})


def _check_row_counts(data: dict[str, Any]) -> None:
    for name, limit in ROW_LIMITS.items():
        rows = data.get(name)
        if isinstance(rows, list) and len(rows) > limit:
            message = _("The archive holds more than %(n)d rows of %(table)s.")
            raise ArchiveError(message % {"n": limit, "table": name})


def _check_llm_calls(calls: list[dict[str, Any]]) -> None:
    for index, row in enumerate(calls):
        for name, limit in LLM_CALL_LIMITS.items():
            if row[name] > limit:
                message = _("In the archive, %(row)s has a missing or invalid %(field)s.")
                raise ArchiveError(message % {"row": f"llm_calls[{index}]", "field": name})


def _check_plan_size(subqueries: list[dict[str, Any]]) -> None:
    """The plan meets the same cap as one made on the page, so resuming it cannot cost more."""
    from research import workflow  # the workflow imports the pipeline; only needed here

    try:
        workflow.check_plan_size(sum(1 for row in subqueries if row["round"] == 1))
    except workflow.OverLimit as over:
        raise ArchiveError(over.message) from None


def _check_url(url: Any, where: str) -> None:
    """Pages and sources are web pages: http(s) or nothing (a private document has no URL)."""
    if url in ("", None):
        return
    if not isinstance(url, str) or not url.lower().startswith(WEB_SCHEMES):
        message = _("In the archive, %(row)s has an address that is not a web page (http or https).")
        raise ArchiveError(message % {"row": where})


def _event_data_ok(data: dict[str, Any]) -> bool:
    if len(json.dumps(data, ensure_ascii=False)) > MAX_EVENT_DATA_BYTES:
        return False
    spec = data.get(event_text.I18N_KEY)
    return spec is None or _phrase_ok(spec, nested_allowed=True)


def _phrase_ok(spec: Any, *, nested_allowed: bool) -> bool:
    """A phrase as the worker writes it: a short msgid, arguments that are text or numbers,
    and at most one level of nested phrase (or list of them)."""
    if not isinstance(spec, dict) or set(spec) - {"msgid", "args"}:
        return False
    msgid, args = spec.get("msgid"), spec.get("args", {})
    if not isinstance(msgid, str) or len(msgid) > event_text.MAX_MSGID_CHARS or not isinstance(args, dict):
        return False
    for value in args.values():
        if isinstance(value, dict):
            if not (nested_allowed and _phrase_ok(value, nested_allowed=False)):
                return False
        elif isinstance(value, list):
            items_ok = all(_phrase_ok(item, nested_allowed=False) for item in value)
            if not (nested_allowed and event_text.is_phrase_list(value) and items_ok):
                return False
        elif not event_text.is_flat(value) or (
            isinstance(value, str) and len(value) > event_text.MAX_ARG_CHARS
        ):
            return False
    return True


def _check_table(table: Table, rows: Any, earlier: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    if not isinstance(rows, list):
        raise ArchiveError(_("In the archive, %(table)s is not a list.") % {"table": table.name})
    known = {name: {row["id"] for row in earlier[target]} for name, target in table.refs.items()}
    checked, ids = [], set()
    for index, raw in enumerate(rows):
        where = f"{table.name}[{index}]"
        row = check_row(table.model, table.fields, raw, where)
        row["id"] = raw.get("id")
        if type(row["id"]) is not int or row["id"] in ids:
            raise ArchiveError(_("In the archive, %(row)s has a missing or repeated id.") % {"row": where})
        ids.add(row["id"])
        for name in table.refs:
            row[name] = _check_ref(table.model, name, raw.get(name), known[name], where)
        checked.append(row)
    for name in table.unique:
        _check_unique(table, name, checked)
    return checked


def report_rows(
    data: dict[str, Any], key: str, report: dict[str, Any] | None, *, orphaned: str, limit: int, too_many: str
) -> list[Any]:
    """The rows an archive holds under `key` about its report (the citation check, the follow-up
    thread), not yet checked one by one; [] when it has none (an archive from before them).
    `orphaned` is the refusal when there are rows but no report, `too_many` (with %(n)d) when
    there are more than `limit`."""
    rows = data.get(key, [])
    if rows is None:
        return []
    if not isinstance(rows, list):
        raise ArchiveError(_("In the archive, %(table)s is not a list.") % {"table": key})
    if rows and report is None:
        raise ArchiveError(orphaned)
    if len(rows) > limit:
        raise ArchiveError(too_many % {"n": limit})
    return rows


def _check_outline(topic: dict[str, Any]) -> None:
    """The report's kind, sections and length as the form would take them (research/pipeline/outline.py)."""
    titles = topic["outline"]
    try:
        if not isinstance(titles, list) or not all(isinstance(t, str) for t in titles):
            raise outline.OutlineError("not a list of titles")
        topic["outline"] = outline.read_outline(titles)
        topic["report_kind"] = outline.read_kind(topic["report_kind"])
        topic["report_length"] = outline.read_length(topic["report_length"])
    except outline.OutlineError:
        raise ArchiveError(
            _("In the archive, the report's kind, sections or length are not valid.")
        ) from None


def column_of(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    """A column the archive writes: a concrete field, never a relation's reverse side."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field):
        raise TypeError(f"{model.__name__}.{name} is not a column")
    return field


def check_row(model: type[models.Model], names: tuple[str, ...], raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ArchiveError(_("In the archive, %(row)s is not an object.") % {"row": where})
    row = {}
    for name in names:
        column = column_of(model, name)
        if name not in raw and (column.has_default() or column.null):
            row[name] = column.get_default()
            continue
        try:
            row[name] = clean_value(column, raw.get(name))
        except ValidationError:
            message = _("In the archive, %(row)s has a missing or invalid %(field)s.")
            raise ArchiveError(message % {"row": where, "field": name}) from None
    return row


def clean_value(column: models.Field, value: Any) -> Any:
    """The value as the column stores it, or ValidationError: types are checked, not coerced,
    so a hostile archive cannot smuggle in what the pipeline would never have written."""
    if value is None:
        if column.null:
            return None
        raise ValidationError("null")
    kind = column.get_internal_type()
    if kind in ("CharField", "TextField"):
        ok = isinstance(value, str) and _storable(value)
        ok = ok and (column.max_length is None or len(value) <= column.max_length)
    elif kind.endswith("IntegerField"):
        ok = type(value) is int
        if ok:
            column.run_validators(value)  # the column's range
    elif kind == "FloatField":
        ok = type(value) in (int, float) and math.isfinite(value)
    elif kind == "BooleanField":
        ok = type(value) is bool
    elif kind == "DateTimeField":
        value = _parse_time(value)
        ok = value is not None
    elif kind == "DateField":
        value = _parse_date(value)
        ok = value is not None
    elif kind == "JSONField":
        ok = isinstance(value, type(column.get_default())) and "\\u0000" not in json.dumps(value)
    else:
        ok = False
    if not ok or (column.choices and not _a_choice(column, value)):
        raise ValidationError("invalid")
    return value


def _a_choice(column: models.Field, value: Any) -> bool:
    return value in dict(column.flatchoices) or (value == "" and column.blank)


def _parse_date(value: Any) -> date | None:
    try:
        return parse_date(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _storable(text: str) -> bool:
    """PostgreSQL text holds neither NUL nor a lone surrogate (which JSON can spell as \\ud800)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _parse_time(value: Any) -> datetime | None:
    try:
        parsed = parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if parsed is not None and timezone.is_naive(parsed):
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def _check_ref(model: type[models.Model], name: str, value: Any, known: set[int], where: str) -> int | None:
    if value is None and column_of(model, name).null:
        return None
    if type(value) is not int or value not in known:
        message = _("In the archive, %(row)s refers to a %(field)s that is not in the archive.")
        raise ArchiveError(message % {"row": where, "field": name})
    return value


def _check_unique(table: Table, name: str, rows: list[dict[str, Any]]) -> None:
    values = [row[name] for row in rows if row[name] is not None]
    if len(set(values)) != len(values):
        message = _("In the archive, two rows of %(table)s have the same %(field)s.")
        raise ArchiveError(message % {"table": table.name, "field": name})


def _check_papers(hits: list[dict[str, Any]] | None, sources: list[Any] | None) -> None:
    """A paper's DOI, authors and year as the scholarly clients write them (research/archive/papers.py)."""
    try:
        for index, row in enumerate(hits or []):
            row["paper"] = archive_papers.clean_paper(row["paper"], f"hits[{index}]")
        for source in sources or []:
            archive_papers.clean_source(source, "report.sources")
    except ValueError as exc:
        message = _("In the archive, %(row)s has a paper's details that are not valid.")
        raise ArchiveError(message % {"row": str(exc)}) from None


def _check_sources(sources: list[Any], documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    known = {row["id"] for row in documents}
    for source in sources:
        if isinstance(source, dict):
            _check_url(source.get("url"), "report.sources")
        document_id = source.get("document_id") if isinstance(source, dict) else "missing"
        if document_id is not None and (type(document_id) is not int or document_id not in known):
            raise ArchiveError(_("In the archive, the report cites a document that is not in it."))
    return sources
