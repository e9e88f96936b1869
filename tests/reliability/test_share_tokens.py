"""Hostile input: share tokens that are guessed, altered, revoked or expired, on every shared URL.

A share link opens one report read-only for anyone who has its token. Everything else — a token
made up in the link's own shape, one character changed, absurd lengths, a revoked or expired
link, a link whose topic was deleted — is the same plain 404 on the page and both downloads.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from research.models import ShareLink
from tests.reliability.conftest import SECRET, Estate

pytestmark = pytest.mark.django_db

SHARED = ["shared_report", "shared_report_markdown", "shared_report_pdf"]


def status_of(token: str) -> dict[str, int]:
    return {name: Client().get(reverse(name, args=[token])).status_code for name in SHARED}


def test_the_real_token_opens_the_report_read_only(estate: Estate) -> None:
    response = Client().get(reverse("shared_report", args=[estate.share_token]))
    assert response.status_code == 200 and SECRET in response.content.decode()
    assert Client().get(reverse("shared_report_markdown", args=[estate.share_token])).status_code == 200


@pytest.mark.parametrize(
    "forge",
    [
        lambda token: secrets.token_urlsafe(32),  # the same shape, guessed
        lambda token: token[:-1] + ("A" if token[-1] != "A" else "B"),  # one character off
        lambda token: token.upper(),
        lambda token: token[:8],
        lambda token: token + "x" * 2000,
        lambda token: "%00" + token,
        lambda token: ShareLink.objects.get().token_hash,  # the stored hash is no token
    ],
    ids=["guessed", "one-char-off", "upper-case", "prefix", "very-long", "nul", "the-hash"],
)
def test_a_forged_token_is_404_everywhere(estate: Estate, forge: Callable[[str], str]) -> None:
    assert status_of(forge(estate.share_token)) == dict.fromkeys(SHARED, 404)


def test_a_revoked_link_is_404_everywhere_and_others_still_work(estate: Estate) -> None:
    _other, other_token = ShareLink.issue(estate.topic)
    estate.link.revoke()
    assert status_of(estate.share_token) == dict.fromkeys(SHARED, 404)
    assert status_of(other_token)["shared_report"] == 200


def test_an_expired_link_is_404_everywhere(estate: Estate) -> None:
    ShareLink.objects.filter(pk=estate.link.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert status_of(estate.share_token) == dict.fromkeys(SHARED, 404)


def test_a_deleted_topic_takes_its_links_with_it(estate: Estate) -> None:
    estate.topic.delete()
    assert status_of(estate.share_token) == dict.fromkeys(SHARED, 404)


def test_a_share_token_opens_nothing_but_its_report(estate: Estate) -> None:
    anonymous = Client()
    assert anonymous.get(reverse("shared_report", args=[estate.share_token])).status_code == 200
    # Having seen the shared report, the visitor is still nobody everywhere else.
    page = anonymous.get(reverse("topic_detail", args=[estate.topic.pk]))
    assert page.status_code == 302 and page["Location"].startswith(reverse("login"))
    assert anonymous.get(f"/api/topics/{estate.topic.pk}").status_code == 401
