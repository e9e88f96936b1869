"""A shared report's PDF is rendered once per version (issue 15): anonymous requests, several at
once, cost one WeasyPrint render; a new version of the report or another language renders anew."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from research import export
from research.models import Report, ShareLink
from tests.reliability.conftest import _finished_topic

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch, settings: Any, tmp_path: Any) -> list[str]:
    settings.MEDIA_ROOT = tmp_path
    seen: list[str] = []
    real = export.render_pdf

    def counting(html: str) -> bytes:
        seen.append(html)
        time.sleep(0.5)  # a slow render: parallel requests must wait for it, not start their own
        return real(html)

    monkeypatch.setattr(export, "render_pdf", counting)
    return seen


def fetch(path: str, results: list[Any], language: str = "en") -> None:
    try:
        response = Client(HTTP_ACCEPT_LANGUAGE=language).get(path)
        results.append((response.status_code, response["Content-Type"], response.content[:5]))
    finally:
        connection.close()


def test_parallel_anonymous_requests_share_one_render(alice: User, renders: list[str]) -> None:
    topic = _finished_topic(alice)
    _link, token = ShareLink.issue(topic)
    path = f"/s/{token}/report.pdf"
    results: list[Any] = []
    threads = [threading.Thread(target=fetch, args=(path, results)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [(200, "application/pdf", b"%PDF-")] * 3
    assert len(renders) == 1
    fetch(path, results)
    assert len(renders) == 1  # served from the stored file


def test_a_new_version_or_language_renders_anew(alice: User, renders: list[str]) -> None:
    topic = _finished_topic(alice)
    _link, token = ShareLink.issue(topic)
    path = f"/s/{token}/report.pdf"
    results: list[Any] = []
    fetch(path, results)
    fetch(path, results, language="ru")
    assert len(renders) == 1  # a file is in its report's language, whatever the reader's (issue 29)
    Report.objects.filter(topic=topic).update(markdown="# Rewritten\n\nNew text [1].")
    fetch(path, results)
    assert len(renders) == 2
    assert "Rewritten" in renders[-1]
    assert all(status == 200 for status, _type, _head in results)
