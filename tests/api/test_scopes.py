"""API token scopes (issue 26): every API operation needs one scope; a token without it gets 403
naming the scope and nothing changes, a token with only that scope is let through. The walk
reuses the ownership matrix's list, which must cover every operation of the schema, so a new
route cannot be left out; the expected scopes below must cover the same list."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from mindsearch.models import ApiToken, TokenScope
from research.models import FollowUp, ShareLink, Topic
from retrieval.models import PassageNote, UploadedDocument
from tests.api.conftest import ApiClient
from tests.api.test_ownership import ID_OPERATIONS, OTHER_OPERATIONS
from tests.api.test_ownership import owned as owned  # the fixture, used by name

pytestmark = pytest.mark.django_db

READ, RESEARCH, DOCUMENTS, SHARE = (scope.value for scope in TokenScope)
# What each operation of the ownership matrix needs: written down here, not read from the code.
EXPECTED: dict[tuple[str, str], str] = {
    ("GET", "/api/topics/{topic}"): READ,
    ("DELETE", "/api/topics/{topic}"): RESEARCH,
    ("POST", "/api/topics/{topic}/cancel"): RESEARCH,
    ("POST", "/api/topics/{topic}/rerun"): RESEARCH,
    ("GET", "/api/topics/{topic}/plan"): READ,
    ("PUT", "/api/topics/{topic}/plan"): RESEARCH,
    ("POST", "/api/topics/{topic}/plan/approve"): RESEARCH,
    ("GET", "/api/topics/{topic}/events"): READ,
    ("GET", "/api/topics/{topic}/report"): READ,
    ("GET", "/api/topics/{topic}/versions"): READ,
    ("POST", "/api/topics/{topic}/sources/{page}/keep"): RESEARCH,
    ("GET", "/api/topics/{topic}/report.md"): READ,
    ("GET", "/api/topics/{topic}/sources.bib"): READ,
    ("GET", "/api/topics/{topic}/sources.ris"): READ,
    ("GET", "/api/topics/{topic}/image"): READ,
    ("GET", "/api/topics/{topic}/followups"): READ,
    ("POST", "/api/topics/{topic}/followups"): RESEARCH,
    ("GET", "/api/topics/{topic}/share-links"): READ,
    ("POST", "/api/topics/{topic}/share-links"): SHARE,
    ("POST", "/api/topics/{topic}/share-links/{link}/revoke"): SHARE,
    ("GET", "/api/documents/{document}"): READ,
    ("DELETE", "/api/documents/{document}"): DOCUMENTS,
    ("PATCH", "/api/notes/{note}"): DOCUMENTS,
    ("DELETE", "/api/notes/{note}"): DOCUMENTS,
    ("POST", "/api/topics"): RESEARCH,
    ("GET", "/api/topics"): READ,
    ("GET", "/api/documents"): READ,
    ("POST", "/api/documents"): DOCUMENTS,
    ("GET", "/api/search?q=tokens"): READ,
    ("GET", "/api/notes"): READ,
    ("POST", "/api/notes"): DOCUMENTS,
    ("GET", "/api/cache/stats"): READ,
}
OPERATIONS = ID_OPERATIONS + OTHER_OPERATIONS


def _body(method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any] | None:
    if (method, path) == ("POST", "/api/topics"):
        return {**(body or {}), "sources": "docs"}  # no SearXNG in these tests
    return body


def _state(owned: dict[str, int]) -> tuple[Any, ...]:
    topic = Topic.objects.get(pk=owned["topic"])
    return (
        Topic.objects.count(),
        topic.status,
        list(topic.subqueries.values_list("text", flat=True)),
        ShareLink.objects.count(),
        ShareLink.objects.get(pk=owned["link"]).revoked_at,
        FollowUp.objects.count(),
        UploadedDocument.objects.count(),
        list(PassageNote.objects.values_list("text", flat=True)),
    )


def test_every_operation_of_the_matrix_has_an_expected_scope() -> None:
    assert {(method, path) for method, path, _body in OPERATIONS} == set(EXPECTED)


@pytest.mark.parametrize(("method", "path", "body"), OPERATIONS)
def test_a_token_without_the_scope_gets_403_naming_it(
    alice: User, owned: dict[str, int], method: str, path: str, body: dict[str, Any] | None
) -> None:
    needed = EXPECTED[(method, path)]
    _row, token = ApiToken.issue(alice, "narrow", scopes=[s for s in TokenScope.values if s != needed])
    before = _state(owned)
    response = ApiClient(token).request(method, path.format(**owned), _body(method, path, body))
    assert response.status_code == 403, response.content
    assert f"lacks the '{needed}' scope" in response.json()["detail"]
    assert _state(owned) == before


@pytest.mark.parametrize(("method", "path", "body"), OPERATIONS)
def test_a_token_with_only_the_scope_is_let_through(
    alice: User, owned: dict[str, int], method: str, path: str, body: dict[str, Any] | None
) -> None:
    needed = EXPECTED[(method, path)]
    _row, token = ApiToken.issue(alice, "just enough", scopes=[needed])
    response = ApiClient(token).request(method, path.format(**owned), _body(method, path, body))
    if path == "/api/cache/stats":  # staff only: alice is not, and is told so, not about scopes
        assert (
            response.status_code == 403
            and response.json()["detail"] == "Only staff can see the cache statistics."
        )
        return
    assert response.status_code != 403, response.content
    assert response.status_code < 500, response.content


def test_staff_with_the_read_scope_see_the_cache_statistics(alice: User) -> None:
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    _row, token = ApiToken.issue(alice, "staff", scopes=[READ])
    assert ApiClient(token).get("/api/cache/stats").status_code == 200
    _row, token = ApiToken.issue(alice, "staff", scopes=[RESEARCH])
    assert "lacks the 'read' scope" in ApiClient(token).get("/api/cache/stats").json()["detail"]


def test_the_browser_session_is_not_limited_by_scopes(alice_client: Client) -> None:
    assert alice_client.get("/api/topics").status_code == 200


def test_tokens_made_before_scopes_have_every_scope(alice: User) -> None:
    row, _token = ApiToken.issue(alice, "old")
    assert row.scopes == ["read", "research", "documents", "share"]
    with pytest.raises(ValueError, match="Unknown API token scopes: admin"):
        ApiToken.issue(alice, "bad", scopes=["read", "admin"])


def test_the_tokens_page_makes_a_token_with_the_chosen_scopes(alice_client: Client, alice: User) -> None:
    page = alice_client.get("/settings/tokens/").content.decode()
    for scope in TokenScope.values:
        assert f'value="{scope}"' in page
    assert page.count("checked") >= len(TokenScope.values)  # every scope offered checked
    response = alice_client.post("/settings/tokens/", {"name": "reader", "scopes": ["read", "share"]})
    assert response.status_code == 200
    row = ApiToken.objects.get(owner=alice)
    assert row.scopes == ["read", "share"]
    listed = alice_client.get("/settings/tokens/").content.decode()
    assert "read, share" in listed


def test_a_token_needs_at_least_one_scope(alice_client: Client) -> None:
    response = alice_client.post("/settings/tokens/", {"name": "nothing"})
    assert response.status_code == 400
    assert "Choose at least one scope" in response.content.decode()
    response = alice_client.post("/settings/tokens/", {"name": "bad", "scopes": ["admin"]})
    assert response.status_code == 400
    assert not ApiToken.objects.exists()


def test_an_operation_without_a_scope_stops_the_api_from_starting() -> None:
    from django.core.exceptions import ImproperlyConfigured
    from ninja import NinjaAPI, Router

    from mindsearch.api import BearerTokenAuth, scoped

    router = Router()

    @router.post("/things")
    def make_thing(request: Any) -> None: ...

    loose = NinjaAPI(urls_namespace="scopes-test", auth=[BearerTokenAuth()])
    loose.add_decorator(scoped, mode="view")
    loose.add_router("/", router)
    with pytest.raises(ImproperlyConfigured, match="make_thing needs a token scope"):
        _urls = loose.urls
