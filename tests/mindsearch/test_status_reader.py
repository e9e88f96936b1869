"""The status page's reader line asks through the reader's client (mindsearch/clients/reader.py),
so it says what a research run would meet: a rejected key or a used-up quota is not "OK"."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.support.fakes import FakeService, Request, Response, reader

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def staff_viewer_of_fresh_checks(alice: User, settings: Any) -> None:
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    settings.STATUS_CACHE_SECONDS = 0


def reader_row(client: Client) -> str:
    html = client.get("/status/").content.decode()
    start = html.index('<th scope="row">Reader</th>')
    return html[start : html.index("</tr>", start)]


def out_of_balance(request: Request) -> Response:
    """r.jina.ai when the key's balance is spent: HTTP 402 and its JSON error."""
    return Response(
        402,
        {
            "data": None,
            "code": 402,
            "name": "InsufficientBalanceError",
            "status": 40203,
            "message": "Account balance not enough to run this query, please recharge.",
            "readableMessage": "InsufficientBalanceError: Account balance not enough to run this query",
        },
    )


def test_a_reader_that_takes_the_key_is_ok(alice_client: Client, settings: Any) -> None:
    with FakeService(fallback=reader({}, key="jina-key")) as fake:
        settings.JINA_READER_URL, settings.JINA_API_KEY = fake.url, "jina-key"
        line = reader_row(alice_client)
        asked = fake.requests
    assert "badge ok" in line and "with API key" in line
    assert [r.raw_path for r in asked] == ["/"] and asked[0].headers["authorization"] == "Bearer jina-key"


def test_a_rejected_key_is_a_warning_that_says_so(alice_client: Client, settings: Any) -> None:
    with FakeService(fallback=reader({}, key="jina-key")) as fake:
        settings.JINA_READER_URL, settings.JINA_API_KEY = fake.url, "an-old-key"
        line = reader_row(alice_client)
    assert "badge warn" in line and "HTTP 401" in line and "JINA_API_KEY" in line


def test_a_used_up_quota_is_a_warning_that_says_so(alice_client: Client, settings: Any) -> None:
    with FakeService(fallback=out_of_balance) as fake:
        settings.JINA_READER_URL, settings.JINA_API_KEY = fake.url, "jina-key"
        line = reader_row(alice_client)
    assert "badge warn" in line and "quota is used up" in line and "fetched directly" in line


def test_a_dead_reader_is_an_error(alice_client: Client, settings: Any) -> None:
    with FakeService() as fake:
        dead = fake.url
    settings.JINA_READER_URL = dead
    line = reader_row(alice_client)
    assert "badge error" in line and "Not reachable" in line and "not reachable at" in line
