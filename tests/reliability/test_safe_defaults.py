"""Safe defaults (issue 26, finding 10): the deploy check speaks up about open sign-up without a
budget, plans awaiting approval count against the active-topic cap, a new password ends the
API tokens, and a backup is private from its first byte."""

from __future__ import annotations

import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.test import Client

from mindsearch import backup
from mindsearch.checks import W_OPEN_SIGNUP_WITHOUT_BUDGET
from mindsearch.models import ApiToken
from research.models import Topic

PASSWORD = "correct horse battery"
NEW_PASSWORD = "a new long secret 77"
FORM = {"question": "How do tides work?", "sources": "web", "mode": "quick", "time_range": ""}


def deploy_warnings() -> set[str]:
    return {message.id or "" for message in run_checks(include_deployment_checks=True)}


def test_check_deploy_warns_of_open_sign_up_without_a_budget(settings: Any) -> None:
    settings.SIGNUP, settings.LLM_DAILY_TOKEN_BUDGET, settings.LLM_DAILY_COST_BUDGET = "open", 0, 0.0
    assert W_OPEN_SIGNUP_WITHOUT_BUDGET in deploy_warnings()
    settings.LLM_DAILY_TOKEN_BUDGET = 200_000
    assert W_OPEN_SIGNUP_WITHOUT_BUDGET not in deploy_warnings()
    settings.LLM_DAILY_TOKEN_BUDGET, settings.SIGNUP = 0, "invite"
    assert W_OPEN_SIGNUP_WITHOUT_BUDGET not in deploy_warnings()


@pytest.mark.usefixtures("web_search_configured")
@pytest.mark.django_db
def test_plans_awaiting_approval_count_as_active_topics(
    alice: User, alice_client: Client, settings: Any
) -> None:
    # The finding: 10 plans awaiting approval got past a cap of 5.
    settings.RESEARCH_MAX_ACTIVE_TOPICS = 5
    for n in range(5):
        Topic.objects.create(owner=alice, question=f"plan {n}", status=Topic.Status.AWAITING_APPROVAL)
    refused = alice_client.post("/api/topics", FORM, content_type="application/json")
    assert refused.status_code == 429
    assert Topic.objects.filter(owner=alice).count() == 5
    # Approving one of them is not starting a sixth.
    waiting = Topic.objects.filter(owner=alice).order_by("pk")[0]
    waiting.subqueries.create(position=0, text="tides and the moon")
    alice_client.post(f"/topics/{waiting.pk}/approve/")
    waiting.refresh_from_db()
    assert waiting.status == Topic.Status.QUEUED


def bearer(token: str) -> int:
    return Client().get("/api/topics", headers={"Authorization": f"Bearer {token}"}).status_code


@pytest.mark.django_db
def test_a_new_password_ends_the_api_tokens(alice: User, alice_client: Client) -> None:
    _row, token = ApiToken.issue(alice, "script")
    _row, bobs = ApiToken.issue(User.objects.create_user("bob", password=PASSWORD), "bob's")
    assert bearer(token) == 200
    changed = alice_client.post(
        "/accounts/password/",
        {
            "old_password": PASSWORD,
            "new_password1": "a new long secret 77",
            "new_password2": "a new long secret 77",
        },
    )
    assert changed.status_code == 302
    assert bearer(token) == 401
    assert bearer(bobs) == 200  # another account's tokens stay


@pytest.mark.django_db
def test_a_password_hash_upgraded_at_sign_in_keeps_the_tokens(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    owner = User.objects.create_user("carol", password=PASSWORD)
    _row, token = ApiToken.issue(owner, "script")
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        "django.contrib.auth.hashers.MD5PasswordHasher",
    ]
    assert Client().post("/accounts/login/", {"username": "carol", "password": PASSWORD}).status_code == 302
    owner.refresh_from_db()
    assert owner.password.startswith("pbkdf2_")  # upgraded, not changed
    assert bearer(token) == 200
    owner.save()  # and saving the account for anything else keeps them too
    assert bearer(token) == 200


@pytest.mark.django_db
def test_a_backup_is_private_while_it_is_written(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The finding: the .partial file was 0644 (the umask's) until the whole tar was written.
    settings.MEDIA_ROOT = tmp_path / "media"
    target = tmp_path / "b.tar"
    partial = tmp_path / "b.tar.partial"
    partial.write_text("left by a backup that died")
    partial.chmod(0o644)
    modes: list[int] = []
    add = tarfile.TarFile.add

    def watched_add(archive: tarfile.TarFile, *args: Any, **kwargs: Any) -> None:
        modes.append(stat.S_IMODE(partial.stat().st_mode))
        add(archive, *args, **kwargs)

    monkeypatch.setattr(tarfile.TarFile, "add", watched_add)
    backup.backup(target)
    assert modes and set(modes) == {0o600}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not partial.exists()
