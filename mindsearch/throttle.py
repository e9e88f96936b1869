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

Counts live in the database (`mindsearch/limits.py`), shared by every web process, and an
attempt is counted before its password is checked, in one statement: guesses sent at once are
counted as if sent one after another.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.http import HttpRequest, HttpResponse

from mindsearch import limits

# An address may try several accounts (a shared office NAT), so it gets more room than one name.
ADDRESS_FACTOR = 4
DEVICE_COOKIE = "ms_device"
DEVICE_SALT = "mindsearch.throttle.device"
DEVICE_MAX_AGE = 365 * 24 * 3600
# The request attribute a successful sign-in leaves the new cookie value in, for remember_device.
_PENDING_COOKIE_ATTRIBUTE = "_mindsearch_device_cookie"


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


class Attempt:
    """One sign-in attempt: `wait` > 0 means refused for that many seconds; otherwise the
    password may be checked, and `failed()` or `succeeded()` must follow.

    The attempt is counted before the password is checked, in one conditional statement per
    bucket (mindsearch/limits.py), so twenty guesses sent at once meet the same count as twenty
    sent one after another; a success gives its count back."""

    def __init__(self, request: HttpRequest, username: str) -> None:
        self.request = request
        self.username = username
        self.buckets = _buckets(request, username)
        self.wait = 0.0
        now = time.time()
        cap = settings.LOGIN_THROTTLE_MAX_DELAY_SECONDS
        window = settings.LOGIN_THROTTLE_WINDOW_SECONDS
        # Every bucket or none: a refusal by one leaves the others as they were. The buckets are
        # always taken in the same order, so two attempts never wait for each other's rows.
        with transaction.atomic():
            for bucket in self.buckets:
                self.wait = max(
                    self.wait, limits.take_with_backoff(bucket.key, bucket.free, cap, window, now)
                )
            if self.wait:
                transaction.set_rollback(True)

    @property
    def allowed(self) -> bool:
        return self.wait <= 0

    def failed(self) -> None:
        """Nothing more to count: the attempt was counted when it was let through."""

    def succeeded(self) -> None:
        limits.forget(self.buckets[0].key)
        for bucket in self.buckets[1:]:
            limits.give_back(bucket.key)
        # Remember this browser for this account; the view puts the cookie on its response.
        name = _name(self.username)
        devices = _known_devices(self.request)
        devices.setdefault(name, secrets.token_hex(8))
        value = signing.dumps(dict(list(devices.items())[-20:]), salt=DEVICE_SALT)
        setattr(self.request, _PENDING_COOKIE_ATTRIBUTE, value)


def remember_device(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """Set the device cookie a successful sign-in left on the request (any door)."""
    value = getattr(request, _PENDING_COOKIE_ATTRIBUTE, None)
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
