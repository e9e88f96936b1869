"""Isolation: every URL the project defines, walked as a second user and as nobody.

The URLs come from Django's resolver, the API's schema and the websocket routing at test time;
each must have a line in ACCESS saying who may use it, and a URL without one fails the test by
name. Alice owns one of everything (tests/reliability/conftest.py); Bob, signed in (with a
session for pages, an API token for the API), and an anonymous visitor then try every URL
with every method it answers, pointed at Alice's things:

- "owned": Bob gets 404 (405 where the method is wrong anyway), nobody is sent to sign in
  (pages) or gets 401 (API) or a closed socket; Alice herself gets the page, so the URL
  really pointed at something;
- "account": about the signed-in user only (lists, forms, settings): Bob gets his own, empty;
- "public": the sign-in pages and the language switch;
- "shared": the share-link pages, which anyone holding the token may read;
- "staff": the admin; Django generates its URLs per registered model, so the namespace has one
  line: anyone not staff is sent to the admin's sign-in (or 404 for unknown admin paths).

No answer to Bob or to nobody but "shared" may contain anything of Alice's, and after the walk
no row anywhere has changed.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpResponse
from django.test import Client

from mindsearch.models import ApiToken
from research.models import Topic
from retrieval.models import UploadedDocument
from tests.reliability.conftest import SECRET, Estate, snapshot
from tests.reliability.urlwalk import Route, http_routes, websocket_routes

OWNED, ACCOUNT, PUBLIC, SHARED, STAFF, INERT = "owned", "account", "public", "shared", "staff", "inert"

ACCESS = {
    # mindsearch
    "status": ACCOUNT,
    "status_model_check": STAFF,  # one plan call: it costs the operator tokens
    "signup": PUBLIC,
    "login": PUBLIC,
    "logout": ACCOUNT,
    "password_change": ACCOUNT,
    "password_change_done": ACCOUNT,
    "api_tokens": ACCOUNT,
    "api_token_revoke": OWNED,
    "email_settings": ACCOUNT,
    "email_verify": PUBLIC,  # the signed link mailed to an address: it names the account itself
    "set_language": PUBLIC,
    "healthz": PUBLIC,  # for orchestrators: "ok", nothing of anyone's
    "readyz": PUBLIC,
    "metrics": PUBLIC,  # counts only, and only with METRICS_TOKEN (401 without, 404 when unset)
    # research
    "home": ACCOUNT,
    "topic_history": ACCOUNT,
    "topic_create": ACCOUNT,
    "topic_import": ACCOUNT,
    "topic_import_status": OWNED,
    "topic_detail": OWNED,
    "subquery_add": OWNED,
    "subquery_update": OWNED,
    "subquery_delete": OWNED,
    "subquery_move": OWNED,
    "plan_approve": OWNED,
    "outline_edit": OWNED,
    "topic_cancel": OWNED,
    "topic_rerun": OWNED,
    "topic_delete": OWNED,
    "topic_export": OWNED,
    "share_create": OWNED,
    "schedule_save": OWNED,
    "source_keep": OWNED,
    "schedule_pause": OWNED,
    "schedule_delete": OWNED,
    "schedule_unsubscribe": PUBLIC,  # a signed link in an e-mail: it can only stop that schedule's e-mails
    "share_revoke": OWNED,
    "report_markdown": OWNED,
    "report_pdf": OWNED,
    "report_docx": OWNED,
    "report_bibtex": OWNED,
    "report_ris": OWNED,
    "shared_report": SHARED,
    "shared_report_markdown": SHARED,
    "shared_report_pdf": SHARED,
    "shared_report_docx": SHARED,
    "shared_report_bibtex": SHARED,
    "shared_report_ris": SHARED,
    "citation_card": OWNED,
    "shared_citation_card": SHARED,  # a citation's preview on the shared report
    "topic_image": OWNED,  # the question's picture
    "shared_topic_image": SHARED,
    "followup_create": OWNED,
    "followup_citation_card": OWNED,
    "shared_followup_citation_card": SHARED,  # a follow-up's citation on the shared report
    # retrieval
    "document_list": ACCOUNT,
    "document_upload": ACCOUNT,
    "document_rows": ACCOUNT,
    "document_search": ACCOUNT,
    "document_detail": OWNED,
    "document_status": OWNED,
    "document_file": OWNED,
    "document_delete": OWNED,
    "document_retry": OWNED,
    "note_list": ACCOUNT,
    "note_add": OWNED,
    "note_edit": OWNED,
    "note_delete": OWNED,
    "citation_note": OWNED,
    "followup_citation_note": OWNED,  # a note on a follow-up answer's cited passage
    # the API
    "api:api-root": PUBLIC,
    "api:openapi-json": PUBLIC,
    "api:openapi-view": PUBLIC,
    "api:unknown_operation": INERT,
    "api:create_topic": ACCOUNT,
    "api:list_topics": ACCOUNT,
    "api:get_topic": OWNED,
    "api:delete_topic": OWNED,
    "api:cancel_topic": OWNED,
    "api:rerun_topic": OWNED,
    "api:get_plan": OWNED,
    "api:edit_plan": OWNED,
    "api:approve_plan": OWNED,
    "api:list_events": OWNED,
    "api:get_report": OWNED,
    "api:list_versions": OWNED,
    "api:keep_source": OWNED,
    "api:get_report_markdown": OWNED,
    "api:get_report_bibtex": OWNED,
    "api:get_report_ris": OWNED,
    "api:get_topic_image": OWNED,
    "api:list_followups": OWNED,
    "api:ask_followup": OWNED,
    "api:list_share_links": OWNED,
    "api:create_share_link": OWNED,
    "api:revoke_share_link": OWNED,
    "api:get_cache_stats": ACCOUNT,
    "api:upload_document": ACCOUNT,
    "api:list_documents": ACCOUNT,
    "api:get_document": OWNED,
    "api:delete_document": OWNED,
    "api:search_documents": ACCOUNT,
    "api:list_notes": ACCOUNT,
    "api:add_note": ACCOUNT,  # on a passage of one's own: another's is a 404
    "api:edit_note": OWNED,
    "api:delete_note": OWNED,
    # websockets
    "ws:ws/topics/<int:topic_id>/": OWNED,
}


def access_of(route: Route) -> str | None:
    if route.namespace == "admin" or route.route.startswith("admin/"):
        return STAFF
    return ACCESS.get(route.key)


def test_every_url_the_project_defines_has_a_line_in_the_table() -> None:
    routes = [*http_routes(), *websocket_routes()]
    missing = sorted({route.key for route in routes if access_of(route) is None})
    assert missing == [], f"say who may use these URLs in ACCESS: {missing}"
    stale = sorted(set(ACCESS) - {route.key for route in routes})
    assert stale == [], f"ACCESS names URLs that no longer exist: {stale}"


# --- Walking the HTTP URLs ------------------------------------------------------------------------


def params_for(route: Route, estate: Estate) -> dict[str, object]:
    """Alice's things, coherent within one URL: a sub-query of the topic in the path."""
    params = estate.params()
    if "subquery_id" in route.params:
        params["topic_id"] = estate.plan.pk
    return params


def as_user(user: User | None, route: Route) -> Client:
    """A fresh browser for each request (a sign-out must not end the walk); the API is asked
    with the user's token, as scripts do."""
    client = Client()
    if user is not None and route.operation:
        client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {user.walk_token}"
    elif user is not None:
        client.force_login(user)
    return client


def with_token(user: User) -> User:
    _row, user.walk_token = ApiToken.issue(user, "walk")
    return user


FORM = {"text": "walked", "question": "walked", "name": "walked", "expires_in_days": ""}
JSON = '{"question": "walked", "subqueries": [{"text": "walked"}]}'


def ask(client: Client, method: str, url: str, *, api: bool = False) -> HttpResponse:
    if method == "GET":
        return client.get(url)
    if api:
        return client.generic(method, url, JSON, content_type="application/json")
    return client.post(url, FORM)


def refused(route: Route, who: str, method: str, response: HttpResponse) -> str | None:
    """What is wrong with this answer, or None."""
    status, access = response.status_code, access_of(route)
    body = response.content.decode(errors="replace") if not response.streaming else ""
    if access != SHARED and SECRET in body:
        return "shows Alice's data"
    if route.key == "readyz" and status == 503:
        return None  # "not ready" (here: no worker running) is what an orchestrator must see
    if status >= 500:
        return f"answered {status}"
    if access == OWNED:
        if who == "bob":
            return None if status in (404, 405) else f"answered {status}, not 404"
        return None if anonymous_refused(route, response) else f"answered {status} to nobody"
    if access == ACCOUNT and who == "anonymous":
        return None if anonymous_refused(route, response) or status == 405 else f"answered {status} to nobody"
    if access == STAFF:
        # The admin's own sign-in and sign-out pages are for anyone, like the site's.
        ok = status in (302, 404) or route.key in ("admin:login", "admin:logout")
        login = status != 302 or "/login/" in response["Location"] or route.key == "admin:logout"
        return None if ok and login else f"answered {status} to a non-staff user"
    if access == SHARED and method == "GET" and route.key == "shared_report":
        return None if status == 200 else f"the share link answered {status}"
    if access == INERT:
        return None if status == 404 else f"answered {status}"
    return None


def anonymous_refused(route: Route, response: HttpResponse) -> bool:
    if route.operation:
        return response.status_code == 401
    location = response.get("Location", "")
    return response.status_code == 302 and location.startswith("/accounts/login/")


@pytest.mark.django_db
def test_no_url_gives_another_user_or_nobody_anything_of_alice(estate: Estate, bob: User) -> None:
    bob = with_token(bob)
    before = snapshot()
    problems = []
    for route in http_routes():
        url = route.url(params_for(route, estate))
        for method in route.methods:
            for who, user in (("bob", bob), ("anonymous", None)):
                response = ask(as_user(user, route), method, url, api=route.operation)
                problem = refused(route, who, method, response)
                if problem:
                    problems.append(f"{method} {url} ({route.key}) as {who}: {problem}")
    assert problems == [], "\n".join(problems)
    forget_what_bob_made(bob)
    assert snapshot() == before


def forget_what_bob_made(bob: User) -> None:
    """Bob may make things of his own on the way (a topic, a token); only they may be new."""
    Topic.objects.filter(owner=bob).delete()
    UploadedDocument.objects.filter(owner=bob).delete()
    ApiToken.objects.filter(owner=bob).exclude(name="walk").delete()


@pytest.mark.django_db
def test_alice_herself_reaches_every_owned_page(estate: Estate) -> None:
    """The control: the owned URLs of the walk point at real things of Alice's."""
    missing = []
    for route in http_routes():
        if access_of(route) != OWNED or "GET" not in route.methods:
            continue
        url = route.url(params_for(route, estate))
        status = ask(as_user(with_token(estate.owner), route), "GET", url).status_code
        if status == 404:
            missing.append(f"{url} ({route.key})")
    assert missing == []


# --- Walking the websockets ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"])
def test_no_websocket_opens_for_another_user_or_nobody(estate: Estate, bob: User) -> None:
    from research.routing import websocket_urlpatterns

    async def connect(path: str, user: object) -> tuple[bool, object]:
        communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
        communicator.scope["user"] = user
        connected, code = await communicator.connect()
        if connected:
            await communicator.disconnect()
        return connected, code

    for route in websocket_routes():
        path = route.url(params_for(route, estate))
        assert access_of(route) == OWNED, route.key
        assert async_to_sync(connect)(path, bob) == (False, 4404), path
        assert async_to_sync(connect)(path, AnonymousUser())[0] is False, path
        assert async_to_sync(connect)(path, estate.owner)[0] is True, path  # the control


# --- Walking the MCP server (/mcp) ---------------------------------------------------------------

# Every tool and resource template the MCP server lists (mcphub/server.py) must have a line here.
MCP_ACCESS = {
    "start_research": ACCOUNT,
    "list_topics": ACCOUNT,
    "search_my_documents": ACCOUNT,
    "get_topic_status": OWNED,
    "get_report": OWNED,
    "get_plan": OWNED,
    "approve_plan": OWNED,
    "mindsearch://topics/{topic_id}/report": OWNED,
}


def mcp_arguments(name: str, estate: Estate) -> dict[str, object]:
    if name == "approve_plan":
        return {"topic_id": estate.plan.pk}
    if MCP_ACCESS[name] == OWNED:
        return {"topic_id": estate.topic.pk}
    return {
        "start_research": {"question": "Bob's own question", "auto_approve": False},
        # The part of Alice's secret word a search would match, without echoing the whole of it.
        "search_my_documents": {"query": SECRET.split("-")[0]},
    }.get(name, {})


async def mcp_walk(token: str | None, estate: Estate) -> dict[str, object]:
    """Every tool and resource of /mcp called with `token`, in process through the ASGI app."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from mcphub.http import app

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), headers=headers, timeout=30)
    if token is None:
        async with http:
            answer = await http.post(
                "http://localhost/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            )
        return {"status": answer.status_code}
    seen: dict[str, object] = {}
    async with Client(
        streamable_http_client("http://localhost/mcp", http_client=http), mode="legacy"
    ) as client:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        seen["listed"] = tools + templates
        for name in tools:
            result = await client.call_tool(name, mcp_arguments(name, estate))
            seen[name] = (result.is_error, result.content[0].text if result.content else "")
        uri = f"mindsearch://topics/{estate.topic.pk}/report"
        try:
            seen[templates[0]] = (False, (await client.read_resource(uri)).contents[0].text)
        except Exception as refused:  # the SDK raises the server's resource error
            seen[templates[0]] = (True, str(refused))
    return seen


@pytest.mark.usefixtures("web_search_configured")
@pytest.mark.django_db(transaction=True)
def test_the_mcp_server_gives_another_user_or_nobody_nothing_of_alice(estate: Estate, bob: User) -> None:
    bob = with_token(bob)
    before = snapshot()
    _row, bob_token = ApiToken.issue(bob, "mcp walk")
    assert async_to_sync(mcp_walk)(None, estate) == {"status": 401}
    seen = async_to_sync(mcp_walk)(bob_token, estate)
    assert sorted(seen.pop("listed")) == sorted(MCP_ACCESS), "say who may use these MCP tools in MCP_ACCESS"
    for name, (is_error, text) in seen.items():
        assert SECRET not in text, f"{name} showed Bob something of Alice's"
        if MCP_ACCESS[name] == OWNED:
            assert is_error and "not found" in text, f"{name} as Bob: {text}"
        else:
            assert not is_error, f"{name} as Bob: {text}"
    forget_what_bob_made(bob)
    assert snapshot() == before
    # The control: Alice's own token reaches her report.
    _row, alice_token = ApiToken.issue(estate.owner, "mcp walk")
    assert async_to_sync(mcp_report)(alice_token, estate.topic.pk) == (False, False)


async def mcp_report(token: str, topic_id: int) -> tuple[bool, bool]:
    """Whether get_report and the report resource failed for `token`."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from mcphub.http import app

    headers = {"Authorization": f"Bearer {token}"}
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), headers=headers, timeout=30)
    async with Client(
        streamable_http_client("http://localhost/mcp", http_client=http), mode="legacy"
    ) as client:
        report = await client.call_tool("get_report", {"topic_id": topic_id})
        resource = await client.read_resource(f"mindsearch://topics/{topic_id}/report")
    return report.is_error, not resource.contents[0].text
