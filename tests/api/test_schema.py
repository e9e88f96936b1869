"""Schemathesis against the API's own OpenAPI schema, in-process over WSGI, with a token.

Every operation gets schemathesis's examples, coverage (boundary values, missing and wrong
parameters, other methods) and fuzzing phases, valid and invalid requests. No answer may be a
server error; every answer must be declared in the schema (status, content type, body); invalid
input must be refused; auth must not be ignored. Valid requests' path ids are either generated
(mostly 404) or one of alice's real rows in each state, so the operations' real work is fuzzed
too. Examples are derandomised and bounded: the whole run takes about a minute.

Left out: `positive_data_acceptance`. Some input the schema allows is refused on purpose with
422 (a blank question, a PNG uploaded as a document); the schema cannot say everything.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from mindsearch.models import ApiToken
from research.models import RunEvent, ShareLink, Topic
from retrieval.ingest import index_documents
from retrieval.models import UploadedDocument
from retrieval.parsing import ParsedDocument
from tests.api.conftest import awaiting, completed

pytestmark = pytest.mark.django_db

EXAMPLES = 30

# Loaded once at collection from the app's own /api/openapi.json (no database needed for it).
schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())


@pytest.fixture
def same_connection() -> Iterator[None]:
    """Like Django's test client: the end of a WSGI request must not close the database
    connection that holds the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def alice_world(alice: User, settings: Any, tmp_path: Path, same_connection: None) -> dict[str, Any]:
    """Alice (staff, so the cache statistics answer too) with a token and rows in each state an
    operation cares about; the same rows for every example of one operation."""
    settings.MEDIA_ROOT = tmp_path / "media"
    alice.is_staff = True
    alice.save()
    _row, token = ApiToken.issue(alice, "schemathesis")
    waiting, done = awaiting(alice, "Where is Mixture of Tokens used?"), completed(alice)
    running = Topic.objects.create(owner=alice, question="A running one", status=Topic.Status.RUNNING)
    for seq in range(1, 4):
        RunEvent.objects.create(
            topic=running, seq=seq, stage="search", message=f"event {seq}", done=seq, total=3
        )
    link, _token = ShareLink.issue(done)
    document = UploadedDocument.objects.create(
        owner=alice, file="uploads/x/notes", original_name="notes.md", sha256=hashlib.sha256(b"n").hexdigest()
    )
    # Real passages, so that search ranks them with the real model.
    index_documents([(document, ParsedDocument("# Quokkas\n\nQuokkas live on Rottnest Island and smile."))])
    return {
        "auth": {"Authorization": f"Bearer {token}"},
        "ids": {
            "topic_id": [waiting.pk, done.pk, running.pk],
            "link_id": [link.pk],
            "document_id": [document.pk],
        },
    }


def use_real_ids(case: Any, ids: dict[str, list[int]]) -> None:
    """Half of the cases (chosen by their content, so runs repeat) get one of alice's real ids.

    Not drawn with Hypothesis: `schema.given(...)` would switch off the coverage phase.
    """
    pick = zlib.crc32(repr((case.path_parameters, case.query, case.body)).encode())
    for name, real in ids.items():
        if name in (case.path_parameters or {}) and pick % 2:
            case.path_parameters[name] = real[(pick // 2) % len(real)]


@schema.parametrize()
@hypothesis_settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_api(case: Any, alice_world: dict[str, Any]) -> None:
    # Invalid requests keep their generated ids: a real one could make them valid.
    if case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE:
        use_real_ids(case, alice_world["ids"])
    case.call_and_validate(headers=alice_world["auth"], excluded_checks=[positive_data_acceptance])
