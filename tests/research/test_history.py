"""The header's topic history (research/views.py topic_history, templates/research/_history.html):
on every page, the owner's newest topics with their status, narrowed by a search, in the
interface's language; nobody else's topics, and nothing for a visitor who is not signed in."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research.models import Topic
from research.views import HISTORY_SIZE

pytestmark = pytest.mark.django_db


def test_every_page_has_the_history_menu(alice_client: Client) -> None:
    for name in ("home", "document_list", "status"):
        page = alice_client.get(reverse(name)).content.decode()
        assert 'id="history"' in page and f'hx-get="{reverse("topic_history")}"' in page, name
    assert 'id="history"' not in Client().get(reverse("login")).content.decode()


def test_the_newest_topics_with_their_status_and_a_search(
    alice: User, bob: User, alice_client: Client
) -> None:
    for n in range(HISTORY_SIZE + 2):
        Topic.objects.create(owner=alice, question=f"Question number {n}", status=Topic.Status.COMPLETED)
    Topic.objects.create(owner=alice, question="Курс рубля в 2024 году", status=Topic.Status.RUNNING)
    Topic.objects.create(owner=bob, question="Bob's secret question", status=Topic.Status.COMPLETED)
    page = alice_client.get(reverse("topic_history")).content.decode()
    assert page.count("<li>") == HISTORY_SIZE
    assert page.index("Курс рубля") < page.index(f"Question number {HISTORY_SIZE + 1}")
    assert "Question number 0<" not in page and "Bob" not in page
    assert 'class="status status-running">Running<' in page

    found = alice_client.get(
        reverse("topic_history"), {"q": "рубля"}, HTTP_ACCEPT_LANGUAGE="ru"
    ).content.decode()
    assert found.count("<li>") == 1 and "Выполняется" in found
    none = alice_client.get(
        reverse("topic_history"), {"q": "secret"}, HTTP_ACCEPT_LANGUAGE="ru"
    ).content.decode()
    assert "Подходящих тем нет." in none and "Bob" not in none


def test_a_visitor_gets_no_history() -> None:
    response = Client().get(reverse("topic_history"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
