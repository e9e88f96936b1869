"""The topic pages keep rendered fragments (research/fragments.py); what a user sees must still
be current. Every test here changes something between two requests, as a user would see it;
tests/research/test_fragments.py changes every row kind behind the app's back.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research.models import Report, Topic
from research.progress import record_event
from tests.research.test_views import awaiting, completed

pytestmark = pytest.mark.django_db


def page(client: Client, topic: Topic) -> str:
    response = client.get(reverse("topic_detail", args=[topic.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_new_event_shows_on_the_next_load(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    topic.set_status(Topic.Status.RUNNING)
    assert "searched the first query" not in page(alice_client, topic)
    record_event(topic, "search", "searched the first query", done=1, total=6)
    html = page(alice_client, topic)
    assert "searched the first query" in html
    assert "1/6" in html


def test_a_finished_run_shows_its_report_after_the_running_page_was_seen(
    alice_client: Client, alice: User
) -> None:
    topic = completed(alice)
    report = Report.objects.get(topic=topic)
    Report.objects.filter(pk=report.pk).delete()
    topic.set_status(Topic.Status.RUNNING)
    assert "Routing is learned end to end" not in page(alice_client, topic)
    markdown = "# Answer\n\nRouting is learned end to end [1]."
    Report.objects.create(topic=topic, markdown=markdown, sources=report.sources)
    topic.set_status(Topic.Status.COMPLETED)
    assert "Routing is learned end to end" in page(alice_client, topic)


def test_forms_on_a_cached_page_carry_this_session_s_token(alice: User) -> None:
    topic = completed(alice)
    first, second = Client(enforce_csrf_checks=True), Client(enforce_csrf_checks=True)
    first.force_login(alice)
    second.force_login(alice)
    page(first, topic)
    response = second.get(reverse("topic_detail", args=[topic.pk]))
    token = response.context["csrf_token"]
    assert f'name="csrfmiddlewaretoken" value="{token}"' in response.content.decode()
    rerun = second.post(reverse("topic_rerun", args=[topic.pk]), {"csrfmiddlewaretoken": str(token)})
    assert rerun.status_code == 302


def test_each_language_gets_its_own_fragments(alice_client: Client, alice: User) -> None:
    topic = completed(alice)
    assert "Progress" in page(alice_client, topic)
    alice_client.cookies["django_language"] = "ru"
    html = page(alice_client, topic)
    assert "Ход работы" in html
    assert ">Progress<" not in html


def rows(client: Client) -> str:
    html = client.get("/").content.decode()
    return html[html.index('id="topic-rows"') :]


def test_list_rows_follow_status_and_stage(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    assert "Waiting for plan approval" in rows(alice_client)
    Topic.objects.filter(pk=topic.pk).update(status=Topic.Status.RUNNING, stage="read")
    html = rows(alice_client)
    assert "Waiting for plan approval" not in html
    assert "Running" in html
    assert "Read pages" in html


def test_another_user_never_gets_someone_else_s_rows(
    alice_client: Client, bob_client: Client, alice: User
) -> None:
    awaiting(alice)
    assert "What is Mixture of Tokens?" in alice_client.get("/").content.decode()
    assert "What is Mixture of Tokens?" not in bob_client.get("/").content.decode()
