"""`/mcp` holds no connection open and answers like the rest of the site (issue 26, findings 9
and 10): a GET (the SDK's stream of server messages, which this stateless server never sends)
is 405 at once instead of a stream left open for good — 200 of them took a web process from 21
to 221 file descriptors — and every answer carries the site's security headers."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth.models import User

from mcphub.http import app
from mindsearch.models import ApiToken

pytestmark = pytest.mark.django_db(transaction=True)


def scope(method: str, token: str | None) -> dict[str, Any]:
    headers = [(b"host", b"127.0.0.1"), (b"accept", b"text/event-stream, application/json")]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return {"type": "http", "method": method, "path": "/mcp", "headers": headers, "scheme": "http"}


async def answer(method: str, token: str | None) -> tuple[int, dict[bytes, bytes]]:
    communicator = ApplicationCommunicator(app, scope(method, token))
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await communicator.receive_output(timeout=5)  # an open stream never answers
    await communicator.receive_output(timeout=5)
    await communicator.wait(timeout=5)
    return start["status"], dict(start["headers"])


def test_get_mcp_answers_405_at_once_instead_of_holding_a_stream(alice: User) -> None:
    _row, token = ApiToken.issue(alice, "mcp")
    status, headers = async_to_sync(answer)("GET", token)
    assert status == 405
    assert headers[b"allow"] == b"POST"
    status, _headers = async_to_sync(answer)("DELETE", token)
    assert status == 405


def test_mcp_answers_carry_the_sites_security_headers(alice: User) -> None:
    _row, token = ApiToken.issue(alice, "mcp")
    for method, who in (("POST", None), ("GET", token)):
        _status, headers = async_to_sync(answer)(method, who)
        assert headers[b"x-content-type-options"] == b"nosniff"
        assert headers[b"x-frame-options"] == b"DENY"
        assert headers[b"referrer-policy"] == b"same-origin"
        assert b"frame-ancestors 'none'" in headers[b"content-security-policy"]
