"""Imported archives are stored data with budgets, not history (issue 26, findings 5 and 8).

- A 65 KB archive that unpacks to 64 MB of `{}` cost a worker 1.7 GB: `json.loads` ran before
  any check. Now the inflated JSON is counted as it streams (research/archive/shape.py) and
  refused before it is parsed.
- A 422 KB archive stored 59 MB: imports now count against the owner's storage quota (checked
  at upload and as it inflates) and have caps on the rows of each kind.
- A 53 KB archive turned /metrics from 120 lines into 18,120 and carried 2.1e9 forged tokens
  into the usage figures: imported LLM calls and run events stay out of /metrics and its
  samples, and an imported call's values are held to what one call can be.
"""

from __future__ import annotations

import copy
import io
import json
import tracemalloc
import zipfile
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from mindsearch import metrics
from mindsearch.models import MetricSample
from research import archive, budget, imports, usage
from research.archive import checks, shape
from research.models import LLMCall, RunEvent, Topic
from tests.reliability.conftest import _finished_topic

pytestmark = pytest.mark.django_db


def zipped_json(text: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(archive.JSON_NAME, text)
    return buffer.getvalue()


def zipped(data: dict[str, Any]) -> bytes:
    return zipped_json(archive.dumps(data).encode())


def peak_while(work: Any) -> tuple[Any, int]:
    """What `work()` returned or raised, and the most memory Python held meanwhile."""
    tracemalloc.start()
    try:
        try:
            outcome: Any = work()
        except Exception as exc:
            outcome = exc
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def exported(alice: User) -> dict[str, Any]:
    topic = _finished_topic(alice)
    return json.loads(archive.dumps(archive.topic_data(topic)))


# --- Finding 8: the shape is counted before anything is parsed ------------------------------------


def empty_objects_archive(megabytes: int) -> bytes:
    head = b'{"format": "mindsearch.topic", "version": 1, "run_events": ['
    body = b"{}," * (megabytes * 2**20 // 3)
    return zipped_json(head + body + b"{}]}")


def test_an_archive_of_empty_objects_is_refused_before_it_is_parsed() -> None:
    content = empty_objects_archive(16)
    assert len(content) < 40_000  # a few KB that unpack to 16 MB: 5.6 million objects
    outcome, peak = peak_while(lambda: archive.read_archive(io.BytesIO(content)))
    assert isinstance(outcome, checks.ArchiveError), outcome
    # json.loads would have built 5.6 million dictionaries (over 400 MB); the scan stops early.
    assert peak < 40 * 2**20, f"{peak / 2**20:.0f} MB"


def test_a_long_list_of_numbers_deep_inside_is_refused_before_it_is_parsed(exported: dict) -> None:
    data = copy.deepcopy(exported)
    text = archive.dumps(data).encode()
    bomb = b'"filler": [' + b"0," * (6 * 2**20) + b"0], "
    content = zipped_json(
        text.replace(b'"format"', b'"topic_notes": {"x": {' + bomb + b'"y": 1}}, "format"', 1)
    )
    outcome, peak = peak_while(lambda: archive.read_archive(io.BytesIO(content)))
    assert isinstance(outcome, checks.ArchiveError) and "more values" in str(outcome)
    assert peak < 40 * 2**20, f"{peak / 2**20:.0f} MB"


def test_the_shape_scan_reads_strings_escapes_and_blocks_as_json_does() -> None:
    text = json.dumps(
        {"hits": [{"t": 'a "quoted" [not, a, list] {x}\\'}, {"t": "\u00e9"}], "run_events": []},
        ensure_ascii=True,
    ).encode()
    for size in (1, 2, 3, 7, len(text)):
        scanned = shape.Shape({"hits": 2, "run_events": 1}, 0)
        for start in range(0, len(text), size):
            scanned.feed(text[start : start + size])
        assert scanned.depth == 0 and not scanned.in_string
        assert scanned.rows == {"hits": 1, "run_events": 0} and scanned.containers == 5
    with pytest.raises(checks.ArchiveError, match="rows of hits"):
        shape.Shape({"hits": 1}, 0).feed(text)


def test_each_kind_of_row_has_a_cap_of_its_own(exported: dict, bob: User) -> None:
    """10,001 LLM calls is under the old cap of 100,000 rows, but more than one run makes."""
    data = copy.deepcopy(exported)
    call = {"stage": "plan", "model": "m", "prompt_tokens": 1, "created_at": "2026-01-01T00:00:00+00:00"}
    data["llm_calls"] = [{**call, "id": n} for n in range(checks.ROW_LIMITS["llm_calls"] + 1)]
    with pytest.raises(checks.ArchiveError, match="rows of llm_calls"):
        archive.read_archive(io.BytesIO(zipped(data)))
    with pytest.raises(checks.ArchiveError, match="rows of llm_calls"):
        archive.import_topic(data, bob)  # an archive handed in already parsed is held to it too
    assert not Topic.objects.filter(owner=bob).exists()


# --- Finding 8: imports are stored data, under the owner's quota ---------------------------------


def import_job(client: Client, content: bytes) -> tuple[Any, str | None]:
    response = client.post("/topics/import/", {"archive": SimpleUploadedFile("t.zip", content)})
    location = response.get("Location", "")
    job_id = location.rstrip("/").rsplit("/", 1)[1] if location.startswith("/topics/import/") else None
    return response, job_id


def test_an_import_counts_against_the_owners_storage(
    exported: dict, bob: User, bob_client: Client, settings: Any, tmp_path: Any
) -> None:
    settings.MEDIA_ROOT = tmp_path
    content = zipped(exported)
    unpacked = len(zipfile.ZipFile(io.BytesIO(content)).read(archive.JSON_NAME))
    settings.UPLOAD_MAX_STORAGE_BYTES = unpacked + unpacked // 2  # room for one import, not two
    response, job_id = import_job(bob_client, content)
    assert job_id and imports.run(job_id) == imports.DONE
    first = Topic.objects.get(owner=bob)
    assert first.archive_bytes == unpacked and imports.stored_bytes(bob) == unpacked
    # The second one fits as a zip (checked at upload) but not unpacked: refused before parsing.
    _, job_id = import_job(bob_client, content)
    assert job_id and imports.run(job_id) == imports.FAILED
    job = imports.status(job_id, bob)
    assert job is not None and "may still store" in job["error"]
    assert Topic.objects.filter(owner=bob).count() == 1
    # With no room left even for the zip, the upload itself is refused and nothing is stored.
    settings.UPLOAD_MAX_STORAGE_BYTES = unpacked + 10
    response, job_id = import_job(bob_client, content)
    assert job_id is None and response.status_code == 302
    assert not list((tmp_path / "imports").iterdir())


def test_an_account_has_only_so_many_imports_pending(
    exported: dict, bob: User, bob_client: Client, alice_client: Client, settings: Any, tmp_path: Any
) -> None:
    settings.MEDIA_ROOT = tmp_path
    content = zipped(exported)
    waiting = [import_job(bob_client, content)[1] or "" for _ in range(settings.IMPORT_MAX_PENDING)]
    assert all(waiting)
    response, refused = import_job(bob_client, content)
    assert refused is None and response.status_code == 302
    assert import_job(alice_client, content)[1]  # another account is not held up
    assert imports.run(waiting[0]) == imports.DONE  # one done: room for the next
    assert import_job(bob_client, content)[1]


# --- Finding 5: imported usage and events are data, not this service's history ------------------


def forged(exported: dict, stages: int, tokens: int) -> dict[str, Any]:
    data = copy.deepcopy(exported)
    at = "2026-01-01T00:00:00+00:00"
    data["llm_calls"] = [
        {
            "id": n,
            "stage": f"forged-{n}",
            "model": "m",
            "prompt_tokens": tokens,
            "completion_tokens": tokens,
            "created_at": at,
        }
        for n in range(stages)
    ]
    data["run_events"] = [
        {"id": n, "seq": n + 1, "stage": f"forged-{n}", "message": "x", "created_at": at}
        for n in range(stages)
    ]
    return data


def exposition_lines() -> int:
    return len(metrics.exposition().decode().splitlines())


def test_an_imported_archive_adds_nothing_to_the_service_figures(exported: dict, bob: User) -> None:
    before_lines = exposition_lines()
    before_samples = metrics.record_samples()
    before_tokens = usage.summarise(usage.spent_calls(None)).total_tokens
    data = forged(exported, stages=1_500, tokens=checks.LLM_CALL_LIMITS["prompt_tokens"])
    topic = archive.import_topic(data, bob)
    assert topic.llm_calls.count() == 1_500 and topic.events.count() == 1_500
    # 1,500 forged stage names were 4 × 1,500 more series (calls, failures, two token directions)
    # and 2 × 1,500 stage spans; now not one line more, nor one sample a minute.
    assert exposition_lines() == before_lines
    MetricSample.objects.update(at=timezone.now() - timedelta(minutes=5))
    assert metrics.record_samples() == before_samples
    assert "forged" not in metrics.exposition().decode()
    assert usage.summarise(usage.spent_calls(None)).total_tokens == before_tokens
    assert budget.spent_today(bob.pk).total_tokens == 0
    # The topic's own page still shows what the exporter's run cost: it is that topic's record.
    assert usage.topic_usage(topic).total_tokens == 2 * 1_500 * checks.LLM_CALL_LIMITS["prompt_tokens"]


def test_live_rows_still_count(alice: User) -> None:
    topic = _finished_topic(alice)
    before = exposition_lines()
    LLMCall.objects.create(user=alice, topic=topic, stage="plan", model="m", prompt_tokens=7)
    RunEvent.objects.create(topic=topic, seq=99, stage="plan", message="x")
    text = metrics.exposition().decode()
    assert exposition_lines() > before
    assert 'mindsearch_llm_tokens_total{direction="prompt",stage="plan"} 7.0' in text


@pytest.mark.parametrize("field", ["prompt_tokens", "completion_tokens", "latency_ms", "attempts"])
def test_an_imported_call_is_held_to_what_one_call_can_be(exported: dict, bob: User, field: str) -> None:
    data = forged(exported, stages=1, tokens=1)
    data["llm_calls"][0][field] = 2_147_483_647  # the column's limit, 2.1e9: what the probe forged
    with pytest.raises(checks.ArchiveError, match=field):
        archive.import_topic(data, bob)
    assert not Topic.objects.filter(owner=bob).exists()
