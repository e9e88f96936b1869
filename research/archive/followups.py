"""The follow-up thread in a topic archive: written under "followups", checked like every other row
before anything is saved, created after the report with its references remapped (the sub-query
a follow-up searched with, the documents its sources name). Archives without a thread import as
they always did. A follow-up still waiting or being answered is not a record of anything: it is
left out of an export and refused in an import."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from research.archive.checks import MAX_REPORT_CHARS, ArchiveError, check_row, report_rows
from research.models import FollowUp, Topic
from research.pipeline import citecheck

KEY = "followups"
FIELDS = (
    "position",
    "kind",
    "question",
    "section",
    "status",
    "searched",
    "answer",
    "sources",
    "citations",
    "model",
    "error",
    "created_at",
    "finished_at",
)
VERDICTS = {citecheck.SUPPORTED, citecheck.WEAK, citecheck.UNSUPPORTED}
METHODS = {citecheck.LOCAL, citecheck.LEXICAL, citecheck.LLM}
CITATION_TEXTS = ("sentence", "passage", "note")


def export_rows(topic: Topic) -> list[dict[str, Any]]:
    finished = topic.followups.exclude(status__in=FollowUp.PENDING_STATUSES).order_by("position")
    return list(finished.values("id", "subquery", *FIELDS))


def check(
    data: dict[str, Any],
    report: dict[str, Any] | None,
    subqueries: list[dict[str, Any]],
    documents: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The archive's follow-ups, every value checked; [] when it has none."""
    rows = report_rows(
        data,
        KEY,
        report,
        orphaned=_("The archive holds follow-up questions but no report."),
        limit=settings.RESEARCH_MAX_FOLLOWUPS,
        too_many=_("The archive holds more than %(n)d follow-up questions."),
    )
    known_subqueries = {row["id"] for row in subqueries}
    known_documents = {row["id"] for row in documents}
    numbered = len(report["sources"]) if report else 0
    positions: set[int] = set()
    checked = []
    for index, raw in enumerate(rows):
        where = f"{KEY}[{index}]"
        row = check_row(FollowUp, FIELDS, raw, where)
        subquery = raw.get("subquery") if isinstance(raw, dict) else None
        if subquery is not None and (type(subquery) is not int or subquery not in known_subqueries):
            raise _bad(where)
        row["id"], row["subquery"] = raw.get("id"), subquery
        if row["status"] in FollowUp.PENDING_STATUSES or row["position"] in positions:
            raise _bad(where)
        if len(row["answer"]) > MAX_REPORT_CHARS or len(row["question"]) > MAX_REPORT_CHARS:
            raise _bad(where)
        positions.add(row["position"])
        if row["status"] == FollowUp.Status.COMPLETED:
            numbered = _check_sources(row["sources"], numbered, known_documents, where)
            _check_citations(row["citations"], numbered, where)
        elif row["sources"] or row["citations"]:
            raise _bad(where)
        checked.append(row)
    return sorted(checked, key=lambda row: row["position"])


def _check_sources(sources: Any, numbered: int, documents: set[int], where: str) -> int:
    """A follow-up's new sources go on from the numbers before it; each names an archived document."""
    if not isinstance(sources, list):
        raise _bad(where)
    for source in sources:
        if not isinstance(source, dict) or type(source.get("n")) is not int or source["n"] != numbered + 1:
            raise _bad(where)
        numbered += 1
        if not isinstance(source.get("title", ""), str) or not isinstance(source.get("url", ""), str):
            raise _bad(where)
        if source.get("url") and not source["url"].startswith(("http://", "https://")):
            raise _bad(where)
        document_id = source.get("document_id")
        if document_id is not None and (type(document_id) is not int or document_id not in documents):
            raise _bad(where)
    return numbered


def _check_citations(citations: Any, numbered: int, where: str) -> None:
    if not isinstance(citations, list):
        raise _bad(where)
    for item in citations:
        if not isinstance(item, dict):
            raise _bad(where)
        n, index = item.get("n"), item.get("sentence_index")
        if type(n) is not int or not 1 <= n <= numbered or type(index) is not int or index < 0:
            raise _bad(where)
        if (
            item.get("verdict") not in VERDICTS
            or item.get("local_verdict", item.get("verdict")) not in VERDICTS
        ):
            raise _bad(where)
        if item.get("method") not in METHODS:
            raise _bad(where)
        if any(not isinstance(item.get(name, ""), str) for name in CITATION_TEXTS):
            raise _bad(where)
        for name in ("score", "coverage", "similarity"):
            value = item.get(name)
            if name == "similarity" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise _bad(where)


def _bad(where: str) -> ArchiveError:
    message = _("In the archive, %(row)s is not a follow-up question MindSearch writes.")
    return ArchiveError(message % {"row": where})


def create(topic: Topic, rows: list[dict[str, Any]], new_ids: dict[str, dict[int, int]]) -> None:
    documents, subqueries = new_ids.get("documents", {}), new_ids.get("subqueries", {})
    created = []
    for row in rows:
        values = {name: row[name] for name in FIELDS}
        values["sources"] = [
            {**source, "document_id": documents.get(source.get("document_id"))} for source in row["sources"]
        ]
        subquery = subqueries.get(row["subquery"]) if row["subquery"] is not None else None
        created.append(FollowUp(topic=topic, subquery_id=subquery, **values))
    saved = FollowUp.objects.bulk_create(created)
    # auto_now_add set them to now: put back when each was asked.
    for followup, row in zip(saved, rows, strict=True):
        followup.created_at = row["created_at"]
    FollowUp.objects.bulk_update(saved, ["created_at"])
