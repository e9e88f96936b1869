"""First run (issue 29): on an instance without staff, the first account made with SIGNUP=open
becomes its administrator, is told so and lands on the status page, which shows it what is not
set up and how to set it; not with MINDSEARCH_FIRST_USER_ADMIN=0, not with sign-up by invite,
never a second account, and two sign-ups at once make one administrator."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.test import Client

from mindsearch.models import Invite

PASSWORD = "violet tulip kettle 42"


@pytest.fixture(autouse=True)
def first_run(settings: Any, db: None) -> None:
    settings.FIRST_USER_ADMIN = True
    settings.SIGNUP = "open"
    settings.SIGNUP_RATE_PER_HOUR = 0
    cache.clear()


def sign_up(name: str, client: Client | None = None, **extra: str) -> tuple[Client, Any]:
    client = client or Client()
    data = {"username": name, "email": f"{name}@example.com", "password1": PASSWORD, "password2": PASSWORD}
    return client, client.post("/accounts/signup/", {**data, **extra}, follow=True)


def test_the_first_account_is_the_administrator_and_sees_what_is_missing() -> None:
    page = Client().get("/accounts/signup/").content.decode()
    assert 'id="first-admin"' in page and "becomes its administrator" in page
    _client, response = sign_up("installer")
    user = User.objects.get(username="installer")
    assert user.is_staff and user.is_superuser
    assert response.redirect_chain[-1][0] == "/status/"
    page = response.content.decode()
    assert "you are its administrator" in page
    assert "Set SEARXNG_URL" in page  # what is missing, and how to set it (staff only)
    # The second account is a plain user, and the sign-up page no longer promises anything.
    assert 'id="first-admin"' not in Client().get("/accounts/signup/").content.decode()
    _client, response = sign_up("second")
    second = User.objects.get(username="second")
    assert not second.is_staff and not second.is_superuser
    assert response.redirect_chain[-1][0] == "/"
    assert "Set SEARXNG_URL" not in Client().get("/status/").content.decode()


def test_the_first_run_is_said_in_russian() -> None:
    client = Client()
    client.cookies["django_language"] = "ru"
    _client, response = sign_up("ustanovshchik", client)
    assert "вы его администратор" in response.content.decode()


def test_an_instance_with_staff_makes_no_administrator() -> None:
    User.objects.create_user("root", password=PASSWORD, is_staff=True)
    sign_up("newcomer")
    assert not User.objects.get(username="newcomer").is_staff


def test_turned_off_by_the_operator(settings: Any) -> None:
    settings.FIRST_USER_ADMIN = False
    assert 'id="first-admin"' not in Client().get("/accounts/signup/").content.decode()
    sign_up("installer")
    assert not User.objects.get(username="installer").is_staff


def test_not_when_sign_up_is_by_invitation(settings: Any) -> None:
    settings.SIGNUP = "invite"
    _invite, token = Invite.issue(None, "for the installer")
    sign_up("invited", invite=token)
    assert User.objects.filter(username="invited").exists()
    assert not User.objects.get(username="invited").is_staff


@pytest.mark.django_db(transaction=True)
def test_two_first_sign_ups_at_once_make_one_administrator(settings: Any) -> None:
    """Both sign-ups run at once in their own connections; the lock lets one see the other."""
    settings.FIRST_USER_ADMIN, settings.SIGNUP, settings.SIGNUP_RATE_PER_HOUR = True, "open", 0
    barrier = threading.Barrier(4)

    def one(name: str) -> None:
        try:
            barrier.wait()
            sign_up(name)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(f"racer{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert User.objects.filter(username__startswith="racer").count() == 4
    assert User.objects.filter(is_staff=True).count() == 1
