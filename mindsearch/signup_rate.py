"""New accounts per client address and hour (SIGNUP_RATE_PER_HOUR; 0 = no limit), counted in the
database in one conditional statement (mindsearch/limits.py), so concurrent sign-ups from one
address cannot all pass the check before any is counted. The address is REMOTE_ADDR, which the
ASGI layer takes from TRUSTED_PROXIES only (mindsearch/bodylimit.py)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from mindsearch import limits
from mindsearch.throttle import client_address

WINDOW_SECONDS = 3600


def _key(request: HttpRequest) -> str:
    return f"signup:addr:{client_address(request)}"


def take(request: HttpRequest) -> bool:
    """Count one new account for the request's address, if the hour's limit allows it. Call it in
    the transaction that creates the account: a rollback gives the slot back."""
    limit = settings.SIGNUP_RATE_PER_HOUR
    return not limit or limits.take(_key(request), limit, WINDOW_SECONDS)
