"""Hostile input: cross-site request forgery, on every form and every API call.

A signed-in browser (Alice, who owns everything addressed, and is staff for the admin) sends
every URL the project defines a POST without a CSRF token, and every unsafe API operation its
method with her session but without the X-CSRFToken header: each is refused with 403 and no
row anywhere changes. Controls show the same requests pass with the token, so the 403s are
the CSRF check's.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from research.models import Topic
from tests.reliability.conftest import Estate, snapshot
from tests.reliability.urlwalk import http_routes

pytestmark = pytest.mark.django_db

UNSAFE = ("POST", "PUT", "PATCH", "DELETE")
# Routes that do nothing for any request, so have nothing to protect; they must keep answering so.
INERT = {
    "api:unknown_operation": 404,  # the API's catch-all: "no operation at this path"
    # An e-mail's one-click unsubscribe (RFC 8058) carries no CSRF token: the signed token in the
    # link is the authority, and a forged one is refused (400) with nothing changed.
    "schedule_unsubscribe": 400,
}


def forged_client(estate: Estate) -> Client:
    estate.owner.is_staff = estate.owner.is_superuser = True
    estate.owner.save()
    client = Client(enforce_csrf_checks=True)
    client.force_login(estate.owner)
    return client


def test_every_form_refuses_a_post_without_the_token(estate: Estate) -> None:
    client = forged_client(estate)
    before = snapshot()
    accepted = []
    for route in http_routes():
        if route.operation:
            continue
        url = route.url(estate.params())
        response = client.post(url, {"text": "forged", "expires_in_days": "", "name": "forged"})
        if route.key in INERT:
            assert response.status_code == INERT[route.key], route.key
        elif response.status_code != 403 or b"CSRF" not in response.content:
            accepted.append((route.key, url, response.status_code))
    assert accepted == []
    assert snapshot() == before


def test_every_unsafe_api_call_with_the_session_refuses_a_missing_token(estate: Estate) -> None:
    client = forged_client(estate)
    before = snapshot()
    accepted = []
    for route in filter(lambda route: route.operation, http_routes()):
        for method in (m for m in route.methods if m in UNSAFE):
            url = route.url(estate.params())
            response = client.generic(method, url, '{"question": "forged"}', content_type="application/json")
            if response.status_code != 403 or "CSRF" not in response.json()["detail"]:
                accepted.append((route.key, method, url, response.status_code))
    assert accepted == []
    assert snapshot() == before


def test_the_same_requests_pass_with_the_token(estate: Estate) -> None:
    client = forged_client(estate)
    client.get(reverse("home"))  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = client.post(reverse("topic_delete", args=[estate.plan.pk]), {"csrfmiddlewaretoken": token})
    assert response.status_code == 302 and not Topic.objects.filter(pk=estate.plan.pk).exists()
    response = client.post(
        f"/api/topics/{estate.topic.pk}/share-links", "{}", content_type="application/json",
        headers={"X-CSRFToken": token},
    )  # fmt: skip
    assert response.status_code in (200, 201), response.content
