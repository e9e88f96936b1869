"""API test helpers: a client that speaks with a personal token, and topics in known states."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from mindsearch.models import ApiToken
from research.models import Document, Hit, HitScore, Report, SubQuery, Summary, SummaryScore, Topic


class ApiClient:
    """Django's test client with `Authorization: Bearer <token>` on every request and JSON bodies."""

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def request(self, method: str, path: str, body: Any = None, **extra: Any) -> Any:
        call = getattr(self.client, method.lower())
        kwargs: dict[str, Any] = {"headers": {**self.headers, **extra.pop("headers", {})}, **extra}
        if body is not None:
            kwargs.update(data=json.dumps(body), content_type="application/json")
        return call(path, **kwargs)

    def get(self, path: str, **extra: Any) -> Any:
        return self.request("GET", path, **extra)

    def post(self, path: str, body: Any = None, **extra: Any) -> Any:
        return self.request("POST", path, body, **extra)

    def put(self, path: str, body: Any = None, **extra: Any) -> Any:
        return self.request("PUT", path, body, **extra)

    def delete(self, path: str, **extra: Any) -> Any:
        return self.request("DELETE", path, **extra)


@pytest.fixture
def alice_api(alice: User) -> ApiClient:
    _row, token = ApiToken.issue(alice, "tests")
    return ApiClient(token)


@pytest.fixture
def bob_api(bob: User) -> ApiClient:
    _row, token = ApiToken.issue(bob, "tests")
    return ApiClient(token)


@pytest.fixture
def anonymous_api(db: None) -> ApiClient:
    return ApiClient(None)


SCORES = dict.fromkeys(HitScore.CRITERIA, 8.0)


def awaiting(owner: User, question: str = "What is Mixture of Tokens?") -> Topic:
    topic = Topic.objects.create(owner=owner, question=question, status=Topic.Status.AWAITING_APPROVAL)
    for position, text in enumerate(["What is it?", "Where is it used?", "How was it improved?"]):
        SubQuery.objects.create(topic=topic, position=position, text=text)
    return topic


def completed(owner: User, question: str = "What is Mixture of Tokens?") -> Topic:
    topic = awaiting(owner, question)
    topic.set_status(Topic.Status.COMPLETED, llm_model="test-model", finished_at=timezone.now())
    subquery = topic.subqueries.first()
    assert subquery is not None
    hit = Hit.objects.create(
        topic=topic, subquery=subquery, url="https://example.org/mot",
        normalized_url="https://example.org/mot", title="Mixture of Tokens paper",
    )  # fmt: skip
    HitScore.objects.create(hit=hit, **SCORES)
    document = Document.objects.create(
        topic=topic, hit=hit, title=hit.title, url=hit.url, text="Full text", fetched_via="reader"
    )
    summary = Summary.objects.create(document=document, text="Tokens are mixed across examples.")
    SummaryScore.objects.create(summary=summary, **SCORES)
    source = {"n": 1, "title": hit.title, "url": hit.url, "document_id": document.pk, "fetched_via": "reader"}
    Report.objects.create(
        topic=topic,
        markdown="# Answer\n\nTokens are mixed [1].\n\n## Источники\n\n1. [Mixture of Tokens paper](https://example.org/mot)",
        sources=[{**source, "score": 8.0}],
        model="test-model",
    )
    return topic
