"""Sign-in throttling: failed attempts counted per account name and per client address.

Counts live in Django's cache, which is the database (or Redis) and so shared by every web
process; a lock-out therefore holds however many processes serve the site.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

# An address may try several accounts (a shared office NAT), so it gets more room than one name.
ADDRESS_FACTOR = 4


def _keys(request: HttpRequest, username: str) -> list[tuple[str, int]]:
    limit = settings.LOGIN_THROTTLE_ATTEMPTS
    name = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    address = request.META.get("REMOTE_ADDR", "") or "unknown"
    return [(f"login-fail:user:{name}", limit), (f"login-fail:addr:{address}", limit * ADDRESS_FACTOR)]


def is_locked_out(request: HttpRequest, username: str) -> bool:
    return any((cache.get(key) or 0) >= limit for key, limit in _keys(request, username))


def record_failure(request: HttpRequest, username: str) -> None:
    window = settings.LOGIN_THROTTLE_WINDOW_SECONDS
    for key, _limit in _keys(request, username):
        if cache.add(key, 1, window):
            continue
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, window)


def clear_failures(request: HttpRequest, username: str) -> None:
    cache.delete(_keys(request, username)[0][0])
