"""Who may join is the operator's choice (issue 15): SIGNUP=open|invite|closed with single-use
invite links from the admin, a per-address sign-up rate, and per-user document and storage
quotas that the documents page shows."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from mindsearch.models import Invite
from retrieval.models import UploadedDocument

pytestmark = pytest.mark.django_db

PASSWORD = "violet tulip kettle 42"


@pytest.fixture(autouse=True)
def fresh_counts() -> None:
    cache.clear()


def join(client: Client, name: str, invite: str = "", address: str = "127.0.0.1") -> Any:
    data = {"username": name, "email": "", "password1": PASSWORD, "password2": PASSWORD}
    if invite:
        data["invite"] = invite
    return client.post("/accounts/signup/", data, REMOTE_ADDR=address)


def test_closed_sign_up_creates_nobody(settings: Any) -> None:
    settings.SIGNUP = "closed"
    client = Client()
    assert client.get("/accounts/signup/").status_code == 403
    response = join(client, "mallory")
    assert response.status_code == 403
    assert "closed" in response.content.decode()
    assert not User.objects.filter(username="mallory").exists()


def test_invite_links_from_the_admin_sign_up_one_account_each(settings: Any) -> None:
    settings.SIGNUP = "invite"
    admin = User.objects.create_superuser("root", "root@example.com", PASSWORD)
    staff = Client()
    staff.force_login(admin)
    response = staff.post(
        "/admin/mindsearch/invite/add/",
        {"note": "for carol", "expires_at_0": "", "expires_at_1": ""},
        follow=True,
    )
    found = re.search(r"(http://testserver/accounts/signup/\?invite=[\w-]+)", response.content.decode())
    assert found is not None
    link = found.group(1)
    token = link.split("invite=")[1]
    assert Invite.objects.get().token_hash != token  # only the hash is kept
    stranger = Client()
    assert join(stranger, "mallory").status_code == 403
    assert join(stranger, "mallory", invite="made-up").status_code == 403
    carol = Client()
    assert carol.get(f"/accounts/signup/?invite={token}").status_code == 200
    assert join(carol, "carol", invite=token).status_code == 302
    invite = Invite.objects.get()
    assert invite.used_by is not None and invite.used_by.username == "carol" and invite.used_at is not None
    # Used once: the same link opens nothing more.
    assert join(Client(), "dave", invite=token).status_code == 403
    assert set(User.objects.values_list("username", flat=True)) == {"root", "carol"}


def test_an_address_creates_a_few_accounts_an_hour(settings: Any) -> None:
    settings.SIGNUP_RATE_PER_HOUR = 3
    statuses = [join(Client(), f"user{n}").status_code for n in range(5)]
    assert statuses == [302, 302, 302, 429, 429]
    assert User.objects.count() == 3
    # Another address is not held back.
    assert join(Client(), "elsewhere", address="198.51.100.7").status_code == 302


def test_storage_quota_refuses_the_upload_and_the_page_shows_the_use(
    alice: User, alice_client: Client, settings: Any, tmp_path: Any
) -> None:
    settings.MEDIA_ROOT = tmp_path
    settings.UPLOAD_MAX_STORAGE_BYTES = 3000
    first = SimpleUploadedFile("a.md", b"# A\n\n" + b"alpha words " * 200)
    second = SimpleUploadedFile("b.md", b"# B\n\n" + b"bravo words " * 200)
    alice_client.post("/documents/upload/", {"files": [first]})
    response = alice_client.post("/documents/upload/", {"files": [second]}, follow=True)
    assert "one account may store" in response.content.decode()
    assert UploadedDocument.objects.filter(owner=alice).count() == 1
    page = alice_client.get("/documents/").content.decode()
    quota = page[page.index('id="quota"') : page.index("</p>", page.index('id="quota"'))]
    assert "You keep 1 of at most 500 documents" in quota
    assert "2.9\xa0KB" in quota or "2.9 KB" in quota


def test_document_count_quota_still_holds(
    alice: User, alice_client: Client, settings: Any, tmp_path: Any
) -> None:
    settings.MEDIA_ROOT = tmp_path
    settings.UPLOAD_MAX_DOCUMENTS = 1
    alice_client.post("/documents/upload/", {"files": [SimpleUploadedFile("a.md", b"# A\n\nalpha")]})
    response = alice_client.post(
        "/documents/upload/", {"files": [SimpleUploadedFile("b.md", b"# B\n\nbravo")]}, follow=True
    )
    assert "the most one account may keep" in response.content.decode()
