"""Research over the API, one operation at a time: topics, plan, events, report, share links and
the cache statistics. Database state is checked besides the answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django_q.models import OrmQ
from pytest_django import DjangoCaptureOnCommitCallbacks, Settings

from research import export
from research.models import CacheCounter, CacheEntry, RunEvent, ShareLink, SubQuery, Topic
from research.pipeline import cache
from tests.api.conftest import ApiClient, awaiting, completed

pytestmark = pytest.mark.django_db


def queued_tasks() -> list[str]:
    return [task.func() for task in OrmQ.objects.all()]


# --- Topics ----------------------------------------------------------------------------------------


def test_create_topic_queues_its_plan(
    alice_api: ApiClient, alice: User, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    body = {"question": "  Расскажи об   Mixture of Tokens ", "sources": "both", "mode": "deep"}
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_api.post("/api/topics", body)
    assert response.status_code == 201, response.content
    topic = Topic.objects.get(owner=alice)
    data = response.json()
    assert data["id"] == topic.pk and data["status"] == "planning" and data["has_report"] is False
    assert topic.question == "Расскажи об Mixture of Tokens" and topic.language == "ru"
    assert (topic.sources, topic.mode, topic.time_range) == ("both", "deep", "")
    assert queued_tasks() == ["research.tasks.plan"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"question": " "}, "question"),
        ({}, "question"),
        ({"question": "What is MoT?", "mode": "slow"}, "mode"),
        ({"question": "x" * 2001}, "question"),
        ({"question": "What is \x00 MoT?"}, "question"),
        ({"question": "What is \ud800 MoT?"}, "question"),
    ],
)
def test_create_topic_refuses_bad_input_with_422(alice_api: ApiClient, body: dict, field: str) -> None:
    response = alice_api.post("/api/topics", body)
    assert response.status_code == 422, response.content
    assert field in response.json()["detail"]
    assert not Topic.objects.exists()


def test_malformed_json_is_a_400(alice_api: ApiClient) -> None:
    response = alice_api.request("POST", "/api/topics", None, data="{nope", content_type="application/json")
    assert response.status_code == 400
    assert "detail" in response.json()


def test_an_oversized_body_is_a_413(alice_api: ApiClient, settings: Settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = alice_api.post("/api/topics", {"question": "x" * 2000})
    assert response.status_code == 413
    assert "too large" in response.json()["detail"]


def test_list_topics_filters_by_words_and_status(alice_api: ApiClient, alice: User, bob: User) -> None:
    waiting = awaiting(alice, "What is Mixture of Tokens?")
    done = completed(alice, "How do transformers scale?")
    awaiting(bob, "Mixture of Tokens for bob")
    listed = alice_api.get("/api/topics").json()
    assert listed["count"] == 2 and [t["id"] for t in listed["items"]] == [done.pk, waiting.pk]
    assert listed["items"][0]["has_report"] is True and listed["items"][1]["has_report"] is False
    assert [t["id"] for t in alice_api.get("/api/topics?q=mixture").json()["items"]] == [waiting.pk]
    # Words of a sub-query match too.
    assert alice_api.get("/api/topics?q=improved").json()["count"] == 2
    assert [t["id"] for t in alice_api.get("/api/topics?status=completed").json()["items"]] == [done.pk]
    assert alice_api.get("/api/topics?status=bogus").status_code == 422


def test_list_topics_pages(alice_api: ApiClient, alice: User) -> None:
    topics = [awaiting(alice, f"Question number {n}") for n in range(5)]
    page = alice_api.get("/api/topics?limit=2&offset=2").json()
    assert page["count"] == 5 and (page["limit"], page["offset"]) == (2, 2)
    assert [t["id"] for t in page["items"]] == [topics[2].pk, topics[1].pk]
    assert alice_api.get("/api/topics?limit=0").status_code == 422
    assert alice_api.get("/api/topics?limit=101").status_code == 422


def test_get_topic(alice_api: ApiClient, alice: User) -> None:
    topic = completed(alice)
    data = alice_api.get(f"/api/topics/{topic.pk}").json()
    assert data["question"] == topic.question and data["status"] == "completed"
    assert data["llm_model"] == "test-model" and data["has_report"] is True
    assert alice_api.get("/api/topics/999999").status_code == 404
    assert alice_api.get("/api/topics/abc").status_code in (404, 422)


def test_delete_topic_removes_it_and_its_rows(alice_api: ApiClient, alice: User) -> None:
    topic = completed(alice)
    response = alice_api.delete(f"/api/topics/{topic.pk}")
    assert response.status_code == 204 and response.content == b""
    assert not Topic.objects.filter(pk=topic.pk).exists()
    assert not SubQuery.objects.filter(topic_id=topic.pk).exists()
    assert alice_api.delete(f"/api/topics/{topic.pk}").status_code == 404


def test_delete_topic_removes_its_rendered_pdfs(
    alice_api: ApiClient, alice: User, settings: Any, tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    settings.MEDIA_ROOT = tmp_path
    topic = completed(alice)
    folder = export.pdf_folder(topic.pk)  # where report_pdf caches the topic's PDFs
    folder.mkdir(parents=True)
    (folder / "0123abcd.pdf").write_bytes(b"%PDF-1.7 a private report")
    with django_capture_on_commit_callbacks(execute=True):
        assert alice_api.delete(f"/api/topics/{topic.pk}").status_code == 204
    assert not folder.exists() and tmp_path.exists()


def test_cancel_topic_keeps_what_was_found_and_refuses_a_finished_one(
    alice_api: ApiClient, alice: User
) -> None:
    topic = Topic.objects.create(owner=alice, question="Running one", status=Topic.Status.RUNNING)
    response = alice_api.post(f"/api/topics/{topic.pk}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    topic.refresh_from_db()
    assert topic.status == Topic.Status.CANCELLED and topic.finished_at is not None
    again = alice_api.post(f"/api/topics/{topic.pk}/cancel")
    assert again.status_code == 409 and "already finished" in again.json()["detail"]


def test_rerun_resumes_a_failed_topic_in_place(
    alice_api: ApiClient, alice: User, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    topic = awaiting(alice)
    topic.fail("search failed")
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_api.post(f"/api/topics/{topic.pk}/rerun")
    assert response.status_code == 200 and response.json()["id"] == topic.pk
    topic.refresh_from_db()
    assert topic.status == Topic.Status.QUEUED and topic.error == ""
    assert queued_tasks() == ["research.tasks.run"]


def test_rerun_copies_a_completed_topic_with_its_plan(alice_api: ApiClient, alice: User) -> None:
    topic = completed(alice)
    response = alice_api.post(f"/api/topics/{topic.pk}/rerun")
    assert response.status_code == 201
    copy = Topic.objects.get(pk=response.json()["id"])
    assert copy.pk != topic.pk and copy.status == Topic.Status.QUEUED and copy.question == topic.question
    assert list(copy.subqueries.values_list("text", flat=True)) == list(
        topic.subqueries.values_list("text", flat=True)
    )
    assert response.json()["has_report"] is False


def test_rerun_refuses_a_running_topic(alice_api: ApiClient, alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question="Running one", status=Topic.Status.RUNNING)
    response = alice_api.post(f"/api/topics/{topic.pk}/rerun")
    assert response.status_code == 409
    assert Topic.objects.count() == 1


# --- Plan ------------------------------------------------------------------------------------------


def test_get_plan(alice_api: ApiClient, alice: User) -> None:
    topic = awaiting(alice)
    plan = alice_api.get(f"/api/topics/{topic.pk}/plan").json()
    assert plan["editable"] is True and plan["status"] == "awaiting_approval"
    assert [s["text"] for s in plan["subqueries"]] == [
        "What is it?",
        "Where is it used?",
        "How was it improved?",
    ]


def test_edit_plan_keeps_edits_adds_reorders_and_deletes(alice_api: ApiClient, alice: User) -> None:
    topic = awaiting(alice)
    first, second, _third = topic.subqueries.order_by("position")
    body = {
        "subqueries": [
            {"id": second.pk, "text": second.text},
            {"text": "  Who   invented it? "},
            {"id": first.pk, "text": "What exactly is it?"},
        ]
    }
    response = alice_api.put(f"/api/topics/{topic.pk}/plan", body)
    assert response.status_code == 200, response.content
    rows = list(topic.subqueries.order_by("position").values_list("text", "origin"))
    assert rows == [
        ("Where is it used?", SubQuery.Origin.LLM),
        ("Who invented it?", SubQuery.Origin.USER),
        ("What exactly is it?", SubQuery.Origin.USER),
    ]
    assert [s["text"] for s in response.json()["subqueries"]] == [text for text, _ in rows]


def test_edit_plan_refuses_bad_items(alice_api: ApiClient, alice: User, bob: User) -> None:
    topic = awaiting(alice)
    others = awaiting(bob).subqueries.all()[0]
    before = list(topic.subqueries.values_list("text", flat=True))
    empty = alice_api.put(f"/api/topics/{topic.pk}/plan", {"subqueries": [{"text": "   "}]})
    assert empty.status_code == 422 and "empty" in empty.json()["detail"]
    foreign = alice_api.put(
        f"/api/topics/{topic.pk}/plan", {"subqueries": [{"id": others.pk, "text": "x y"}]}
    )
    assert foreign.status_code == 404 and "not part of this plan" in foreign.json()["detail"]
    first = topic.subqueries.all()[0]
    twice = [{"id": first.pk, "text": "a b c"}, {"id": first.pk, "text": "d e f"}]
    repeated = alice_api.put(f"/api/topics/{topic.pk}/plan", {"subqueries": twice})
    assert repeated.status_code == 422 and "listed twice" in repeated.json()["detail"]
    too_many = alice_api.put(f"/api/topics/{topic.pk}/plan", {"subqueries": [{"text": "q"}] * 21})
    assert too_many.status_code == 422
    assert list(topic.subqueries.values_list("text", flat=True)) == before
    assert others.text == SubQuery.objects.get(pk=others.pk).text


def test_the_plans_schema_declares_the_workflows_cap() -> None:
    """One limit: the schema's maxItems is RESEARCH_MAX_SUBQUERIES, not a number of its own."""
    from django.conf import settings

    from mindsearch.api import api

    plan = api.get_openapi_schema()["components"]["schemas"]["PlanIn"]["properties"]["subqueries"]
    assert plan["maxItems"] == settings.RESEARCH_MAX_SUBQUERIES


def test_approve_plan_queues_the_run_and_locks_the_plan(
    alice_api: ApiClient, alice: User, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    topic = awaiting(alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_api.post(f"/api/topics/{topic.pk}/plan/approve")
    assert response.status_code == 200 and response.json()["status"] == "queued"
    assert queued_tasks() == ["research.tasks.run"]
    assert alice_api.post(f"/api/topics/{topic.pk}/plan/approve").status_code == 409
    locked = alice_api.put(f"/api/topics/{topic.pk}/plan", {"subqueries": [{"text": "Too late"}]})
    assert locked.status_code == 409 and "can no longer be edited" in locked.json()["detail"]
    assert alice_api.get(f"/api/topics/{topic.pk}/plan").json()["editable"] is False
    assert queued_tasks() == ["research.tasks.run"]


def test_an_empty_plan_cannot_be_approved(alice_api: ApiClient, alice: User) -> None:
    topic = awaiting(alice)
    assert alice_api.put(f"/api/topics/{topic.pk}/plan", {"subqueries": []}).status_code == 200
    response = alice_api.post(f"/api/topics/{topic.pk}/plan/approve")
    assert response.status_code == 409 and "at least one sub-query" in response.json()["detail"]
    assert Topic.objects.get(pk=topic.pk).status == Topic.Status.AWAITING_APPROVAL


# --- Events and report -----------------------------------------------------------------------------


def test_list_events_since_a_sequence_number(alice_api: ApiClient, alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question="Running one", status=Topic.Status.RUNNING)
    for seq in range(1, 6):
        RunEvent.objects.create(
            topic=topic, seq=seq, stage="search", message=f"event {seq}", done=seq, total=5
        )
    first = alice_api.get(f"/api/topics/{topic.pk}/events?limit=3").json()
    assert [e["seq"] for e in first["events"]] == [1, 2, 3]
    assert first["has_more"] is True and first["last_seq"] == 3 and first["status"] == "running"
    rest = alice_api.get(f"/api/topics/{topic.pk}/events?since={first['last_seq']}").json()
    assert [e["message"] for e in rest["events"]] == ["event 4", "event 5"]
    assert rest["has_more"] is False and rest["last_seq"] == 5
    none = alice_api.get(f"/api/topics/{topic.pk}/events?since=5").json()
    assert none["events"] == [] and none["last_seq"] == 5
    assert alice_api.get(f"/api/topics/{topic.pk}/events?since=-1").status_code == 422


def test_get_report_as_json(alice_api: ApiClient, alice: User) -> None:
    topic = completed(alice)
    report = alice_api.get(f"/api/topics/{topic.pk}/report").json()
    assert report["topic_id"] == topic.pk and report["model"] == "test-model"
    assert report["markdown"].startswith("# Answer")
    assert 'href="#source-1"' in report["html"] or "[1]" in report["html"]
    assert "Источники" not in report["html"]
    assert report["sources"][0]["url"] == "https://example.org/mot"


def test_get_report_as_markdown(alice_api: ApiClient, alice: User) -> None:
    topic = completed(alice)
    response = alice_api.get(f"/api/topics/{topic.pk}/report.md")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/markdown")
    text = response.content.decode()
    assert "- What is it?" in text and "# Answer" in text and "https://example.org/mot" in text


def test_no_report_is_a_404(alice_api: ApiClient, alice: User) -> None:
    topic = awaiting(alice)
    for path in ("report", "report.md"):
        response = alice_api.get(f"/api/topics/{topic.pk}/{path}")
        assert response.status_code == 404 and "no report yet" in response.json()["detail"]


# --- Share links -----------------------------------------------------------------------------------


def test_create_share_link_shows_the_token_once_and_it_opens_the_report(
    alice_api: ApiClient, alice: User
) -> None:
    topic = completed(alice)
    response = alice_api.post(f"/api/topics/{topic.pk}/share-links", {"expires_in_days": 7})
    assert response.status_code == 201, response.content
    link = response.json()
    assert link["url"].endswith(f"/s/{link['token']}/") and link["usable"] is True
    assert link["expires_at"] is not None
    row = ShareLink.objects.get(pk=link["id"])
    assert link["token"] not in row.token_hash
    assert Client().get(f"/s/{link['token']}/").status_code == 200
    listed = alice_api.get(f"/api/topics/{topic.pk}/share-links").json()
    assert [item["id"] for item in listed] == [row.pk] and "token" not in listed[0]


def test_an_unfinished_topic_cannot_be_shared(alice_api: ApiClient, alice: User) -> None:
    topic = awaiting(alice)
    response = alice_api.post(f"/api/topics/{topic.pk}/share-links", {})
    assert response.status_code == 409 and "finished report" in response.json()["detail"]
    assert not ShareLink.objects.exists()
    assert alice_api.post(f"/api/topics/{topic.pk}/share-links", {"expires_in_days": 0}).status_code == 422


def test_revoke_share_link(alice_api: ApiClient, alice: User) -> None:
    topic = completed(alice)
    link = alice_api.post(f"/api/topics/{topic.pk}/share-links", {}).json()
    response = alice_api.post(f"/api/topics/{topic.pk}/share-links/{link['id']}/revoke")
    assert response.status_code == 200 and response.json()["usable"] is False
    assert ShareLink.objects.get(pk=link["id"]).revoked_at is not None
    assert Client().get(f"/s/{link['token']}/").status_code == 404
    assert alice_api.post(f"/api/topics/{topic.pk}/share-links/999999/revoke").status_code == 404


# --- Cache statistics ------------------------------------------------------------------------------


def test_cache_stats_are_for_staff_only(alice_api: ApiClient, alice: User) -> None:
    cache.put(CacheEntry.Kind.SEARCH_RESULTS, cache.make_key("q"), {"results": [1, 2, 3]})
    CacheCounter.objects.create(kind=CacheEntry.Kind.SEARCH_RESULTS, hits=3, misses=1)
    refused = alice_api.get("/api/cache/stats")
    assert refused.status_code == 403 and "staff" in refused.json()["detail"]
    alice.is_staff = True
    alice.save()
    kinds = {row["kind"]: row for row in alice_api.get("/api/cache/stats").json()["kinds"]}
    assert set(kinds) == set(CacheEntry.Kind.values)
    assert kinds["search_results"]["entries"] == 1 and kinds["search_results"]["bytes"] > 0
    assert kinds["search_results"]["hit_rate"] == 0.75


def test_a_plan_still_being_written_cannot_be_edited_or_approved_yet(
    alice_api: ApiClient, alice: User
) -> None:
    topic = Topic.objects.create(owner=alice, question="Still planning")
    for method, path, body in [
        ("PUT", "plan", {"subqueries": [{"text": "Mine"}]}),
        ("POST", "plan/approve", None),
    ]:
        response = alice_api.request(method, f"/api/topics/{topic.pk}/{path}", body)
        assert response.status_code == 409 and "still being written" in response.json()["detail"]
    assert Topic.objects.get(pk=topic.pk).status == Topic.Status.PLANNING and not topic.subqueries.exists()
