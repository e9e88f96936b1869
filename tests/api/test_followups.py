"""The follow-up thread over the API: ask (a question or a section to expand) and list, with the
same limits as the page; another user's topic is a 404."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from research.models import FollowUp
from research.pipeline.followup import answer_pending
from tests.api.conftest import ApiClient
from tests.research.pipeline.test_followups import completed_topic

pytestmark = pytest.mark.django_db


def test_ask_then_list_the_answered_thread(alice: User, alice_api: ApiClient, settings: Any) -> None:
    settings.SEARXNG_URL = ""
    settings.AITUNNEL_API_KEY = ""
    topic = completed_topic(alice)
    url = f"/api/topics/{topic.pk}/followups"
    asked = alice_api.post(url, {"question": "Where is Mixture of Tokens used?"})
    assert asked.status_code == 201, asked.content
    body = asked.json()
    assert (body["position"], body["status"], body["kind"]) == (1, "queued", "question")
    again = alice_api.post(url, {"question": "And more?"})
    assert again.status_code == 409 and "being answered" in again.json()["detail"]
    answer_pending(topic.pk)
    [item] = alice_api.get(url).json()
    assert item["status"] == "completed" and "[2]" in item["answer"]
    assert 'href="#source-2"' in item["html"] and {c["n"] for c in item["citations"]} == {1, 2}
    expand = alice_api.post(url, {"section": "Применение"})
    assert expand.status_code == 201 and expand.json()["kind"] == "expand"


def test_bad_questions_and_limits(
    alice: User, alice_api: ApiClient, bob_api: ApiClient, settings: Any
) -> None:
    settings.RESEARCH_FOLLOWUP_MAX_CHARS = 20
    settings.RESEARCH_MAX_FOLLOWUPS = 1
    topic = completed_topic(alice)
    url = f"/api/topics/{topic.pk}/followups"
    too_long = alice_api.post(url, {"question": "x" * 21})
    assert too_long.status_code == 422 and "at most 20 characters" in too_long.content.decode()
    assert alice_api.post(url, {"section": "No such section"}).status_code == 422
    assert bob_api.post(url, {"question": "Mine?"}).status_code == 404
    assert bob_api.get(url).status_code == 404
    assert alice_api.post(url, {"question": "First?"}).status_code == 201
    FollowUp.objects.update(status=FollowUp.Status.COMPLETED)
    over = alice_api.post(url, {"question": "Second?"})
    assert over.status_code == 429 and "at most 1 follow-up question" in over.json()["detail"]
    assert FollowUp.objects.count() == 1
