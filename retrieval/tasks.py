"""Background tasks (django-q2). They take ids, never model instances."""

from __future__ import annotations

from django.db import transaction
from django_q.tasks import async_task

from retrieval.ingest import ingest
from retrieval.models import UploadedDocument


def ingest_document(upload_id: int) -> None:
    ingest(upload_id)


def enqueue_ingest(upload: UploadedDocument) -> None:
    transaction.on_commit(
        lambda: async_task(
            "retrieval.tasks.ingest_document", upload.pk, task_name=f"index upload {upload.pk}"
        )
    )
