"""Getting into the API: personal tokens (made and revoked on the settings page, shown once,
stored hashed), the browser session with CSRF, anonymous requests, and the offline docs."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from mindsearch.models import ApiToken
from research.models import Topic
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _value in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys in {keys}"
    return dict(pairs)


def create_token(
    client: Client,
    name: str = "nightly script",
    expires: str = "",
    scopes: tuple[str, ...] = ("read", "research"),
) -> str:
    response = client.post("/settings/tokens/", {"name": name, "expires_in_days": expires, "scopes": scopes})
    assert response.status_code == 200
    match = re.search(r'id="new-token" readonly value="([^"]+)"', response.content.decode())
    assert match, "the new token is not on the page"
    return match.group(1)


# --- Token lifecycle -------------------------------------------------------------------------------


def test_a_token_is_shown_once_and_only_its_hash_is_stored(alice_client: Client, alice: User) -> None:
    token = create_token(alice_client)
    row = ApiToken.objects.get(owner=alice)
    assert row.name == "nightly script" and row.expires_at is None
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert not ApiToken.objects.filter(token_hash__contains=token).exists()
    page = alice_client.get("/settings/tokens/").content.decode()
    assert "nightly script" in page and token not in page
    assert 'id="new-token"' not in page


def test_the_header_links_to_the_tokens_page(alice_client: Client) -> None:
    assert 'href="/settings/tokens/"' in alice_client.get("/status/").content.decode()


def test_a_token_authenticates_and_records_its_last_use(alice_client: Client, alice: User) -> None:
    token = create_token(alice_client)
    Topic.objects.create(owner=alice, question="Mine")
    response = ApiClient(token).get("/api/topics")
    assert response.status_code == 200 and response.json()["count"] == 1
    assert ApiToken.objects.get(owner=alice).last_used_at is not None


def test_a_revoked_token_is_a_401(alice_client: Client, alice: User) -> None:
    token = create_token(alice_client)
    row = ApiToken.objects.get(owner=alice)
    response = alice_client.post(f"/settings/tokens/{row.pk}/revoke/")
    assert response.status_code == 302
    assert ApiToken.objects.get(pk=row.pk).revoked_at is not None
    refused = ApiClient(token).get("/api/topics")
    assert refused.status_code == 401
    assert refused.json()["detail"] == "The API token is unknown, expired or revoked."
    assert "Bearer" in refused["WWW-Authenticate"]
    assert "revoked" in alice_client.get("/settings/tokens/").content.decode()


def test_an_expired_or_unknown_token_is_a_401(alice_client: Client, alice: User) -> None:
    token = create_token(alice_client, expires="30")
    row = ApiToken.objects.get(owner=alice)
    assert row.expires_at is not None and row.expires_at > timezone.now() + timedelta(days=29)
    assert ApiClient(token).get("/api/topics").status_code == 200
    ApiToken.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert ApiClient(token).get("/api/topics").status_code == 401
    assert ApiClient("mst_guessed").get("/api/topics").status_code == 401
    assert ApiClient("").get("/api/topics").status_code == 401


def test_a_token_of_a_deactivated_user_is_a_401(alice: User) -> None:
    _row, token = ApiToken.issue(alice, "script")
    alice.is_active = False
    alice.save()
    assert ApiClient(token).get("/api/topics").status_code == 401


def test_nobody_revokes_another_users_token(bob_client: Client, alice: User) -> None:
    row, _token = ApiToken.issue(alice, "alice's")
    assert bob_client.post(f"/settings/tokens/{row.pk}/revoke/").status_code == 404
    assert ApiToken.objects.get(pk=row.pk).revoked_at is None
    assert "alice&#x27;s" not in bob_client.get("/settings/tokens/").content.decode()


def test_a_token_needs_a_name(alice_client: Client) -> None:
    response = alice_client.post("/settings/tokens/", {"name": "   ", "expires_in_days": ""})
    assert response.status_code == 400
    assert "Give the token a name." in response.content.decode() or "required" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_the_tokens_page_needs_a_signed_in_user(db: None) -> None:
    response = Client().get("/settings/tokens/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


# --- Anonymous and session -------------------------------------------------------------------------


def test_anonymous_requests_get_a_json_401_not_a_redirect(anonymous_api: ApiClient) -> None:
    for method, path in [("GET", "/api/topics"), ("POST", "/api/topics"), ("GET", "/api/documents")]:
        response = anonymous_api.request(method, path, {"question": "x y z"} if method == "POST" else None)
        assert response.status_code == 401, (method, path)
        assert "Authorization: Bearer" in response.json()["detail"]


def test_the_session_works_for_reads_without_csrf(alice: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.get("/api/topics").status_code == 200


@pytest.mark.usefixtures("web_search_configured")
def test_the_session_needs_the_csrf_token_for_unsafe_methods(alice: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    body = {"question": "What is Mixture of Tokens?"}
    refused = client.post("/api/topics", body, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    assert not Topic.objects.exists()
    client.get("/settings/tokens/")  # any page with a form sets the CSRF cookie
    csrf = client.cookies["csrftoken"].value
    accepted = client.post(
        "/api/topics", body, content_type="application/json", headers={"X-CSRFToken": csrf}
    )
    assert accepted.status_code == 201
    assert Topic.objects.filter(owner=alice).count() == 1


@pytest.mark.usefixtures("web_search_configured")
def test_a_token_needs_no_csrf_token(alice: User) -> None:
    _row, token = ApiToken.issue(alice, "script")
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        "/api/topics",
        {"question": "What is Mixture of Tokens?"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 201


# --- Docs ------------------------------------------------------------------------------------------


def test_the_docs_and_schema_are_served_without_any_cdn(db: None) -> None:
    client = Client()
    page = client.get("/api/docs")
    assert page.status_code == 200
    html = page.content.decode()
    scripts = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', html)
    assert scripts and all(url.startswith("/static/") for url in scripts), scripts
    for url in scripts:
        asset = client.get(url)
        assert asset.status_code == 200, url
    raw = client.get("/api/openapi.json").content
    # Swagger UI refuses a schema with a key twice (Python's json keeps the last one silently).
    schema = json.loads(raw, object_pairs_hook=refuse_duplicate_keys)
    assert schema["paths"]["/api/topics/{topic_id}/report.md"]["get"]["responses"]["200"]["content"] == {
        "text/markdown": {"schema": {"type": "string"}}
    }
    operations = {op["operationId"] for path in schema["paths"].values() for op in path.values()}
    assert {"create_topic", "edit_plan", "approve_plan", "list_events", "get_report_markdown"} <= operations
    assert {"upload_document", "search_documents", "get_cache_stats", "revoke_share_link"} <= operations
    assert set(schema["components"]["securitySchemes"]) == {"BearerTokenAuth", "SessionCsrfAuth"}


def test_the_docs_page_sends_the_csrf_token_for_the_session(alice_client: Client) -> None:
    html = alice_client.get("/api/docs").content.decode()
    assert 'data-api-csrf="true"' in html
    assert re.search(r'data-csrf-token="[^"]{20,}"', html)


def test_the_api_root_and_unknown_paths_answer_json(alice_api: ApiClient) -> None:
    root = alice_api.get("/api/")
    assert root.status_code == 200
    assert root.json()["docs"] == "/api/docs" and root.json()["schema"] == "/api/openapi.json"
    for method, path in [("GET", "/api/nope"), ("GET", "/api/topics/"), ("POST", "/api/topics/1/bogus")]:
        response = alice_api.request(method, path)
        assert response.status_code == 404, path
        assert f"no API operation at {path}" in response.json()["detail"]
    assert alice_api.request("PATCH", "/api/topics").status_code == 405


def test_staff_revoke_tokens_in_the_admin(alice: User, bob: User) -> None:
    row, token = ApiToken.issue(alice, "leaked")
    bob.is_staff = bob.is_superuser = True
    bob.save()
    admin_client = Client()
    admin_client.force_login(bob)
    listing = admin_client.get("/admin/mindsearch/apitoken/").content.decode()
    assert "leaked" in listing and token not in listing and row.token_hash not in listing
    assert admin_client.get(f"/admin/mindsearch/apitoken/{row.pk}/change/").status_code == 200
    response = admin_client.post(
        "/admin/mindsearch/apitoken/", {"action": "revoke", "_selected_action": [row.pk]}
    )
    assert response.status_code == 302
    assert ApiToken.objects.get(pk=row.pk).revoked_at is not None
    assert ApiClient(token).get("/api/topics").status_code == 401
