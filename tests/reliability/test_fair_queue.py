"""One user's heavy jobs cannot starve everyone's research (issue 26, finding 7).

Ingestion, imports, follow-ups and research shared one first-in-first-out queue: four slow PDFs
of one user took both workers, and another user's plan waited 119.6 s instead of 2.1 s. Heavy
jobs now go through the fair queue (mindsearch/fairq.py): one at a time per account and kind,
file work on all workers but one, a job past its caps queued again for later; failed documents
are indexed again only so often; the OCR budget of a file fits inside the worker's timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone
from django_q.models import OrmQ
from django_q.tasks import async_task

from mindsearch import fairq
from retrieval import parsing
from retrieval.ingest import ingest
from retrieval.models import UploadedDocument
from retrieval.uploads import UploadRejected, index_again
from tests.support import processes
from tests.support.fakes import Request, Response
from tests.support.world import TOPIC, world


@contextmanager
def held_elsewhere(kind: str, owner_id: int) -> Iterator[None]:
    """The owner's slot of `kind` held by another connection, as a job running on another worker."""
    taken, release = threading.Event(), threading.Event()
    outcome: list[bool] = []

    def hold() -> None:
        try:
            with fairq.slots(kind, owner_id) as held:
                outcome.append(held)
                taken.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait(10)
    assert outcome == [True]
    try:
        yield
    finally:
        release.set()
        thread.join(10)


def queued() -> list[tuple[Any, ...]]:
    return [task.args() for task in OrmQ.objects.all()]


@pytest.mark.django_db
def test_a_users_second_heavy_job_waits_without_holding_a_worker(
    alice: User, bob: User, settings: Any
) -> None:
    settings.FAIR_QUEUE_HEAVY_WORKERS = 2
    with held_elsewhere(fairq.FILES, alice.pk):
        started = time.monotonic()
        assert fairq.run(fairq.FILES, alice.pk, "builtins.len", "abc") == fairq.DEFERRED
        assert time.monotonic() - started < 1  # its worker is free at once
        [task] = OrmQ.objects.all()
        assert task.args() == (fairq.FILES, alice.pk, "builtins.len", "abc")
        assert task.kwargs()["deferred"] == 1
        assert task.lock > timezone.now()  # workers see it again only later
        # Another account's file, and the same account's other kind of work, go ahead.
        assert fairq.run(fairq.FILES, bob.pk, "builtins.len", "abcd") == 4
        assert fairq.run(fairq.FOLLOWUPS, alice.pk, "builtins.len", "ab") == 2
    assert fairq.run(fairq.FILES, alice.pk, "builtins.len", "abc") == 3  # its turn, once free


@pytest.mark.django_db
def test_file_work_leaves_a_worker_for_research(alice: User, bob: User, settings: Any) -> None:
    settings.FAIR_QUEUE_HEAVY_WORKERS = 1
    with held_elsewhere(fairq.FILES, alice.pk):
        assert fairq.run(fairq.FILES, bob.pk, "builtins.len", "abc") == fairq.DEFERRED
        assert fairq.run(fairq.FOLLOWUPS, bob.pk, "builtins.len", "ab") == 2
    assert fairq.run(fairq.FILES, bob.pk, "builtins.len", "abc") == 3


@pytest.mark.django_db
def test_a_job_that_keeps_waiting_is_looked_at_less_often(alice: User, settings: Any) -> None:
    settings.FAIR_QUEUE_RETRY_SECONDS = 2.0
    with held_elsewhere(fairq.FILES, alice.pk):
        for deferred, wait in ((0, 2.0), (3, 8.0), (50, fairq.MAX_RETRY_SECONDS)):
            OrmQ.objects.all().delete()
            before = timezone.now()
            fairq.run(fairq.FILES, alice.pk, "builtins.len", "abc", deferred=deferred)
            [task] = OrmQ.objects.all()
            assert task.kwargs()["deferred"] == deferred + 1
            assert wait <= (task.lock - before).total_seconds() < wait + 1


@pytest.mark.django_db
def test_a_failed_document_is_indexed_again_only_so_often(
    alice: User, alice_client: Client, settings: Any, tmp_path: Any
) -> None:
    settings.UPLOAD_MAX_INDEX_ATTEMPTS = 3
    settings.MEDIA_ROOT = tmp_path
    document = UploadedDocument.objects.create(owner=alice, original_name="slow.pdf", sha256="0" * 64)
    document.file.save("slow.pdf", content=_text("%PDF-1.4 not really a PDF"))
    for attempt in range(1, 4):
        ingest(document.pk)  # it fails, as a hostile file that runs out of time would, and counts
        document.refresh_from_db()
        assert document.index_attempts == attempt and document.status == UploadedDocument.Status.FAILED
        if attempt < 3:
            index_again(document)
    with pytest.raises(UploadRejected, match="3 times"):
        index_again(document)
    response = alice_client.post(f"/documents/{document.pk}/retry/", follow=True)
    assert "3 times" in response.content.decode()
    assert UploadedDocument.objects.get(pk=document.pk).status == UploadedDocument.Status.FAILED


def test_a_files_parse_budget_fits_inside_the_workers_timeout() -> None:
    """OCR's 30 s a page for 100 pages was 3,000 s, past the 1,800 s after which the worker kills
    the task and hands it out again (three times)."""
    worst = parsing.DEFAULT_TIMEOUT_SECONDS * parsing.WALL_FACTOR + parsing.ocr_timeout(parsing.OCR_MAX_PAGES)
    timeout = int(str(django_settings.Q_CLUSTER["timeout"]))
    assert worst + 300 <= timeout  # 5 minutes left to embed
    assert parsing.ocr_timeout(2) == 2 * parsing.OCR_SECONDS_PER_PAGE  # per page while it fits


# --- With real workers -----------------------------------------------------------------------------

SLOW_EMBEDDING_SECONDS = 8.0


def slow_embeddings(request: Request) -> Response:
    """An /embeddings that takes its time, as 22,000 glyphs take pdfminer's: the worker is busy."""
    time.sleep(SLOW_EMBEDDING_SECONDS)
    inputs = request.json()["input"]
    data = [{"object": "embedding", "index": i, "embedding": [1.0] * 384} for i in range(len(inputs))]
    return Response(200, {"object": "list", "model": "fake-embed-384", "data": data})


def wait_for(condition: Any, timeout: float, message: str) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, message
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_another_users_plan_is_not_stuck_behind_one_users_slow_files(alice: User, bob: User) -> None:
    from research.models import Topic
    from retrieval.tasks import enqueue_ingest

    def plan_seconds(n: int) -> float:
        topic = Topic.objects.create(owner=bob, question=f"{TOPIC} ({n})")
        async_task("research.tasks.plan", topic.pk)
        planned = lambda: Topic.objects.get(pk=topic.pk).status != Topic.Status.PLANNING  # noqa: E731
        return wait_for(planned, 120, "the plan never came")

    with world() as w:
        w.llm.routes[("POST", "/v1/embeddings")] = slow_embeddings
        env = processes.process_env(
            **w.env(), MINDSEARCH_WORKERS="2", EMBEDDING_BACKEND="openai", EMBEDDING_MODEL="fake-embed-384"
        )
        documents = [
            UploadedDocument.objects.create(
                owner=alice, original_name=f"n{n}.md", sha256=f"{n:064d}", content_type="text/markdown"
            )
            for n in range(4)
        ]
        for n, document in enumerate(documents):
            document.file.save(f"n{n}.md", content=_text(f"# Notes {n}\n\nQuokkas eat leaves. " * 20))
        with processes.qcluster(env):
            plan_seconds(0)  # the workers are up and warm
            unloaded = plan_seconds(1)
            for document in documents:
                enqueue_ingest(document)
            # Old code: both workers took the first two files here, and the plan queued behind them.
            wait_for(lambda: bool(w.llm.requests_to("/v1/embeddings")), 30, "no file was indexed")
            loaded = plan_seconds(2)
            busy = _most_at_once(documents, timeout=4 * SLOW_EMBEDDING_SECONDS + 90)
    assert loaded < unloaded + 3, (unloaded, loaded)
    assert busy == 1  # alice's files went one at a time
    assert [d.status for d in UploadedDocument.objects.filter(owner=alice)] == ["ready"] * 4


def _text(text: str) -> Any:
    from django.core.files.base import ContentFile

    return ContentFile(text.encode())


def _most_at_once(documents: list[UploadedDocument], timeout: float) -> int:
    """Until every document is settled: the most of them being indexed at one moment."""
    ids = [document.pk for document in documents]
    most, started = 0, time.monotonic()
    while True:
        statuses = list(UploadedDocument.objects.filter(pk__in=ids).values_list("status", flat=True))
        most = max(most, sum(status in ("parsing", "embedding") for status in statuses))
        if all(status in UploadedDocument.SETTLED for status in statuses):
            return most
        assert time.monotonic() - started < timeout, statuses
        time.sleep(0.1)
