"""A topic as one file: export to a zip, import into any account.

The zip holds `topic.json` — the topic and every row its run produced, each table a list of
rows whose references are the ids they had at export — and `report.md` for people. Import
checks the whole archive before it writes anything (research/archive/checks.py), then creates
every row with new ids in one transaction for the importing user. Links to the exporter's
private documents (uploaded files, their chunks) cannot follow the topic into another account:
the text is kept, the link dropped.
"""

from __future__ import annotations

import io
import json
import logging
import zipfile
import zlib
from collections.abc import Callable
from datetime import date
from typing import IO, Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import DatabaseError, models, transaction
from django.template.defaultfilters import filesizeformat
from django.utils import timezone
from django.utils.translation import gettext as _

from research import export
from research.archive import citations, followups, image, series, shape
from research.archive.checks import (
    REPORT_FIELDS,
    ROW_LIMITS,
    TABLES,
    TOPIC_FIELDS,
    ArchiveError,
    Checked,
    Table,
    check,
)
from research.models import LLMCall, Report, RunEvent, Topic

log = logging.getLogger(__name__)

FORMAT = "mindsearch.topic"
VERSION = 1
JSON_NAME = "topic.json"
REPORT_NAME = "report.md"
# A deep topic with dozens of full pages is a few MB of JSON; these leave room for the biggest
# real ones while keeping a hostile upload from filling the web process's memory.
MAX_ARCHIVE_BYTES = 32 * 1024 * 1024
MAX_JSON_BYTES = 64 * 1024 * 1024
# The two files of an archive take about 150 bytes of zip directory.
MAX_DIRECTORY_BYTES = 4096
BLOCK_BYTES = 1024 * 1024
END_SIGNATURE, END_RECORD, ZIP64_LOCATOR = b"PK\x05\x06", 22, b"PK\x06\x07"


# --- Export ----------------------------------------------------------------------------------------


def export_topic(topic: Topic) -> bytes:
    """The topic as a zip archive (bytes); a topic still being researched is refused."""
    if topic.status in Topic.ACTIVE_STATUSES:
        raise ArchiveError(_("This topic is still being researched: export it when it has finished."))
    data = dumps(topic_data(topic))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(JSON_NAME, data)
        if Report.objects.filter(topic=topic).exists():
            archive.writestr(REPORT_NAME, export.report_markdown(topic))
    return buffer.getvalue()


def topic_data(topic: Topic) -> dict[str, Any]:
    data: dict[str, Any] = {"format": FORMAT, "version": VERSION, "exported_at": timezone.now()}
    data.update(_body(topic))
    # The versions before it, each with its report's changes (research/archive/series.py).
    earlier = [_body(version) for version in series.earlier_versions(topic)]
    data[series.KEY] = series.trim(earlier, series.row_count(data))
    return data


def _body(topic: Topic) -> dict[str, Any]:
    """One topic's part of an archive: its row, its report (with what changed) and its tables."""
    data: dict[str, Any] = {
        "topic": Topic.objects.filter(pk=topic.pk).values(*TOPIC_FIELDS).get(),
        "report": Report.objects.filter(topic=topic).values(*REPORT_FIELDS, "changes").first(),
    }
    for table in TABLES:
        rows = table.model._default_manager.filter(**{table.topic_path: topic}).order_by("pk")
        data[table.name] = list(rows.values("id", *table.fields, *table.refs))
    data[citations.KEY] = citations.export_rows(topic)
    data[followups.KEY] = followups.export_rows(topic)
    data[image.KEY] = image.export_row(topic)
    return data


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, default=_full_time, ensure_ascii=False, indent=1)


def _full_time(value: Any) -> str:
    # Not DjangoJSONEncoder: it cuts times to milliseconds, and a round trip must keep them.
    if isinstance(value, date):  # datetimes too
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def filename(topic: Topic) -> str:
    return export.filename(topic, "zip")


# --- Reading an archive ----------------------------------------------------------------------------


def read_archive(upload: IO[bytes], room: int | None = None) -> dict[str, Any]:
    return read_archive_sized(upload, room)[0]


def read_archive_sized(upload: IO[bytes], room: int | None = None) -> tuple[dict[str, Any], int]:
    """The archive's `topic.json`, parsed; anything but a well-formed archive of this format and
    version is an ArchiveError. Nothing is extracted to disk: names are only compared. The JSON
    is inflated block by block and its shape counted as it comes (`shape.Shape`), and it may
    unpack to at most `room` bytes (what its owner may still store; None: no limit), so nothing
    is parsed that would not be imported."""
    if _directory_size(upload) > MAX_DIRECTORY_BYTES:
        raise ArchiveError(_("The archive lists more files than a topic archive holds."))
    try:
        with zipfile.ZipFile(upload) as archive:
            raw = _read_member(archive, room)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as exc:
        log.info("unreadable topic archive: %s", exc)
        raise ArchiveError(_("This is not a readable zip archive.")) from None
    except (RuntimeError, NotImplementedError):  # encrypted, or an unsupported compression
        raise ArchiveError(_("The archive is encrypted or compressed in an unsupported way.")) from None
    return parse(raw), len(raw)


def _directory_size(upload: IO[bytes]) -> int:
    """The size of the zip's central directory, read from its end record the way zipfile finds
    it, before zipfile builds an object per listed file (a 32 MB upload can list 600,000)."""
    upload.seek(0, io.SEEK_END)
    end = upload.tell()
    upload.seek(max(0, end - END_RECORD - 65_535))  # the record, after a comment of up to 64 kB
    tail = upload.read()
    upload.seek(0)
    if tail[-END_RECORD:-18] == END_SIGNATURE and tail[-2:] == b"\0\0":
        at = len(tail) - END_RECORD
    else:
        at = tail.rfind(END_SIGNATURE)
    if at < 0:
        return 0  # not a zip at all: zipfile says so
    if tail[max(0, at - 20) : at - 16] == ZIP64_LOCATOR:
        return 2**32  # zip64: never written for a topic, and it would bring its own sizes
    return int.from_bytes(tail[at + 12 : at + 16], "little")


def _read_member(archive: zipfile.ZipFile, room: int | None) -> bytearray:
    names = [info.filename for info in archive.infolist()]
    unexpected = [name for name in names if name not in (JSON_NAME, REPORT_NAME)]
    if unexpected:
        raise ArchiveError(
            _("The archive holds an unexpected file: %(name)s.") % {"name": unexpected[0][:100]}
        )
    if len(set(names)) != len(names):
        raise ArchiveError(_("The archive holds the same file twice."))
    if JSON_NAME not in names:
        raise ArchiveError(
            _("The archive has no %(name)s: it is not a MindSearch topic.") % {"name": JSON_NAME}
        )
    info = archive.getinfo(JSON_NAME)
    if info.file_size > MAX_JSON_BYTES:
        raise ArchiveError(_too_big())
    if room is not None and info.file_size > room:
        raise ArchiveError(_over_quota(info.file_size, room))
    limits = {**ROW_LIMITS, followups.KEY: settings.RESEARCH_MAX_FOLLOWUPS, series.KEY: series.MAX_VERSIONS}
    counted = shape.Shape(limits, shape.OTHER_ROWS)
    raw = bytearray()
    with archive.open(info) as member:
        # zipfile stops at the declared size, so a member lying about it cannot inflate further.
        while block := member.read(BLOCK_BYTES):
            raw += block
            if len(raw) > MAX_JSON_BYTES:
                raise ArchiveError(_too_big())
            if room is not None and len(raw) > room:
                raise ArchiveError(_over_quota(len(raw), room))
            counted.feed(block)
    return raw


def _over_quota(size: int, room: int) -> str:
    message = _("The archive unpacks to %(size)s, more than the %(room)s your account may still store.")
    return message % {"size": filesizeformat(size), "room": filesizeformat(max(0, room))}


def _too_big() -> str:
    return _("The archive unpacks to more than %(mb)d MB.") % {"mb": MAX_JSON_BYTES // 2**20}


def parse(raw: bytes | bytearray) -> dict[str, Any]:
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ArchiveError(_("The archive's %(name)s is not valid JSON.") % {"name": JSON_NAME}) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ArchiveError(_("This is not a MindSearch topic archive."))
    if data.get("version") != VERSION:
        message = _("The archive is version %(found)s; this MindSearch reads version %(version)s.")
        raise ArchiveError(message % {"found": str(data.get("version"))[:20], "version": VERSION})
    return data


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


# --- Import ----------------------------------------------------------------------------------------


def import_archive(upload: IO[bytes], owner: User) -> Topic:
    data, size = read_archive_sized(upload)
    return import_topic(data, owner, archive_bytes=size)


Progress = Callable[[int, int], None]


def import_topic(
    data: dict[str, Any], owner: User, progress: Progress | None = None, archive_bytes: int = 1
) -> Topic:
    """A new topic of `owner` with every row of the archive, or ArchiveError and nothing saved.
    `progress(done, total)` hears of the rows saved so far (the import job's page shows it);
    `archive_bytes`, what the archive unpacked to, is kept on the topic (never 0: it is imported)."""
    earlier = [_check_body(body, f"{series.KEY}[{index}]") for index, body in enumerate(series.bodies(data))]
    own = _check_body(data, "report")
    try:
        with transaction.atomic():
            # An imported series is data: every version is marked imported, the newest counts
            # what the whole archive unpacked to against its owner's storage.
            previous: Topic | None = None
            for body in earlier:
                previous = _create_body(body, owner, lambda done, total: None, 1, previous)
            return _create_body(own, owner, progress or (lambda done, total: None), archive_bytes, previous)
    except DatabaseError:
        # What the checks above do not cover (say, a JSON value PostgreSQL refuses) ends here.
        log.exception("a checked topic archive could not be saved")
        raise ArchiveError(_("The archive holds data the database refuses.")) from None


Body = tuple[Checked, list[dict[str, Any]], list[dict[str, Any]], Any, dict[str, Any] | None]


def _check_body(data: dict[str, Any], where: str) -> Body:
    """One topic of the archive checked whole, nothing saved: its rows, its report's citation
    verdicts, follow-ups, picture and what changed since the version before it."""
    checked = check(data)
    verdicts = citations.check(data, checked.report)
    tables = checked.tables
    thread = followups.check(data, checked.report, tables["subqueries"], tables["documents"])
    picture = image.check(data)
    report = data.get("report")
    changes = series.check_changes(report.get("changes") if isinstance(report, dict) else None, where)
    return checked, verdicts, thread, picture, changes


def _create_body(
    body: Body, owner: User, progress: Progress, archive_bytes: int, previous: Topic | None
) -> Topic:
    from research.presenters import store_thread

    checked, verdicts, thread, picture, changes = body
    checked.topic["archive_bytes"] = max(1, archive_bytes)
    if previous is not None:  # a later version of the series the archive's first version began
        checked.topic["series"] = previous.series or previous.pk
        checked.topic["previous_version"] = previous
    topic = _create(checked, owner, verdicts, progress)
    followups.create(topic, thread, checked.new_ids)
    store_thread(topic)  # rendered here, in the worker, never by a page view (issue 26)
    image.create(topic, picture)
    if changes is not None and checked.report is not None:
        changes["previous_topic"] = previous.pk if previous is not None else None
        Report.objects.filter(topic=topic).update(changes=changes)
    return topic


def _create(checked: Checked, owner: User, verdicts: list[dict[str, Any]], progress: Progress) -> Topic:
    from research.presenters import store_marked

    fields = dict(checked.topic)
    events = checked.tables["run_events"]
    fields["last_event_seq"] = max([fields["last_event_seq"], *(event["seq"] for event in events)])
    topic = Topic.objects.create(owner=owner, **fields)
    _restore_created_at(Topic, [topic], [checked.topic])
    new_ids: dict[str, dict[int, int]] = {}
    total, done = sum(len(rows) for rows in checked.tables.values()), 0
    for table in TABLES:
        progress(done, total)
        rows = checked.tables[table.name]
        done += len(rows)
        objects = [table.model(**_values(table, row, topic, owner, new_ids)) for row in rows]
        created = table.model._default_manager.bulk_create(objects, batch_size=500)
        if "created_at" in table.fields:
            _restore_created_at(table.model, created, rows)
        new_ids[table.name] = {row["id"]: obj.pk for row, obj in zip(rows, created, strict=True)}
    checked.new_ids = new_ids
    if checked.report is not None:
        documents = new_ids["documents"]
        sources = [
            {**s, "document_id": _new_id(s.get("document_id"), documents)} for s in checked.report["sources"]
        ]
        report = Report.objects.create(topic=topic, **{**checked.report, "sources": sources})
        _restore_created_at(Report, [report], [checked.report])
        citations.create(report, verdicts)
        store_marked(report)  # rendered here, in the worker, never by a page view (issue 26)
    return topic


def _values(
    table: Table,
    row: dict[str, Any],
    topic: Topic,
    owner: User,
    new_ids: dict[str, dict[int, int]],
) -> dict[str, Any]:
    values = {name: row[name] for name in table.fields}
    for name, target in table.refs.items():
        values[f"{name}_id"] = None if row[name] is None else new_ids[target][row[name]]
    if table.topic_path == "topic":
        values["topic"] = topic
    if table.model is LLMCall:
        # A record of what the exporter's run cost, not spending by the importer.
        values.update(user=owner, imported=True)
    if table.model is RunEvent:
        values["data"] = _remap_event_data(row["data"], new_ids.get("hits", {}))
    return values


def _remap_event_data(data: dict[str, Any], hit_ids: dict[int, int]) -> dict[str, Any]:
    """Scoring events name the hits they scored by id; point them at the new rows."""
    hits = data.get("hits")
    if not isinstance(hits, list):
        return data
    remapped = [
        {**item, "hit": _new_id(item.get("hit"), hit_ids)} if isinstance(item, dict) else item
        for item in hits
    ]
    return {**data, "hits": remapped}


def _new_id(old: Any, new_ids: dict[int, int]) -> int | None:
    return new_ids.get(old) if type(old) is int else None


def _restore_created_at(model: type[models.Model], objects: list[models.Model], rows: list[dict]) -> None:
    """Creating sets `created_at` to now (auto_now_add); put back when each row was made, which
    the page shows (the event log's times, the report's date)."""
    for obj, row in zip(objects, rows, strict=True):
        setattr(obj, "created_at", row["created_at"])  # noqa: B010 — any of the archive's models
    model._default_manager.bulk_update(objects, ["created_at"], batch_size=500)
