"""Archive contents are held to the rules of live data (issue 15): event arguments are flat
text and numbers, nested phrases go one level deep, addresses are web pages, and sizes are
bounded — so a 5 kB archive can no longer make a 100 MB topic page."""

from __future__ import annotations

import copy
import io
import json
import time
import zipfile
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from research import archive, event_text, imports
from research.archive import checks as archive_checks
from research.models import RunEvent, Topic
from tests.reliability.conftest import _finished_topic

pytestmark = pytest.mark.django_db


def bomb(depth: int = 8, width: int = 12) -> dict[str, Any]:
    """A phrase whose every level repeats the one below `width` times: width**depth characters."""
    spec: dict[str, Any] = {"msgid": "boom ", "args": {}}
    for _ in range(depth):
        spec = {"msgid": "%(x)s" * width, "args": {"x": spec}}
    return spec


@pytest.fixture
def exported(alice: User) -> dict[str, Any]:
    topic = _finished_topic(alice)
    RunEvent.objects.create(
        topic=topic,
        seq=1,
        stage="search",
        message="Found 3",
        data={"i18n": event_text.phrase("Found %(n)s", n=3)},
    )
    return json.loads(archive.dumps(archive.topic_data(topic)))


def zipped(data: dict[str, Any]) -> SimpleUploadedFile:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(archive.JSON_NAME, archive.dumps(data))
    return SimpleUploadedFile("topic.zip", buffer.getvalue(), content_type="application/zip")


def refused(data: dict[str, Any], owner: User) -> str:
    before = Topic.objects.count()
    with pytest.raises(archive_checks.ArchiveError) as caught:
        archive.import_topic(copy.deepcopy(data), owner)
    assert Topic.objects.count() == before
    return str(caught.value)


def test_the_nested_phrase_bomb_is_refused_and_cannot_be_expanded(exported: dict, bob: User) -> None:
    data = copy.deepcopy(exported)
    data["run_events"][0]["data"] = {"i18n": bomb()}
    assert len(zipped(data).read()) < 6000  # the finding's 5 kB archive
    assert "not a progress line" in refused(data, bob)
    # A row that is already stored (written before this check existed) shows in bounded time.
    started = time.monotonic()
    line = event_text.translated({"i18n": bomb()}, "fallback")
    assert time.monotonic() - started < 0.5
    assert len(line) <= event_text.MAX_LINE_CHARS


@pytest.mark.parametrize(
    "args",
    [
        {"n": ["a", "list"]},
        {"n": {"not": "a phrase"}},
        {"n": True},
        {"n": event_text.phrase("%(m)s", m=event_text.phrase("deeper"))},
        {"n": "x" * (event_text.MAX_ARG_CHARS + 1)},
    ],
    ids=["list", "dict", "bool", "two-levels", "too-long"],
)
def test_event_arguments_must_be_flat_text_or_numbers(exported: dict, bob: User, args: dict) -> None:
    data = copy.deepcopy(exported)
    data["run_events"][0]["data"] = {"i18n": {"msgid": "Found %(n)s", "args": args}}
    assert "not a progress line" in refused(data, bob)


def test_one_level_of_nested_phrase_is_what_live_data_has_and_imports(exported: dict, bob: User) -> None:
    data = copy.deepcopy(exported)
    data["run_events"][0]["data"] = {"i18n": event_text.phrase("%(why)s", why=event_text.phrase("Stopped"))}
    topic = archive.import_topic(data, bob)
    assert topic.events.get().display_message == "Stopped"


@pytest.mark.parametrize(
    "url", ["javascript:alert(1)", "data:text/html,<script>x</script>", "file:///etc/passwd"]
)
@pytest.mark.parametrize("where", ["hits", "documents", "report"])
def test_addresses_must_be_web_pages(exported: dict, bob: User, url: str, where: str) -> None:
    data = copy.deepcopy(exported)
    if where == "report":
        data["report"]["sources"][0]["url"] = url
    else:
        data[where][0]["url"] = url
    assert "not a web page" in refused(data, bob)


def test_event_count_and_report_size_are_bounded(exported: dict, bob: User) -> None:
    data = copy.deepcopy(exported)
    event = data["run_events"][0]
    data["run_events"] = [{**event, "id": n, "seq": n} for n in range(1, archive_checks.MAX_EVENTS + 2)]
    assert "run events" in refused(data, bob)
    data = copy.deepcopy(exported)
    data["report"]["markdown"] = "x" * (archive_checks.MAX_REPORT_CHARS + 1)
    assert "longer than a report" in refused(data, bob)


def test_the_import_page_refuses_it_with_the_reason(
    exported: dict, bob: User, settings: Any, tmp_path: Any
) -> None:
    settings.MEDIA_ROOT = tmp_path
    data = copy.deepcopy(exported)
    data["hits"][0]["url"] = "javascript:alert(1)"
    client = Client()
    client.force_login(bob)
    response = client.post("/topics/import/", {"archive": zipped(data)})
    imports.run(response["Location"].rstrip("/").rsplit("/", 1)[1])  # the worker's task
    page = client.get(response["Location"], follow=True).content.decode()
    assert "Nothing was imported" in page and "not a web page" in page
    assert not Topic.objects.filter(owner=bob).exists()
