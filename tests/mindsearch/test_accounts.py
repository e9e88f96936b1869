"""Sign-up, sign-in (with throttling), sign-out and password change over real HTTP requests."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.http.response import HttpResponseBase
from django.test import Client

ALICE_PASSWORD = "correct horse battery"
BOB_PASSWORD = "another staple battery"
NEW_PASSWORD = "violet tulip kettle 42"
THROTTLED = "Too many failed sign-in attempts"


@pytest.fixture(autouse=True)
def clear_throttle_counters(db):
    """Failure counters live in Django's cache; start every test without any."""
    cache.clear()


def signed_in_user_id(client: Client) -> str | None:
    return client.session.get("_auth_user_id")


def sign_in(username: str, password: str) -> tuple[Client, HttpResponseBase]:
    """One sign-in attempt from a fresh browser; every client shares the address 127.0.0.1."""
    client = Client()
    response = client.post("/accounts/login/", {"username": username, "password": password})
    return client, response


def fail_sign_ins(username: str, times: int) -> None:
    for _ in range(times):
        _client, response = sign_in(username, "not the password")
        assert response.status_code == 200


def signup_data(**overrides: str) -> dict[str, str]:
    data = {
        "username": "carol",
        "email": "carol@example.com",
        "password1": NEW_PASSWORD,
        "password2": NEW_PASSWORD,
    }
    return {**data, **overrides}


# --- Who may see what ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/status/", "/accounts/password/"])
def test_anonymous_visitor_is_sent_to_sign_in(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response.url == f"/accounts/login/?next={path}"


@pytest.mark.parametrize("path", ["/accounts/login/", "/accounts/signup/"])
def test_account_forms_are_public_with_labelled_fields(client, path):
    response = client.get(path)
    assert response.status_code == 200
    assert '<label for="id_username"' in response.content.decode()


def test_signed_in_user_visiting_sign_in_is_sent_home(client, alice):
    client.force_login(alice)
    response = client.get("/accounts/login/")
    assert response.status_code == 302
    assert response.url == "/"


# --- Sign up ------------------------------------------------------------------------------------


def test_signup_creates_user_and_signs_them_in(client, db):
    response = client.post("/accounts/signup/", signup_data())
    assert response.status_code == 302
    carol = User.objects.get(username="carol")
    assert carol.email == "carol@example.com"
    assert carol.check_password(NEW_PASSWORD)
    assert signed_in_user_id(client) == str(carol.pk)


def test_signup_lands_on_the_empty_workspace_with_the_status(client, db):
    response = client.post("/accounts/signup/", signup_data(), follow=True)
    assert response.redirect_chain == [("/", 302)]
    assert response.status_code == 200
    html = response.content.decode()
    assert "No topics yet" in html and "Start a topic" in html
    assert '<th scope="row">Database</th>' in html and '<th scope="row">Worker</th>' in html


def test_signup_with_mismatched_passwords_creates_nothing(client, db):
    response = client.post("/accounts/signup/", signup_data(password2="violet tulip kettle 43"))
    assert response.status_code == 200
    assert "The two password fields didn’t match." in response.content.decode()
    assert not User.objects.filter(username="carol").exists()
    assert signed_in_user_id(client) is None


def test_signup_with_taken_username_creates_nothing(client, alice):
    response = client.post("/accounts/signup/", signup_data(username="alice"))
    assert response.status_code == 200
    assert "A user with that username already exists." in response.content.decode()
    assert User.objects.filter(username="alice").count() == 1
    assert signed_in_user_id(client) is None


# --- Sign in ------------------------------------------------------------------------------------


def test_sign_in_with_right_password(alice):
    client, response = sign_in("alice", ALICE_PASSWORD)
    assert response.status_code == 302
    assert response.url == "/"
    assert signed_in_user_id(client) == str(alice.pk)


def test_sign_in_with_wrong_password_shows_error(alice):
    client, response = sign_in("alice", "not the password")
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert signed_in_user_id(client) is None


def test_account_is_locked_after_too_many_failures_even_with_right_password(alice):
    fail_sign_ins("alice", settings.LOGIN_THROTTLE_ATTEMPTS)
    client, response = sign_in("alice", ALICE_PASSWORD)
    assert response.status_code == 429
    assert THROTTLED in response.content.decode()
    assert signed_in_user_id(client) is None


def test_locked_account_does_not_lock_other_accounts_from_same_address(alice, bob):
    fail_sign_ins("alice", settings.LOGIN_THROTTLE_ATTEMPTS)
    client, response = sign_in("bob", BOB_PASSWORD)
    assert response.status_code == 302
    assert signed_in_user_id(client) == str(bob.pk)


@pytest.mark.parametrize(("spare", "status"), [(1, 302), (0, 429)])
def test_address_is_locked_after_its_own_larger_limit(bob, spare, status):
    address_limit = settings.LOGIN_THROTTLE_ATTEMPTS * 4  # an office NAT may hold several users
    # One failure per name, so no single account reaches its own limit.
    for n in range(address_limit - spare):
        fail_sign_ins(f"guess{n}", 1)
    _client, response = sign_in("bob", BOB_PASSWORD)
    assert response.status_code == status


def test_successful_sign_in_clears_account_failures(alice):
    almost = settings.LOGIN_THROTTLE_ATTEMPTS - 1
    fail_sign_ins("alice", almost)
    assert sign_in("alice", ALICE_PASSWORD)[1].status_code == 302
    fail_sign_ins("alice", almost)
    client, response = sign_in("alice", ALICE_PASSWORD)
    assert response.status_code == 302
    assert signed_in_user_id(client) == str(alice.pk)


# --- Sign out -----------------------------------------------------------------------------------


def test_sign_out_refuses_get(client, alice):
    client.force_login(alice)
    response = client.get("/accounts/logout/")
    assert response.status_code == 405
    assert signed_in_user_id(client) == str(alice.pk)


def test_sign_out_by_post(client, alice):
    client.force_login(alice)
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    assert response.url == "/accounts/login/"
    assert signed_in_user_id(client) is None


# --- Password change ----------------------------------------------------------------------------


def change_password(client: Client, old: str) -> object:
    data = {"old_password": old, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}
    return client.post("/accounts/password/", data)


def test_password_change_requires_old_password(client, alice):
    client.force_login(alice)
    response = change_password(client, old="not the password")
    assert response.status_code == 200
    assert "Your old password was entered incorrectly" in response.content.decode()
    alice.refresh_from_db()
    assert alice.check_password(ALICE_PASSWORD)


def test_password_change_replaces_password_for_sign_in(client, alice):
    client.force_login(alice)
    response = change_password(client, old=ALICE_PASSWORD)
    assert response.status_code == 302
    assert response.url == "/accounts/password/done/"
    assert sign_in("alice", NEW_PASSWORD)[1].status_code == 302
    assert sign_in("alice", ALICE_PASSWORD)[1].status_code == 200


# --- CSRF ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/accounts/login/", {"username": "alice", "password": ALICE_PASSWORD}),
        ("/accounts/signup/", signup_data()),
    ],
)
def test_anonymous_forms_refuse_post_without_csrf_token(alice, path, data):
    client = Client(enforce_csrf_checks=True)
    response = client.post(path, data)
    assert response.status_code == 403
    assert signed_in_user_id(client) is None
    assert not User.objects.filter(username="carol").exists()


@pytest.mark.parametrize("path", ["/accounts/logout/", "/accounts/password/"])
def test_signed_in_forms_refuse_post_without_csrf_token(alice, path):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    data = {"old_password": ALICE_PASSWORD, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}
    response = client.post(path, data)
    assert response.status_code == 403
    assert signed_in_user_id(client) == str(alice.pk)
    alice.refresh_from_db()
    assert alice.check_password(ALICE_PASSWORD)
