"""Smaller items of issue 29 on the topic pages: *Export archive* only once a run has found
something, and an imported topic told apart from its original on its page and in the list."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research.models import Topic
from research.pipeline.stage import StageName
from tests.research.test_views import awaiting, completed

pytestmark = pytest.mark.django_db


def export_offered(client: Client, topic: Topic) -> bool:
    page = client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    return reverse("topic_export", args=[topic.pk]) in page


def test_export_archive_is_offered_once_there_is_something_to_keep(alice_client: Client, alice: User) -> None:
    assert not export_offered(alice_client, awaiting(alice))  # a plan under review
    stopped = Topic.objects.create(owner=alice, question="Stopped before searching", status="failed")
    assert not export_offered(alice_client, stopped)
    assert export_offered(alice_client, completed(alice))


def test_an_imported_topic_is_marked_on_its_page_and_in_the_list(alice_client: Client, alice: User) -> None:
    original = completed(alice)
    copy = completed(alice)
    Topic.objects.filter(pk=copy.pk).update(archive_bytes=48_213)
    page = alice_client.get(reverse("topic_detail", args=[copy.pk])).content.decode()
    assert 'id="imported-mark"' in page and "imported from an archive" in page
    assert (
        'id="imported-mark"'
        not in alice_client.get(reverse("topic_detail", args=[original.pk])).content.decode()
    )
    listing = alice_client.get(reverse("home")).content.decode()
    rows = listing.split("<tbody>")[1].split("</tbody>")[0].split("<tr>")[1:]
    marked = [row for row in rows if 'class="tag imported"' in row]
    assert len(rows) == 2 and len(marked) == 1 and f"/topics/{copy.pk}/" in marked[0]
    ru = Client()
    ru.force_login(alice)
    ru.cookies["django_language"] = "ru"
    assert "импортирована" in ru.get(reverse("topic_detail", args=[copy.pk])).content.decode()


def test_the_theme_switch_is_not_called_a_topic_in_russian(alice: User) -> None:
    """ "Тема" is what the app calls a research topic; the colour switch is "Оформление" (issue 29)."""
    client = Client()
    client.force_login(alice)
    client.cookies["django_language"] = "ru"
    page = client.get(reverse("home")).content.decode()
    label = page.split('<label for="theme"')[1].split("</label>")[0]
    assert label.endswith(">Оформление")


def test_a_web_topic_cannot_start_without_web_search_and_the_form_says_why(
    alice_client: Client, settings: object
) -> None:
    form = {"question": "How do tides work?", "sources": "web", "mode": "quick", "time_range": ""}
    response = alice_client.post(reverse("topic_create"), form)
    page = response.content.decode()
    assert "Web search is not configured on this server (SEARXNG_URL is empty)" in page
    assert not Topic.objects.exists()
    response = alice_client.post(reverse("topic_create"), {**form, "sources": "docs"})
    assert response.status_code == 302 and Topic.objects.count() == 1


def test_a_documents_topic_that_finds_nothing_fails_in_the_readers_language(alice: User) -> None:
    """The run's own failure (research/pipeline/private.py) is kept as a msgid: the status line and
    the event log read it in Russian, the record stays English (issue 29)."""
    from research.pipeline import private, run
    from research.pipeline.context import RunContext

    topic = Topic.objects.create(owner=alice, question="Что в моих заметках о приливах?", sources="docs")
    ctx = RunContext(topic=topic, llm_enabled=False, model="")

    def nothing_relevant() -> None:
        private.read_documents(ctx, StageName.READ)

    assert run._guarded(ctx, nothing_relevant) is False
    topic.refresh_from_db()
    assert topic.status == "failed" and topic.error.startswith("None of the passages found in your documents")
    client = Client()
    client.force_login(alice)
    client.cookies["django_language"] = "ru"
    page = client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert page.count("Ни один фрагмент, найденный в ваших документах, недостаточно относится к вопросу") >= 2
    assert "None of the passages" not in page
    english = Client()
    english.force_login(alice)
    assert (
        "None of the passages found in your documents"
        in english.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    )
