"""Heavy work off the request (issue 15): a topic archive is imported by the worker while the
page follows the job; the web request only stores the upload."""

from __future__ import annotations

import io
import json
import re
import zipfile
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django_q.models import OrmQ

from research import archive, imports
from research.models import RunEvent, Topic
from tests.reliability.conftest import _finished_topic

pytestmark = pytest.mark.django_db


@pytest.fixture
def big_archive(alice: User, settings: Any, tmp_path: Any) -> bytes:
    """A finished topic with 5,000 run events, as an archive."""
    settings.MEDIA_ROOT = tmp_path
    topic = _finished_topic(alice)
    RunEvent.objects.bulk_create(
        RunEvent(topic=topic, seq=n, stage="search", message=f"line {n}") for n in range(1, 5001)
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(archive.JSON_NAME, archive.dumps(archive.topic_data(topic)))
    return buffer.getvalue()


def upload(client: Client, content: bytes) -> Any:
    return client.post("/topics/import/", {"archive": SimpleUploadedFile("t.zip", content)})


def test_the_request_only_queues_the_import_and_the_page_follows_it(
    big_archive: bytes, bob: User, bob_client: Client, alice_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    response = upload(bob_client, big_archive)
    found = re.fullmatch(r"/topics/import/([0-9a-f]{32})/", response["Location"])
    assert found is not None, response["Location"]
    job_id = found.group(1)
    assert not Topic.objects.filter(owner=bob).exists()  # nothing imported inside the request
    assert OrmQ.objects.count() == 1  # the worker's task
    waiting = bob_client.get(response["Location"])
    assert waiting.status_code == 200 and "Waiting for the worker" in waiting.content.decode()
    assert 'hx-trigger="every 2s"' in waiting.content.decode()  # polls by htmx: no meta refresh (CSP)
    assert alice_client.get(response["Location"]).status_code == 404  # only its owner sees it
    seen: list[tuple[str, int, int]] = []
    real_update = imports._update

    def watching(job_id: str, job: dict, **changes: Any) -> None:
        real_update(job_id, job, **changes)
        seen.append((job["state"], job["done"], job["total"]))

    monkeypatch.setattr(imports, "_update", watching)
    assert imports.run(job_id) == imports.DONE
    saving = [entry for entry in seen if entry[0] == imports.SAVING]
    assert saving and saving[-1][2] >= 5000 and saving[-1][1] > saving[0][1]  # rows counted as saved
    polled = bob_client.get(response["Location"], HTTP_HX_REQUEST="true")
    copy = Topic.objects.get(owner=bob)
    assert polled.status_code == 204 and polled["HX-Redirect"] == f"/topics/{copy.pk}/"
    done = bob_client.get(response["Location"])
    assert done.status_code == 302 and done["Location"] == f"/topics/{copy.pk}/"
    assert copy.events.count() == 5000
    # The event log is paged: the page shows the latest lines and says how many it leaves out.
    page = bob_client.get(done["Location"]).content.decode()
    assert "4700 earlier events are not shown" in page
    assert 'data-seq="5000"' in page and 'data-seq="4700"' not in page
    assert not list((imports._folder()).iterdir())  # the stored upload is removed


def test_a_refused_archive_says_why_on_the_job_page(
    bob: User, bob_client: Client, settings: Any, tmp_path: Any
) -> None:
    settings.MEDIA_ROOT = tmp_path
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr(archive.JSON_NAME, json.dumps({"format": "something else"}))
    response = upload(bob_client, buffer.getvalue())
    job_id = response["Location"].rstrip("/").rsplit("/", 1)[1]
    assert imports.run(job_id) == imports.FAILED
    page = bob_client.get(response["Location"], follow=True).content.decode()
    assert "Nothing was imported" in page and "not a MindSearch topic archive" in page
    assert not Topic.objects.filter(owner=bob).exists()
