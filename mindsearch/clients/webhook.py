"""Signed webhook deliveries (research/delivery.py) to an address a user gave.

The body is JSON; the request carries `X-MindSearch-Signature: t=<unix time>,v1=<hex>` where the
hex is HMAC-SHA256 of `"<t>.<body>"` under the schedule's secret, so a receiver can check both
who sent it and that it is fresh (the scheme of Stripe's and GitHub's webhooks). Connections go
through the same checked transport as page fetches: never to private, loopback or metadata
addresses unless MINDSEARCH_ALLOW_PRIVATE_URLS, redirects not followed.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time

import httpx
from asgiref.sync import async_to_sync

from mindsearch.clients.fetch import FetchError, check_url, checked_client

TIMEOUT_SECONDS = 15.0
SIGNATURE_HEADER = "X-MindSearch-Signature"
EVENT_HEADER = "X-MindSearch-Event"


class WebhookError(Exception):
    """The receiver could not be reached or did not accept the delivery; said to the owner."""


def signature(secret: str, body: bytes, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, body: bytes, header: str, *, tolerance: int = 300, now: float | None = None) -> bool:
    """What a receiver does: the signature matches and is at most `tolerance` seconds old."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    fresh = abs((now if now is not None else time.time()) - timestamp) <= tolerance
    return fresh and hmac.compare_digest(signature(secret, body, timestamp), header)


def check_address(url: str) -> None:
    """Refuse an address a delivery must never go to (raises WebhookError with the reason)."""
    try:
        check_url(url)
    except FetchError as exc:
        raise WebhookError(str(exc)) from None


def post(url: str, body: bytes, secret: str, event: str) -> int:
    """POST the signed body; the receiver's status when it is 2xx, else WebhookError."""
    check_address(url)
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(secret, body, int(time.time())),
        EVENT_HEADER: event,
    }
    return async_to_sync(_post)(url, body, headers)


async def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    try:
        async with asyncio.timeout(TIMEOUT_SECONDS), checked_client(TIMEOUT_SECONDS) as client:
            response = await client.post(url, content=body, headers=headers)
    except (TimeoutError, httpx.TimeoutException):
        raise WebhookError(f"the receiver did not answer within {TIMEOUT_SECONDS:g} s") from None
    except FetchError as exc:
        raise WebhookError(str(exc)) from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise WebhookError(f"could not reach the receiver: {exc or type(exc).__name__}") from None
    if not response.is_success:
        raise WebhookError(f"the receiver answered HTTP {response.status_code}")
    return response.status_code
