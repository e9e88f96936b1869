"""The research workspace pages: list, start, plan review, run controls, report, sharing, export."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django_q.models import OrmQ
from pytest_django import DjangoCaptureOnCommitCallbacks

from research import export
from research.models import (
    Document,
    Hit,
    HitScore,
    Report,
    RunEvent,
    ShareLink,
    SubQuery,
    Summary,
    SummaryScore,
    Topic,
)

pytestmark = pytest.mark.django_db

SCORES = dict.fromkeys(HitScore.CRITERIA, 8.0)


def awaiting(owner: User) -> Topic:
    topic = Topic.objects.create(
        owner=owner, question="What is Mixture of Tokens?", status="awaiting_approval"
    )
    for position, text in enumerate(["What is it?", "Where is it used?", "How was it improved?"]):
        SubQuery.objects.create(topic=topic, position=position, text=text)
    return topic


def completed(owner: User, markdown: str = "# Answer\n\nTokens are mixed [1].") -> Topic:
    topic = awaiting(owner)
    topic.set_status(Topic.Status.COMPLETED, llm_model="test-model", finished_at=timezone.now())
    subquery = topic.subqueries.all()[0]
    hit = Hit.objects.create(
        topic=topic, subquery=subquery, url="https://example.org/mot", normalized_url="https://example.org/mot",
        title="Mixture of Tokens paper",
    )  # fmt: skip
    HitScore.objects.create(hit=hit, **SCORES)
    document = Document.objects.create(
        topic=topic, hit=hit, title=hit.title, url=hit.url, text="Full text", fetched_via="reader"
    )
    summary = Summary.objects.create(document=document, text="Tokens are mixed across examples.")
    SummaryScore.objects.create(summary=summary, **dict.fromkeys(HitScore.CRITERIA, 9.0))
    sources = [
        {
            "n": 1,
            "title": hit.title,
            "url": hit.url,
            "document_id": document.pk,
            "fetched_via": "reader",
            "score": 9.0,
        }
    ]
    Report.objects.create(
        topic=topic,
        markdown=markdown + "\n\n## Источники\n\n1. [x](https://example.org/mot)",
        sources=sources,
        model="test-model",
    )
    return topic


def queued_tasks() -> list[str]:
    return [task.func() for task in OrmQ.objects.all()]


# --- My topics ----------------------------------------------------------------------------------


def test_a_new_user_sees_the_empty_state_with_the_form_and_the_status(alice_client: Client) -> None:
    html = alice_client.get("/").content.decode()
    assert "No topics yet" in html
    assert '<label for="id_question">' in html
    assert "Database" in html and "Worker" in html


@pytest.mark.usefixtures("web_search_configured")
def test_starting_a_topic_queues_its_plan(
    alice_client: Client, alice: User, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    form = {
        "question": "  Расскажи об   Mixture of Tokens ",
        "sources": "web",
        "mode": "quick",
        "time_range": "",
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("topic_create"), form)
    topic = Topic.objects.get(owner=alice)
    assert response.status_code == 302 and response["Location"] == f"/topics/{topic.pk}/"
    assert topic.question == "Расскажи об Mixture of Tokens" and topic.language == "ru"
    assert topic.status == Topic.Status.PLANNING
    assert queued_tasks() == ["research.tasks.plan"]


def test_a_blank_question_is_refused_with_a_message(alice_client: Client) -> None:
    response = alice_client.post(
        reverse("topic_create"), {"question": " ", "sources": "web", "mode": "quick"}
    )
    assert response.status_code == 400
    assert "This field is required" in response.content.decode()
    assert not Topic.objects.exists()


def test_the_list_filters_by_words_and_status(alice_client: Client, alice: User) -> None:
    completed(alice)
    Topic.objects.create(owner=alice, question="Weather in Kazan", status="failed")
    html = alice_client.get("/?q=kazan").content.decode()
    assert "Weather in Kazan" in html and "Mixture of Tokens" not in html
    html = alice_client.get("/?status=completed").content.decode()
    assert "Mixture of Tokens" in html and "Weather in Kazan" not in html
    fragment = alice_client.get("/?q=where+is", headers={"HX-Request": "true", "HX-Target": "topic-rows"})
    assert "<html" not in fragment.content.decode() and "Mixture of Tokens" in fragment.content.decode()


# --- Plan review ---------------------------------------------------------------------------------


def test_the_plan_is_edited_added_to_reordered_and_deleted(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    first, second, third = topic.subqueries.order_by("position")
    alice_client.post(
        reverse("subquery_update", args=[topic.pk, first.pk]), {"text": "What is MoT, exactly?"}
    )
    alice_client.post(reverse("subquery_delete", args=[topic.pk, second.pk]))
    response = alice_client.post(
        reverse("subquery_add", args=[topic.pk]), {"text": "Who uses it?"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200 and "Who uses it?" in response.content.decode()
    alice_client.post(reverse("subquery_move", args=[topic.pk, third.pk]), {"direction": "up"})
    texts = list(topic.subqueries.order_by("position").values_list("text", flat=True))
    assert texts == ["How was it improved?", "What is MoT, exactly?", "Who uses it?"]
    assert set(topic.subqueries.values_list("origin", flat=True)) == {"llm", "user"}


def test_an_empty_sub_query_is_refused(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    response = alice_client.post(
        reverse("subquery_add", args=[topic.pk]), {"text": "   "}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 400 and "cannot be empty" in response.content.decode()
    assert topic.subqueries.count() == 3


def test_approving_queues_the_run_and_locks_the_plan(
    alice_client: Client, alice: User, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    topic = awaiting(alice)
    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post(reverse("plan_approve", args=[topic.pk]))
    topic.refresh_from_db()
    assert topic.status == Topic.Status.QUEUED
    assert "research.tasks.run" in queued_tasks()
    subquery = topic.subqueries.all()[0]
    response = alice_client.post(
        reverse("subquery_update", args=[topic.pk, subquery.pk]), {"text": "changed later"}
    )
    assert response.status_code == 404


def test_a_plan_without_sub_queries_cannot_be_approved(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    topic.subqueries.all().delete()
    alice_client.post(reverse("plan_approve", args=[topic.pk]))
    topic.refresh_from_db()
    assert topic.status == Topic.Status.AWAITING_APPROVAL


# --- Run controls -----------------------------------------------------------------------------------


def test_cancel_keeps_what_was_found(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    topic.set_status(Topic.Status.RUNNING)
    alice_client.post(reverse("topic_cancel", args=[topic.pk]))
    topic.refresh_from_db()
    assert topic.status == Topic.Status.CANCELLED and topic.subqueries.count() == 3


def test_a_failed_topic_resumes_in_place(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    topic.fail("SearXNG is not reachable")
    response = alice_client.post(reverse("topic_rerun", args=[topic.pk]))
    topic.refresh_from_db()
    assert response["Location"] == f"/topics/{topic.pk}/"
    assert (topic.status, topic.error) == (Topic.Status.QUEUED, "")


def test_a_completed_topic_is_researched_again_as_a_copy_with_the_same_plan(
    alice_client: Client, alice: User
) -> None:
    topic = completed(alice)
    response = alice_client.post(reverse("topic_rerun", args=[topic.pk]))
    copy = Topic.objects.exclude(pk=topic.pk).get()
    assert response["Location"] == f"/topics/{copy.pk}/"
    assert copy.status == Topic.Status.QUEUED
    assert list(copy.subqueries.values_list("text", flat=True)) == list(
        topic.subqueries.values_list("text", flat=True)
    )


def test_delete_removes_the_topic_and_its_rows(alice_client: Client, alice: User) -> None:
    topic = completed(alice)
    alice_client.post(reverse("topic_delete", args=[topic.pk]))
    assert not Topic.objects.exists() and not Document.objects.exists()


# --- The report -------------------------------------------------------------------------------------


def test_the_report_is_rendered_with_linked_citations_and_sources(alice_client: Client, alice: User) -> None:
    topic = completed(alice)
    html = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert '<a href="#source-1"' in html and 'id="source-1"' in html
    assert "https://example.org/mot" in html and "read by the reader" in html
    assert "summary score 9.0" in html and "search score 8.0" in html
    assert "What is it?" in html  # the sub-queries used
    assert "made-up" not in html and html.count('id="source-1"') == 1


def test_hostile_markdown_is_sanitised(alice_client: Client, alice: User) -> None:
    topic = completed(
        alice,
        '# Hi\n\n<script>alert("x")</script><img src=x onerror=alert(1)> [link](javascript:alert(2)) [1]',
    )
    html = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "<script>alert" not in html and "onerror" not in html and "javascript:alert" not in html


def test_a_hostile_question_is_escaped(alice_client: Client, alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question='<img src=x onerror="alert(1)">')
    html = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert '<img src=x onerror="alert(1)">' not in html and "&lt;img" in html


def test_markdown_export_has_the_report_and_its_sources(alice_client: Client, alice: User) -> None:
    topic = completed(alice)
    response = alice_client.get(reverse("report_markdown", args=[topic.pk]))
    assert response["Content-Type"].startswith("text/markdown")
    assert "attachment;" in response["Content-Disposition"]
    text = response.content.decode()
    assert "Tokens are mixed [1]" in text and "## Источники" in text and "What is it?" in text


def test_pdf_export_is_a_pdf(alice_client: Client, alice: User) -> None:
    topic = completed(alice)
    response = alice_client.get(reverse("report_pdf", args=[topic.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF-") and len(response.content) > 1000


def test_deleting_a_topic_removes_its_rendered_pdf(
    alice_client: Client, alice: User, media_root: None, django_capture_on_commit_callbacks: Any
) -> None:
    """The PDF cache (MEDIA_ROOT/pdf/<topic>/) goes with the topic: a deleted private report
    leaves no copy on the disk."""
    topic = completed(alice)
    assert alice_client.get(reverse("report_pdf", args=[topic.pk])).status_code == 200
    folder = export.pdf_folder(topic.pk)
    assert [path.suffix for path in folder.iterdir()] == [".pdf"]
    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post(reverse("topic_delete", args=[topic.pk]))
    assert not Topic.objects.filter(pk=topic.pk).exists()
    assert not folder.exists()


def test_an_account_deleted_in_the_admin_leaves_no_pdf_of_its_topics(
    alice: User, media_root: None, django_capture_on_commit_callbacks: Any
) -> None:
    """The user's topics go with the account (a cascade, not workflow.delete_topic), and so do
    their rendered reports."""
    topic = completed(alice)
    export.report_pdf(topic)
    folder = export.pdf_folder(topic.pk)
    assert folder.is_dir()
    with django_capture_on_commit_callbacks(execute=True):
        alice.delete()
    assert not Topic.objects.filter(pk=topic.pk).exists()
    assert not folder.exists()


def test_a_render_that_outlives_its_topic_keeps_nothing(
    alice: User, media_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = completed(alice)
    render = export.render_pdf

    def deleted_meanwhile(html: str) -> bytes:
        Topic.objects.filter(pk=topic.pk).delete()  # another request deleted it as this one rendered
        return render(html)

    monkeypatch.setattr(export, "render_pdf", deleted_meanwhile)
    assert export.report_pdf(topic).startswith(b"%PDF-")
    assert not export.pdf_folder(topic.pk).exists()


def test_no_report_no_export(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    assert alice_client.get(reverse("report_markdown", args=[topic.pk])).status_code == 404


# --- Sharing ---------------------------------------------------------------------------------------


def share(client: Client, topic: Topic, days: str = "") -> str:
    client.post(reverse("share_create", args=[topic.pk]), {"expires_in_days": days})
    page = client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    start = page.index('id="share-url" readonly value="') + len('id="share-url" readonly value="')
    return page[start : page.index('"', start)]


def test_a_share_link_opens_the_report_for_anyone_and_is_shown_once(
    alice_client: Client, alice: User
) -> None:
    topic = completed(alice)
    url = share(alice_client, topic, "7")
    assert 'id="share-url"' not in alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    anonymous = Client().get(url)
    html = anonymous.content.decode()
    assert anonymous.status_code == 200 and "Tokens are mixed" in html
    assert "Cancel" not in html and "Search results and their scores" not in html and "Revoke" not in html
    token = url.rstrip("/").rsplit("/", 1)[1]
    assert Client().get(reverse("shared_report_markdown", args=[token])).status_code == 200
    expires_at = ShareLink.objects.get().expires_at
    assert expires_at is not None and expires_at > timezone.now() + timedelta(days=6)


def test_revoked_expired_and_guessed_links_are_404(alice_client: Client, alice: User) -> None:
    topic = completed(alice)
    url = share(alice_client, topic)
    link = ShareLink.objects.get()
    alice_client.post(reverse("share_revoke", args=[topic.pk, link.pk]))
    assert Client().get(url).status_code == 404
    url = share(alice_client, topic)
    ShareLink.objects.filter(revoked_at__isnull=True).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert Client().get(url).status_code == 404
    assert Client().get("/s/not-a-real-token-at-all/").status_code == 404


def test_an_unfinished_topic_cannot_be_shared(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    alice_client.post(reverse("share_create", args=[topic.pk]), {"expires_in_days": ""})
    assert not ShareLink.objects.exists()


# --- Ownership --------------------------------------------------------------------------------------


def test_another_user_gets_404_everywhere(bob_client: Client, alice: User) -> None:
    topic = completed(alice)
    subquery = topic.subqueries.all()[0]
    link, _ = ShareLink.issue(topic)
    gets = ["topic_detail", "report_markdown", "report_pdf"]
    for name in gets:
        assert bob_client.get(reverse(name, args=[topic.pk])).status_code == 404, name
    posts = [
        ("subquery_add", [topic.pk]), ("subquery_update", [topic.pk, subquery.pk]),
        ("subquery_delete", [topic.pk, subquery.pk]), ("subquery_move", [topic.pk, subquery.pk]),
        ("plan_approve", [topic.pk]), ("topic_cancel", [topic.pk]), ("topic_rerun", [topic.pk]),
        ("topic_delete", [topic.pk]), ("share_create", [topic.pk]), ("share_revoke", [topic.pk, link.pk]),
    ]  # fmt: skip
    for name, args in posts:
        assert bob_client.post(reverse(name, args=args), {"text": "x"}).status_code == 404, name
    assert "Mixture of Tokens" not in bob_client.get("/").content.decode()
    assert Topic.objects.get(pk=topic.pk).status == Topic.Status.COMPLETED
    assert RunEvent.objects.count() == 0


def test_anonymous_users_are_sent_to_sign_in(alice: User) -> None:
    topic = completed(alice)
    response = Client().get(reverse("topic_detail", args=[topic.pk]))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
