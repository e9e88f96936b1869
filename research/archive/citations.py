"""The report's citation check in a topic archive: written under "citations", checked like every
other row before anything is saved, created with the report. Archives from before the check
have no "citations" and import as they always did, without verdicts."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from research.archive.checks import ROW_LIMITS, ArchiveError, check_row, report_rows
from research.models import Citation, Report, Topic
from research.pipeline import citecheck

KEY = "citations"
FIELDS = (*citecheck.ROW_FIELDS, "created_at")


def export_rows(topic: Topic) -> list[dict[str, Any]]:
    return list(Citation.objects.filter(report__topic=topic).order_by("pk").values(*FIELDS))


def check(data: dict[str, Any], report: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The archive's citation rows, each value checked against its column; [] when it has none."""
    rows = report_rows(
        data,
        KEY,
        report,
        orphaned=_("The archive holds citation checks but no report."),
        limit=ROW_LIMITS[KEY],
        too_many=_("The archive holds more than %(n)d rows."),
    )
    source_count = len(report["sources"]) if report else 0
    checked, places = [], set()
    for index, raw in enumerate(rows):
        where = f"{KEY}[{index}]"
        row = _row(raw, where)
        if not 1 <= row["n"] <= source_count:
            message = _("In the archive, %(row)s checks a source the report does not have.")
            raise ArchiveError(message % {"row": where})
        place = (row["sentence_index"], row["n"])
        if place in places:
            message = _("In the archive, two rows of %(table)s have the same %(field)s.")
            raise ArchiveError(message % {"table": KEY, "field": "sentence_index, n"})
        places.add(place)
        checked.append(row)
    return checked


def _row(raw: Any, where: str) -> dict[str, Any]:
    return check_row(Citation, FIELDS, raw, where)


def create(report: Report, rows: list[dict[str, Any]]) -> None:
    created = Citation.objects.bulk_create([Citation(report=report, **row) for row in rows], batch_size=500)
    # auto_now_add set them to now: put back when the check was made.
    for citation, row in zip(created, rows, strict=True):
        citation.created_at = row["created_at"]
    Citation.objects.bulk_update(created, ["created_at"], batch_size=500)
