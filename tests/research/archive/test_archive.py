"""Export, import and delete of a topic: a round trip from alice to bob
keeps every row, hostile archives create nothing, deleting keeps the shared cache, and another
user's ids are a 404."""

from __future__ import annotations

import io
import json
import re
import time
import warnings
import zipfile
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from research import archive, images, imports
from research.archive import checks as archive_checks
from research.models import (
    CacheEntry,
    Document,
    Hit,
    LLMCall,
    Report,
    Round,
    RunEvent,
    SearchQuery,
    SubQuery,
    Summary,
    Topic,
    TopicImage,
)
from research.presenters import STAGES, stage_progress
from retrieval.models import UploadedDocument
from tests.research.pipeline.test_citation_report import researched as research_topic
from tests.support.domain_world import picture
from tests.support.world import World

pytestmark = pytest.mark.django_db


@pytest.fixture
def researched(alice: User, loopback: World) -> Topic:
    """A topic alice had researched start to finish against the loopback internet."""
    return research_topic(alice)


# What an archive does not carry of a topic: its id and owner (the importer's), the worker's
# clock and what the archive unpacked to (set by the import); every other column goes from
# alice to bob.
NOT_ARCHIVED = {"id", "owner", "heartbeat_at", "updated_at", "archive_bytes"}
ARCHIVED_COLUMNS = [field.name for field in Topic._meta.concrete_fields if field.name not in NOT_ARCHIVED]


def snapshot(topic: Topic) -> dict[str, Any]:
    """Everything a topic holds, with rows named by their content instead of their ids."""
    document_urls = dict(Document.objects.filter(topic=topic).values_list("pk", "url"))
    report = Report.objects.get(topic=topic)
    return {
        "topic": Topic.objects.filter(pk=topic.pk).values(*ARCHIVED_COLUMNS).get(),
        "subqueries": list(topic.subqueries.values_list("position", "text", "origin", "round")),
        "queries": sorted(
            SearchQuery.objects.filter(subquery__topic=topic).values_list(
                "subquery__text", "language", "text", "result_count", "searched_at"
            )
        ),
        "hits": sorted(
            Hit.objects.filter(topic=topic).values_list(
                "url",
                "title",
                "snippet",
                "subquery__text",
                "search_query__text",
                "score__total",
                "score__origin",
            )
        ),
        "documents": sorted(
            Document.objects.filter(topic=topic).values_list(
                "url",
                "text",
                "fetched_via",
                "hit__url",
                "summary__text",
                "summary__score__total",
                "created_at",
            )
        ),
        "report": (report.markdown, report.model, report.created_at),
        "sources": [(s["n"], s["url"], document_urls[s["document_id"]]) for s in report.sources],
        "rounds": list(
            topic.rounds.values_list("number", "documents", "growth_rate", "stop_reason", "created_at")
        ),
        "events": list(
            topic.events.values_list("seq", "stage", "level", "message", "done", "total", "created_at")
        ),
        "llm_calls": sorted(
            LLMCall.objects.filter(topic=topic).values_list(
                "stage",
                "model",
                "prompt_tokens",
                "completion_tokens",
                "cache_hit",
                "cache_kind",
                "created_at",
            )
        ),
    }


def import_as(client: Client, content: bytes, name: str = "topic.zip") -> Any:
    """Upload an archive, let the worker's task import it, and return what the job's page
    answers then (the topic, or home with the reason); a refusal before queueing as it came."""
    upload = SimpleUploadedFile(name, content, content_type="application/zip")
    response = client.post(reverse("topic_import"), {"archive": upload})
    job = re.fullmatch(r"/topics/import/([0-9a-f]{32})/", response.get("Location", ""))
    if job:
        imports.run(job.group(1))
        response = client.get(response["Location"])
    return response


def zipped(members: dict[str, bytes | str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    return buffer.getvalue()


# --- Round trip ------------------------------------------------------------------------------------


def test_a_topic_goes_from_alice_to_bob_intact(
    researched: Topic, alice_client: Client, bob_client: Client, bob: User
) -> None:
    response = alice_client.get(reverse("topic_export", args=[researched.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert "attachment" in response["Content-Disposition"] and ".zip" in response["Content-Disposition"]
    content = response.content
    with zipfile.ZipFile(io.BytesIO(content)) as zf:
        assert sorted(zf.namelist()) == ["report.md", "topic.json"]
        exported = zf.read("report.md").decode()  # the report as downloaded: its check marked in it
        assert researched.report.markdown.splitlines()[0] in exported
        assert all(source["url"] in exported for source in researched.report.sources if source["url"])

    response = import_as(bob_client, content)
    copy = Topic.objects.exclude(pk=researched.pk).get()
    assert response.status_code == 302 and response["Location"] == reverse("topic_detail", args=[copy.pk])
    assert copy.owner == bob
    assert snapshot(copy) == snapshot(researched)
    assert researched.archive_bytes == 0 and copy.archive_bytes == len(
        zipfile.ZipFile(io.BytesIO(content)).read("topic.json")
    )
    assert not set(Document.objects.filter(topic=copy).values_list("pk", flat=True)) & set(
        Document.objects.filter(topic=researched).values_list("pk", flat=True)
    )
    assert copy.last_event_seq == researched.last_event_seq
    calls = LLMCall.objects.filter(topic=copy)
    assert set(calls.values_list("user", "imported")) == {(bob.pk, True)}

    page = bob_client.get(reverse("topic_detail", args=[copy.pk]))
    assert page.status_code == 200 and "Mixture of Tokens" in page.content.decode()
    assert bob_client.get(reverse("report_markdown", args=[copy.pk])).status_code == 200


def test_the_archive_can_be_imported_twice_and_again_after_export(
    researched: Topic, alice_client: Client, bob_client: Client
) -> None:
    content = alice_client.get(reverse("topic_export", args=[researched.pk])).content
    import_as(bob_client, content)
    import_as(bob_client, content)
    first, second = Topic.objects.exclude(pk=researched.pk).order_by("pk")
    assert snapshot(first) == snapshot(second) == snapshot(researched)
    again = bob_client.get(reverse("topic_export", args=[second.pk])).content
    import_as(alice_client, again)
    third = Topic.objects.filter(owner=researched.owner).exclude(pk=researched.pk).get()
    assert snapshot(third) == snapshot(researched)


def test_links_to_private_documents_are_dropped_but_their_text_kept(
    alice: User, bob: User, alice_client: Client, bob_client: Client
) -> None:
    upload = UploadedDocument.objects.create(owner=alice, original_name="notes.pdf", sha256="0" * 64)
    topic = Topic.objects.create(owner=alice, question="My notes", status=Topic.Status.COMPLETED)
    subquery = SubQuery.objects.create(topic=topic, text="notes")
    hit = Hit.objects.create(
        topic=topic, subquery=subquery, source="private", url="https://notes.invalid/1", normalized_url="n1"
    )
    Document.objects.create(
        topic=topic,
        hit=hit,
        uploaded_document=upload,
        title="notes.pdf",
        text="Private text",
        fetched_via="private",
    )
    import_as(bob_client, alice_client.get(reverse("topic_export", args=[topic.pk])).content)
    copy = Document.objects.get(topic__owner=bob)
    assert (copy.text, copy.title, copy.fetched_via, copy.uploaded_document) == (
        "Private text",
        "notes.pdf",
        "private",
        None,
    )
    assert copy.hit is not None
    assert copy.hit.url == "https://notes.invalid/1" and copy.hit.chunk is None
    assert Document.objects.get(topic=topic).uploaded_document == upload


def test_a_topic_still_running_is_not_exported(alice: User, alice_client: Client) -> None:
    topic = Topic.objects.create(owner=alice, question="Still going", status=Topic.Status.RUNNING)
    response = alice_client.get(reverse("topic_export", args=[topic.pk]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("topic_detail", args=[topic.pk])
    assert "still being researched" in response.content.decode()


def test_the_topic_page_offers_export_and_the_topics_page_import(
    researched: Topic, alice_client: Client
) -> None:
    page = alice_client.get(reverse("topic_detail", args=[researched.pk])).content.decode()
    assert reverse("topic_export", args=[researched.pk]) in page
    topics = alice_client.get(reverse("home")).content.decode()
    assert reverse("topic_import") in topics and 'type="file" name="archive"' in topics


def test_export_and_import_commands(researched: Topic, bob: User, tmp_path: Path) -> None:
    path = tmp_path / "topic.zip"
    call_command("export_topic", researched.pk, "--output", str(path))
    out = io.StringIO()
    call_command("import_topic", str(path), "--user", "bob", stdout=out)
    copy = Topic.objects.get(owner=bob)
    assert f"Imported topic {copy.pk}" in out.getvalue()
    assert snapshot(copy) == snapshot(researched)
    with pytest.raises(CommandError, match="no user"):
        call_command("import_topic", str(path), "--user", "nobody")
    with pytest.raises(CommandError, match="no topic"):
        call_command("export_topic", 999999)
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(CommandError, match="not a readable zip"):
        call_command("import_topic", str(tmp_path / "bad.zip"), "--user", "bob")


# --- Hostile and broken archives -----------------------------------------------------------------


@pytest.fixture
def good_data(alice: User) -> dict[str, Any]:
    """A small valid archive's JSON: one sub-query, query, hit with score, document, summary,
    report, events and LLM calls."""
    topic = Topic.objects.create(
        owner=alice,
        question="Small",
        status=Topic.Status.COMPLETED,
        mode=Topic.Mode.DEEP,
        domain=Topic.Domain.FINANCE,
        period_start=date(2023, 1, 1),
        period_end=date(2024, 12, 31),
        sites_only=["arxiv.org"],
        sites_avoid=["reddit.com"],
        token_cap=50_000,
    )
    subquery = SubQuery.objects.create(topic=topic, text="what")
    Round.objects.create(topic=topic, number=1, documents=4, new_documents=4, growth_rate=1.0)
    Round.objects.create(
        topic=topic, number=2, documents=2, known_documents=4, growth_rate=0.05, stop_reason="growth"
    )
    query = SearchQuery.objects.create(subquery=subquery, language="en", text="what is it")
    hit = Hit.objects.create(
        topic=topic,
        subquery=subquery,
        search_query=query,
        url="https://a.example/",
        normalized_url="a.example",
    )
    document = Document.objects.create(topic=topic, hit=hit, url=hit.url, text="Text", fetched_via="reader")
    Summary.objects.create(document=document, text="Summary")
    Report.objects.create(topic=topic, markdown="# R [1]", sources=[{"n": 1, "document_id": document.pk}])
    for seq in (1, 2):
        RunEvent.objects.create(topic=topic, seq=seq, stage="plan", message=f"event {seq}")
    LLMCall.objects.create(user=alice, topic=topic, stage="plan", model="m", prompt_tokens=10)
    data = json.loads(archive.dumps(archive.topic_data(topic)))
    topic.delete()
    LLMCall.objects.all().delete()  # kept by the delete as a cost record
    return data


def test_the_small_archive_is_valid(good_data: dict[str, Any], bob_client: Client, bob: User) -> None:
    import_as(bob_client, zipped({"topic.json": json.dumps(good_data)}))
    topic = Topic.objects.get(owner=bob)
    assert topic.report.sources[0]["document_id"] == Document.objects.get().pk
    assert (topic.mode, topic.domain, topic.period_start, topic.period_end) == (
        "deep",
        "finance",
        date(2023, 1, 1),
        date(2024, 12, 31),
    )
    assert (topic.sites_only, topic.sites_avoid, topic.token_cap) == (["arxiv.org"], ["reddit.com"], 50_000)
    assert list(topic.rounds.values_list("number", "growth_rate", "stop_reason")) == [
        (1, 1.0, ""),
        (2, 0.05, "growth"),
    ]


def test_an_archive_without_newer_tables_and_columns_still_imports(
    good_data: dict[str, Any], bob_client: Client, bob: User
) -> None:
    for name in ("domain", "period_start", "period_end", *NEWER_STATES):
        del good_data["topic"][name]
    del good_data["rounds"]
    import_as(bob_client, zipped({"topic.json": json.dumps(good_data)}))
    topic = Topic.objects.get(owner=bob)
    assert (topic.domain, topic.period_start, topic.rounds.count()) == ("", None, 0)
    assert (topic.route, topic.years_checked, topic.vision_checked, topic.domain_data_checked) == (
        "",
        False,
        False,
        False,
    )


# The route and the stages' "done" flags, stored since migrations 0012–0014.
NEWER_STATES = ("route", "years_checked", "vision_checked", "domain_data_checked")


@pytest.mark.parametrize(
    ("route", "stage", "checked"),
    [
        (Topic.Route.SEARCH, "years", "years_checked"),
        (Topic.Route.DIRECT, "vision", "vision_checked"),
        (Topic.Route.DOCUMENTS, "domain", "domain_data_checked"),
    ],
)
def test_an_archive_from_before_the_stored_route_imports_routed_as_its_run_went(
    alice: User, bob: User, route: str, stage: str, checked: str
) -> None:
    """Its route is read from its rows as migration 0013 read a topic's (a report without a plan:
    from the owner's passages, or directly), its stages' "done" from their events as 0012 and
    0014 did; and its progress shows the stages it went through."""
    topic = Topic.objects.create(
        owner=alice, question="Hi", status=Topic.Status.COMPLETED, domain="general", route=route
    )
    if route == Topic.Route.SEARCH:
        SubQuery.objects.create(topic=topic, text="a sub-query")
    if route == Topic.Route.DOCUMENTS:
        Document.objects.create(topic=topic, title="memo.pdf", url="", text="…", fetched_via="private")
    if stage == "vision":  # told, and its outcome saved (a pending picture is looked at again)
        images.save(topic, images.prepare(picture((220, 30, 30))), analysis=TopicImage.Analysis.FAILED)
    Report.objects.create(topic=topic, markdown="Hello", sources=[])
    RunEvent.objects.create(topic=topic, seq=1, stage=stage, message="looked", done=1, total=1)
    data = json.loads(archive.dumps(archive.topic_data(topic)))
    assert data["topic"]["route"] == route  # exported as it is now…
    for name in NEWER_STATES:  # …and read from the rows when an older archive lacks it
        del data["topic"][name]
    copy = archive.import_topic(data, bob)
    assert copy.route == route
    assert [name for name in NEWER_STATES[1:] if getattr(copy, name)] == [checked]
    if stage == "vision":  # a picture left pending by a worker stopped while describing it
        data["image"]["analysis"] = TopicImage.Analysis.PENDING
        assert not archive.import_topic(data, bob).vision_checked
    shown = [row["key"] for row in stage_progress(copy)]
    assert shown == (["answer"] if route != Topic.Route.SEARCH else [key for key, _ in STAGES])


def test_too_many_rows_are_refused(
    good_data: dict[str, Any], bob_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archive_checks, "MAX_ROWS", 5)
    import_as(bob_client, zipped({"topic.json": json.dumps(good_data)}))
    assert "more than 5 rows" in bob_client.get(reverse("home")).content.decode()
    assert not Topic.objects.exists()


def _set(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


BROKEN_ROWS = [
    ("version", 2, "version 2"),
    ("format", "something.else", "not a MindSearch topic archive"),
    ("topic", [], "topic is not an object"),
    ("topic.status", "running", "still being researched"),
    ("topic.status", "exploded", "invalid status"),
    ("topic.question", 42, "invalid question"),
    ("topic.question", "nul\x00byte", "invalid question"),
    ("topic.question", "lone \ud800 surrogate", "invalid question"),
    ("topic.created_at", "yesterday", "invalid created_at"),
    ("topic.period_start", "2024-13-45", "invalid period_start"),
    ("topic.domain", "astrology", "invalid domain"),
    ("rounds.1.number", 1, "two rows of rounds have the same number"),
    ("rounds.0.growth_rate", "high", "invalid growth_rate"),
    ("topic.last_event_seq", -1, "invalid last_event_seq"),
    ("topic.last_event_seq", 2**40, "invalid last_event_seq"),
    ("subqueries", {"not": "a list"}, "subqueries is not a list"),
    ("subqueries.0.id", "1", "missing or repeated id"),
    ("search_queries.0.subquery", 123456, "refers to a subquery that is not in the archive"),
    ("hits.0.search_query", [1], "refers to a search_query that is not in the archive"),
    ("hits.0.url", "x" * 3000, "invalid url"),
    ("documents.0.pages", {"not": "a list"}, "invalid pages"),
    ("llm_calls.0.prompt_tokens", 1.5, "invalid prompt_tokens"),
    ("llm_calls.0.cache_hit", "yes", "invalid cache_hit"),
    ("run_events.1.seq", 1, "two rows of run_events have the same seq"),
    ("report.sources", [{"n": 1, "document_id": 999999}], "cites a document that is not in it"),
    ("topic.sites_avoid", ["x OR site:evil"], "site lists hold something that is not a site name"),
    ("topic.sites_only", "arxiv.org", "invalid sites_only"),
    ("topic.token_cap", -5, "invalid token_cap"),
]


@pytest.mark.parametrize(("path", "value", "message"), BROKEN_ROWS)
def test_broken_rows_are_refused_and_nothing_is_created(
    good_data: dict[str, Any], bob_client: Client, path: str, value: Any, message: str
) -> None:
    content = zipped({"topic.json": json.dumps(_set(good_data, path, value))})
    response = import_as(bob_client, content)
    assert response.status_code == 302 and response["Location"] == reverse("home")
    page = bob_client.get(reverse("home")).content.decode()
    assert "Nothing was imported" in page and message in page.replace("&#x27;", "'")
    assert not Topic.objects.exists() and not SubQuery.objects.exists() and not LLMCall.objects.exists()


def test_what_the_database_refuses_rolls_back_every_row(
    good_data: dict[str, Any], bob_client: Client
) -> None:
    # A lone surrogate inside a JSON column passes the checks; PostgreSQL's jsonb refuses it,
    # after the topic and its earlier tables were already inserted in the transaction.
    good_data["run_events"][1]["data"] = {"note": "\ud800"}
    response = import_as(bob_client, zipped({"topic.json": json.dumps(good_data)}))
    assert response.status_code == 302
    assert "database refuses" in bob_client.get(reverse("home")).content.decode()
    assert not Topic.objects.exists() and not Hit.objects.exists() and not RunEvent.objects.exists()


def _bomb(size: int) -> bytes:
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf,
        zf.open("topic.json", "w") as member,
    ):
        for _ in range(size // 2**20):
            member.write(b" " * 2**20)
    return buffer.getvalue()


def hostile_archives() -> list[tuple[str, bytes, str]]:
    valid_json = json.dumps({"format": "mindsearch.topic", "version": 1})
    return [
        ("not a zip", b"PK\x03\x04 but not really", "not a readable zip archive"),
        ("empty file", b"", "not a readable zip archive"),
        ("bad JSON", zipped({"topic.json": "{not json"}), "not valid JSON"),
        ("not UTF-8", zipped({"topic.json": b"\xff\xfe{}"}), "not valid JSON"),
        ("NaN", zipped({"topic.json": '{"format": NaN}'}), "not valid JSON"),
        (
            "deep nesting",
            zipped({"topic.json": "[" * 100_000 + "]" * 100_000}),
            "nests its values deeper",
        ),  # counted before parsing
        ("a list", zipped({"topic.json": "[]"}), "not a MindSearch topic archive"),
        ("no topic.json", zipped({"report.md": "# hi"}), "has no topic.json"),
        (
            "path traversal",
            zipped({"topic.json": valid_json, "../../etc/cron.d/x": "boom"}),
            "unexpected file",
        ),
        ("absolute path", zipped({"/tmp/topic.json": valid_json}), "unexpected file: /tmp/topic.json"),
        ("nested name", zipped({"a/topic.json": valid_json}), "unexpected file"),
        ("twice", _twice(valid_json), "same file twice"),
    ]


def _twice(content: str) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w") as zf:
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name, as it should
        zf.writestr("topic.json", content)
        zf.writestr("topic.json", content)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("case", "content", "message"), hostile_archives(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_hostile_archives_are_refused_clearly(
    bob_client: Client, case: str, content: bytes, message: str
) -> None:
    response = import_as(bob_client, content)
    assert response.status_code == 302 and response["Location"] == reverse("home")
    page = bob_client.get(reverse("home")).content.decode()
    assert "Nothing was imported" in page and message in page, case
    assert not Topic.objects.exists()


def test_a_zip_bomb_is_refused_without_unpacking_it(
    bob_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archive, "MAX_JSON_BYTES", 4 * 2**20)
    bomb = _bomb(8 * 2**20)
    assert len(bomb) < 64 * 1024  # 8 MB of JSON in a few kB
    import_as(bob_client, bomb)
    assert "unpacks to more than 4 MB" in bob_client.get(reverse("home")).content.decode()
    assert not Topic.objects.exists()


def test_a_zip_whose_header_lies_about_the_size_is_refused(
    bob_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archive, "MAX_JSON_BYTES", 4 * 2**20)
    bomb = bytearray(_bomb(8 * 2**20))
    # Claim 100 bytes in both headers: zipfile stops there, and the CRC check fails.
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        start = bomb.index(signature)
        bomb[start + offset : start + offset + 4] = (100).to_bytes(4, "little")
    import_as(bob_client, bytes(bomb))
    assert "not a readable zip archive" in bob_client.get(reverse("home")).content.decode()
    assert not Topic.objects.exists()


def test_an_archive_listing_thousands_of_files_is_refused_before_they_are_read(bob_client: Client) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for i in range(100_000):
            zf.writestr(str(i), b"")
    started = time.monotonic()
    import_as(bob_client, buffer.getvalue())
    assert time.monotonic() - started < 2  # zipfile alone takes seconds to list them all
    assert "lists more files than a topic archive holds" in bob_client.get(reverse("home")).content.decode()


def test_a_zip_with_a_comment_is_read(good_data: dict[str, Any], bob_client: Client, bob: User) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("topic.json", json.dumps(good_data))
        zf.comment = b"exported by hand" * 100
    import_as(bob_client, buffer.getvalue())
    assert Topic.objects.filter(owner=bob).exists()


def test_a_huge_upload_is_refused_before_it_is_opened(
    bob_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archive, "MAX_ARCHIVE_BYTES", 2**20)
    import_as(bob_client, b"0" * (2**20 + 1))
    assert "larger than 1 MB" in bob_client.get(reverse("home")).content.decode()


def test_an_import_without_a_file_says_so(bob_client: Client) -> None:
    response = bob_client.post(reverse("topic_import"), follow=True)
    assert "Choose a topic archive" in response.content.decode()


# --- Delete ------------------------------------------------------------------------------------------


def test_delete_removes_what_the_topic_owns_and_keeps_the_shared_cache(
    researched: Topic, alice: User, alice_client: Client
) -> None:
    cache_rows = set(CacheEntry.objects.values_list("pk", "kind", "hit_count"))
    assert cache_rows and not CacheEntry.objects.filter(owner__isnull=False).exists()
    calls = LLMCall.objects.filter(topic=researched).count()
    response = alice_client.post(reverse("topic_delete", args=[researched.pk]))
    assert response.status_code == 302
    assert not Topic.objects.exists()
    for model in (SubQuery, SearchQuery, Hit, Document, Summary, Report, RunEvent):
        assert not model.objects.exists(), model
    assert set(CacheEntry.objects.values_list("pk", "kind", "hit_count")) == cache_rows
    # The cost records stay for the spending accounts; they no longer point at a topic.
    assert LLMCall.objects.filter(user=alice, topic__isnull=True).count() == calls


def test_the_delete_button_asks_for_confirmation(researched: Topic, alice_client: Client) -> None:
    page = alice_client.get(reverse("topic_detail", args=[researched.pk])).content.decode()
    assert reverse("topic_delete", args=[researched.pk]) in page
    assert 'data-confirm="Delete this topic and everything it found?"' in page  # static/js/ui.js asks


# --- Ownership -------------------------------------------------------------------------------------


def test_another_users_topic_is_a_404_for_export_and_delete(alice: User, bob_client: Client) -> None:
    topic = Topic.objects.create(owner=alice, question="Alice's", status=Topic.Status.COMPLETED)
    assert bob_client.get(reverse("topic_export", args=[topic.pk])).status_code == 404
    assert bob_client.post(reverse("topic_delete", args=[topic.pk])).status_code == 404
    assert bob_client.get(reverse("topic_export", args=[999999])).status_code == 404
    assert Topic.objects.filter(pk=topic.pk).exists()


def test_signed_out_visitors_can_neither_export_nor_import(alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question="Alice's", status=Topic.Status.COMPLETED)
    client = Client()
    assert client.get(reverse("topic_export", args=[topic.pk]))["Location"].startswith(reverse("login"))
    response = import_as(client, zipped({"topic.json": "{}"}))
    assert response["Location"].startswith(reverse("login"))
    assert Topic.objects.count() == 1


def test_export_and_import_answer_only_their_methods(alice: User, alice_client: Client) -> None:
    topic = Topic.objects.create(owner=alice, question="Alice's", status=Topic.Status.COMPLETED)
    assert alice_client.post(reverse("topic_export", args=[topic.pk])).status_code == 405
    assert alice_client.get(reverse("topic_import")).status_code == 405
