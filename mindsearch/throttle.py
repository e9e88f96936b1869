"""One guard for every door that takes a password: the sign-in page, the admin's sign-in, and any
form built on `GuardedAuthenticationMixin` (mindsearch/forms.py).

Failures are counted per account and per client address (the address comes from
`REMOTE_ADDR`, which the ASGI layer sets from `TRUSTED_PROXIES` only — mindsearch/bodylimit.py).
Past `LOGIN_THROTTLE_ATTEMPTS` free failures (four times as many for an address, which may be an
office behind one NAT), each further attempt must wait a delay that doubles with every failure,
up to `LOGIN_THROTTLE_MAX_DELAY_SECONDS`; a request inside the delay is refused without checking
the password. Nobody is locked out for long: the delay never exceeds the cap. And a browser that
has signed in to the account before carries a signed device cookie and is counted on its own, so
a stranger's guessing does not delay the owner at all.

Counts live in Django's cache (the database or Redis), shared by every web process.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

# An address may try several accounts (a shared office NAT), so it gets more room than one name.
ADDRESS_FACTOR = 4
DEVICE_COOKIE = "ms_device"
DEVICE_SALT = "mindsearch.throttle.device"
DEVICE_MAX_AGE = 365 * 24 * 3600
# While an account is past its free failures, one attempt at a time is checked for it.
BUSY_SECONDS = 10


@dataclass(frozen=True)
class Bucket:
    key: str
    free: int


def _name(username: str) -> str:
    return hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]


def client_address(request: HttpRequest) -> str:
    return request.META.get("REMOTE_ADDR", "") or "unknown"


def _known_devices(request: HttpRequest) -> dict[str, str]:
    """Account name hash → this browser's device id, for accounts it has signed in to."""
    raw = request.COOKIES.get(DEVICE_COOKIE)
    if not raw:
        return {}
    try:
        value = signing.loads(raw, salt=DEVICE_SALT, max_age=DEVICE_MAX_AGE)
    except signing.BadSignature:
        return {}
    return value if isinstance(value, dict) else {}


def _buckets(request: HttpRequest, username: str) -> list[Bucket]:
    limit = settings.LOGIN_THROTTLE_ATTEMPTS
    name = _name(username)
    device = _known_devices(request).get(name)
    if device:
        # The owner's own browser: only its own failures count against it.
        return [Bucket(f"login-fail:device:{name}:{device}", limit)]
    return [
        Bucket(f"login-fail:user:{name}", limit),
        Bucket(f"login-fail:addr:{client_address(request)}", limit * ADDRESS_FACTOR),
    ]


def delay_after(failures: int, free: int) -> float:
    """Seconds an attempt must wait after this many failures: none within the free ones, then
    1, 2, 4 … up to the cap."""
    if failures < free:
        return 0.0
    return float(min(settings.LOGIN_THROTTLE_MAX_DELAY_SECONDS, 2 ** (failures - free)))


def _state(bucket: Bucket) -> tuple[int, float]:
    value = cache.get(bucket.key) or {}
    if not isinstance(value, dict):
        return 0, 0.0
    return int(value.get("failures", 0)), float(value.get("last", 0.0))


class Attempt:
    """One sign-in attempt: `wait` > 0 means refused for that many seconds; otherwise the
    password may be checked, and `failed()` or `succeeded()` must follow."""

    def __init__(self, request: HttpRequest, username: str) -> None:
        self.request = request
        self.username = username
        self.buckets = _buckets(request, username)
        self.held: list[str] = []
        self.wait = 0.0
        now = time.time()
        for bucket in self.buckets:
            failures, last = _state(bucket)
            remaining = last + delay_after(failures, bucket.free) - now
            if remaining > 0:
                self.wait = max(self.wait, remaining)
            elif failures >= bucket.free:
                # Past the free failures, parallel guesses would all pass the check above
                # before any failed: one attempt at a time.
                busy = f"{bucket.key}:busy"
                if cache.add(busy, 1, BUSY_SECONDS):
                    self.held.append(busy)
                else:
                    self.wait = max(self.wait, 1.0)
        if self.wait:
            self._release()

    @property
    def allowed(self) -> bool:
        return self.wait <= 0

    def failed(self) -> None:
        window = settings.LOGIN_THROTTLE_WINDOW_SECONDS
        now = time.time()
        for bucket in self.buckets:
            failures, _last = _state(bucket)
            cache.set(bucket.key, {"failures": failures + 1, "last": now}, window)
        self._release()

    def succeeded(self) -> None:
        cache.delete(self.buckets[0].key)
        self._release()
        # Remember this browser for this account; the view puts the cookie on its response.
        name = _name(self.username)
        devices = _known_devices(self.request)
        devices.setdefault(name, secrets.token_hex(8))
        self.request._mindsearch_device_cookie = signing.dumps(
            dict(list(devices.items())[-20:]), salt=DEVICE_SALT
        )

    def _release(self) -> None:
        for key in self.held:
            cache.delete(key)
        self.held = []


def remember_device(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """Set the device cookie a successful sign-in left on the request (any door)."""
    value = getattr(request, "_mindsearch_device_cookie", None)
    if value:
        response.set_cookie(
            DEVICE_COOKIE,
            value,
            max_age=DEVICE_MAX_AGE,
            httponly=True,
            secure=settings.SESSION_COOKIE_SECURE,
            samesite="Lax",
        )
    return response
