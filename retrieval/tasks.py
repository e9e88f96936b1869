"""Background tasks (django-q2). They take ids, never model instances. Indexing is a heavy job
of the fair queue (mindsearch/fairq.py): one account's files never take every worker."""

from __future__ import annotations

from django.db import transaction

from mindsearch import fairq
from retrieval.ingest import ingest
from retrieval.models import UploadedDocument


def ingest_document(upload_id: int, resuming: bool = False) -> None:
    ingest(upload_id, resuming=resuming)


def enqueue_ingest(upload: UploadedDocument, *, resuming: bool = False) -> None:
    """Queue the upload's indexing once the caller's transaction commits; `resuming`: a run that
    goes on with one that was stopped."""
    arguments: tuple[object, ...] = (upload.pk, True) if resuming else (upload.pk,)
    transaction.on_commit(
        lambda: fairq.submit(
            fairq.FILES,
            upload.owner_id,
            "retrieval.tasks.ingest_document",
            *arguments,
            task_name=f"index upload {upload.pk}",
        )
    )
