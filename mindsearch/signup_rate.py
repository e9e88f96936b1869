"""New accounts per client address and hour (SIGNUP_RATE_PER_HOUR; 0 = no limit), counted in
Django's cache, shared by every web process. The address is REMOTE_ADDR, which the ASGI layer
takes from TRUSTED_PROXIES only (mindsearch/bodylimit.py)."""

from __future__ import annotations

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from mindsearch.throttle import client_address

WINDOW_SECONDS = 3600


def _key(request: HttpRequest) -> str:
    return f"signup:addr:{client_address(request)}"


def allow(request: HttpRequest) -> bool:
    limit = settings.SIGNUP_RATE_PER_HOUR
    return not limit or (cache.get(_key(request)) or 0) < limit


def record(request: HttpRequest) -> None:
    key = _key(request)
    if not cache.add(key, 1, WINDOW_SECONDS):
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, WINDOW_SECONDS)
