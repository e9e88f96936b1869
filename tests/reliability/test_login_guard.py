"""One login guard for every door (issue 15): the sign-in page and the admin share the count,
a guessed account waits a growing delay instead of being locked, and the owner's own browser
is not held up by a stranger's guesses."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from mindsearch import throttle

PASSWORD = "correct horse battery"
THROTTLED = "Too many failed sign-in attempts"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def clean_cache(db: None) -> None:
    cache.clear()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(throttle, "time", fake)
    return fake


@pytest.fixture
def staff(db: None) -> User:
    return User.objects.create_user("root", "root@example.com", PASSWORD, is_staff=True, is_superuser=True)


def attempt(client: Client, door: str, username: str, password: str) -> Any:
    path = "/admin/login/" if door == "admin" else "/accounts/login/"
    return client.post(path, {"username": username, "password": password, "next": "/admin/"})


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_the_admin_door_is_guarded_like_the_sign_in_page(staff: User, clock: Clock) -> None:
    # The finding: 40 wrong passwords at /admin/login/ all answered 200, the right one then worked.
    attacker = Client()
    statuses = [attempt(attacker, "admin", "root", f"guess {n}").status_code for n in range(40)]
    free = settings.LOGIN_THROTTLE_ATTEMPTS
    assert statuses[:free] == [200] * free
    assert set(statuses[free + 1 :]) == {429}
    response = attempt(attacker, "admin", "root", PASSWORD)
    assert response.status_code == 429
    assert THROTTLED in response.content.decode()
    assert int(response["Retry-After"]) >= 1
    assert not signed_in(attacker)


def test_failures_at_one_door_count_at_the_other(staff: User, clock: Clock) -> None:
    attacker = Client()
    for n in range(settings.LOGIN_THROTTLE_ATTEMPTS):
        assert attempt(attacker, "page", "root", f"guess {n}").status_code == 200
    assert attempt(attacker, "admin", "root", PASSWORD).status_code == 429
    assert not signed_in(attacker)


def test_the_delay_grows_and_is_capped_instead_of_a_lockout(staff: User, clock: Clock) -> None:
    attacker = Client()
    free = settings.LOGIN_THROTTLE_ATTEMPTS
    for n in range(free):
        attempt(attacker, "page", "root", f"guess {n}")
    waits = []
    for n in range(12):
        refused = attempt(attacker, "page", "root", "still wrong")
        assert refused.status_code == 429
        waits.append(int(refused["Retry-After"]))
        clock.now += waits[-1]
        assert attempt(attacker, "page", "root", f"late guess {n}").status_code == 200
    assert waits[:4] == [1, 2, 4, 8]
    assert max(waits) == settings.LOGIN_THROTTLE_MAX_DELAY_SECONDS
    # However many guesses, the owner waits out at most the cap, then the right password works.
    clock.now += settings.LOGIN_THROTTLE_MAX_DELAY_SECONDS
    owner = Client()
    assert attempt(owner, "page", "root", PASSWORD).status_code == 302
    assert signed_in(owner)


def test_the_owners_own_browser_is_not_held_up_by_a_strangers_guesses(staff: User, clock: Clock) -> None:
    owner = Client()
    assert attempt(owner, "page", "root", PASSWORD).status_code == 302
    assert throttle.DEVICE_COOKIE in owner.cookies
    owner.post("/accounts/logout/")
    attacker = Client()
    for n in range(40):
        attempt(attacker, "admin", "root", f"guess {n}")
    assert attempt(attacker, "page", "root", PASSWORD).status_code == 429
    for door in ("page", "admin"):
        response = attempt(owner, door, "root", PASSWORD)
        assert response.status_code == 302, door
        assert signed_in(owner)
        owner.post("/accounts/logout/")


def test_a_forged_device_cookie_counts_for_nothing(staff: User, clock: Clock) -> None:
    attacker = Client()
    attacker.cookies[throttle.DEVICE_COOKIE] = "forged:value"
    for n in range(settings.LOGIN_THROTTLE_ATTEMPTS):
        attempt(attacker, "page", "root", f"guess {n}")
    assert attempt(attacker, "page", "root", PASSWORD).status_code == 429
