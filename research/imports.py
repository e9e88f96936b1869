"""Topic archives are imported by the worker, not inside the web request.

A 32 MB archive of 90,000 events took a web process a minute; now the page stores the upload
(MEDIA_ROOT/imports/, readable by this account only), queues `run`, and answers at once with a
page that follows the job: queued, checking, saving rows (n of m), then the new topic or the
reason nothing was imported. The job's state lives in Django's cache (every web process and
worker sees it) for a day, and only its owner can see it.

An import is stored data like an upload: what its JSON unpacks to counts against the owner's
UPLOAD_MAX_STORAGE_BYTES with their documents (checked when it is uploaded, and again as it is
inflated, before anything is parsed), and an account has at most IMPORT_MAX_PENDING imports
waiting or under way. The job runs through the fair queue (mindsearch/fairq.py): one heavy job
per account at a time, never every worker.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import Sum
from django.template.defaultfilters import filesizeformat
from django.utils import translation
from django.utils.translation import gettext as _

from mindsearch import fairq
from research import archive
from research.archive.checks import ArchiveError
from research.models import Topic
from retrieval import uploads

log = logging.getLogger(__name__)

JOB_SECONDS = 24 * 3600
QUEUED, CHECKING, SAVING, DONE, FAILED = "queued", "checking", "saving", "done", "failed"


def _key(job_id: str) -> str:
    return f"topic-import:{job_id}"


def _folder() -> Path:
    folder = Path(settings.MEDIA_ROOT) / "imports"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def _path(job_id: str) -> Path:
    return _folder() / f"{job_id}.zip"


def _owner_key(owner_id: int) -> str:
    return f"topic-import-owner:{owner_id}"


def stored_bytes(owner: User) -> int:
    """What the owner stores: their documents' files and what their imports unpacked to."""
    imported = Topic.objects.for_user(owner).aggregate(n=Sum("archive_bytes"))["n"] or 0
    return uploads.quota(owner)["bytes"] + imported


def room_for(owner: User) -> int | None:
    """Bytes the owner may still store (None: no limit)."""
    limit = settings.UPLOAD_MAX_STORAGE_BYTES
    return limit - stored_bytes(owner) if limit else None


def _check_room(owner: User, size: int) -> None:
    room = room_for(owner)
    if room is not None and size > room:
        message = _("The archive takes %(size)s, more than the %(room)s your account may still store.")
        raise ArchiveError(message % {"size": filesizeformat(size), "room": filesizeformat(max(0, room))})


def pending(owner_id: int) -> list[str]:
    """The owner's jobs still waiting or under way."""
    ids = cache.get(_owner_key(owner_id)) or []
    jobs = cache.get_many([_key(job_id) for job_id in ids])
    return [job_id for job_id in ids if jobs.get(_key(job_id), {}).get("state") not in (None, DONE, FAILED)]


def _claim_slot(owner_id: int, job_id: str) -> None:
    """Count the job among the owner's pending ones, or ArchiveError past IMPORT_MAX_PENDING."""
    with transaction.atomic():
        with connection.cursor() as cursor:  # two uploads at once are counted one after the other
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtext('research.imports'), %s::integer)", [owner_id]
            )
        waiting = pending(owner_id)
        if len(waiting) >= settings.IMPORT_MAX_PENDING:
            message = _("You have %(n)d imports waiting or under way; wait for them to finish.")
            raise ArchiveError(message % {"n": len(waiting)})
        cache.set(_owner_key(owner_id), [*waiting, job_id], JOB_SECONDS)


def start(upload: IO[bytes], owner: User) -> str:
    """Store the upload and queue its import; returns the job's id. ArchiveError when the owner
    has no room for it or too many imports pending."""
    _check_room(owner, getattr(upload, "size", None) or 0)
    job_id = uuid.uuid4().hex
    path = _path(job_id)
    with path.open("wb") as out:
        for block in upload.chunks() if hasattr(upload, "chunks") else iter(lambda: upload.read(2**20), b""):
            out.write(block)
    path.chmod(0o600)
    job = {"owner": owner.pk, "state": QUEUED, "done": 0, "total": 0, "topic": None, "error": ""}
    job["language"] = translation.get_language() or settings.LANGUAGE_CODE
    cache.set(_key(job_id), job, JOB_SECONDS)
    try:
        _claim_slot(owner.pk, job_id)
    except ArchiveError:
        cache.delete(_key(job_id))
        path.unlink(missing_ok=True)
        raise
    fairq.submit(
        fairq.FILES, owner.pk, "research.imports.run", job_id, task_name=f"import archive {job_id[:8]}"
    )
    return job_id


def status(job_id: str, owner: User) -> dict[str, Any] | None:
    """The job as its owner sees it; None for an unknown id or someone else's."""
    job = cache.get(_key(job_id))
    if not isinstance(job, dict) or job.get("owner") != owner.pk:
        return None
    return job


def _update(job_id: str, job: dict[str, Any], **changes: Any) -> None:
    job.update(changes)
    cache.set(_key(job_id), job, JOB_SECONDS)


def run(job_id: str) -> str:
    """The worker's task: check the archive, create the topic, record how it went."""
    job = cache.get(_key(job_id))
    path = _path(job_id)
    if not isinstance(job, dict) or job["state"] in (DONE, FAILED):
        path.unlink(missing_ok=True)
        return "gone"
    owner = get_user_model().objects.filter(pk=job["owner"]).first()
    try:
        with translation.override(job.get("language")):
            if owner is None:
                raise ArchiveError(_("The account that asked for this import no longer exists."))
            _update(job_id, job, state=CHECKING)
            with path.open("rb") as upload:
                data, size = archive.read_archive_sized(upload, room_for(owner))

            def saved(done: int, total: int) -> None:
                _update(job_id, job, state=SAVING, done=done, total=total)

            topic = archive.import_topic(data, owner, progress=saved, archive_bytes=size)
    except ArchiveError as exc:
        _update(job_id, job, state=FAILED, error=str(exc))
        return FAILED
    except FileNotFoundError:
        _update(job_id, job, state=FAILED, error=_("The uploaded archive is gone; upload it again."))
        return FAILED
    finally:
        path.unlink(missing_ok=True)
    _update(job_id, job, state=DONE, topic=topic.pk)
    log.info("imported topic %s for user %s", topic.pk, job["owner"])
    return DONE
