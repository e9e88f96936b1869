"""Every secret handed out as a token or a link is a `HashedToken`: one way to issue, find, expire
and spend it, and only its hash stored."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.auth.models import User

from mindsearch.models import ApiToken, HashedToken, Invite, hash_token
from research.models import ShareLink, Topic

pytestmark = pytest.mark.django_db


def test_every_model_that_stores_a_token_hash_is_a_hashed_token() -> None:
    stored = [m for m in apps.get_models() if any(f.name == "token_hash" for f in m._meta.fields)]
    assert {m.__name__ for m in stored} >= {"ApiToken", "ShareLink", "Invite"}
    assert all(issubclass(m, HashedToken) for m in stored), stored


def issue(
    kind: type[HashedToken], owner: User, expires_in: timedelta | None = None
) -> tuple[HashedToken, str]:
    if kind is ApiToken:
        return ApiToken.issue(owner, "script", expires_in)
    if kind is ShareLink:
        return ShareLink.issue(Topic.objects.create(owner=owner, question="Q?"), expires_in)
    return Invite.issue(owner, "for Bob", expires_in)


def spend(row: HashedToken) -> None:
    if isinstance(row, Invite):
        Invite.objects.filter(pk=row.pk).update(used_at=row.created_at)
    else:
        row.revoke()  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", [ApiToken, ShareLink, Invite])
def test_a_token_is_found_by_its_secret_until_it_expires_or_is_spent(
    kind: type[HashedToken], alice: User
) -> None:
    row, secret = issue(kind, alice)
    assert row.token_hash == hash_token(secret) and secret not in row.token_hash
    assert kind._default_manager.find(secret) == row  # type: ignore[attr-defined]
    assert kind._default_manager.find("") is None and kind._default_manager.find(secret + "x") is None  # type: ignore[attr-defined]
    assert row.is_usable
    spend(row)
    row.refresh_from_db()
    assert not row.is_usable and kind._default_manager.find(secret) is None
    expired, old = issue(kind, alice, timedelta(seconds=-1))
    assert not expired.is_usable and kind._default_manager.find(old) is None


def test_api_tokens_carry_their_prefix() -> None:
    assert ApiToken.new_secret()[0].startswith("mst_") and not Invite.new_secret()[0].startswith("mst_")
