"""The small findings of issue 15: control characters are a 400/422 and never a 500, the status
page keeps the operator's details to staff and asks outside services once a minute, and the
topic websocket escapes what the client's cookie carries and survives any `since`."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from research.models import Topic
from research.progress import record_event
from research.routing import websocket_urlpatterns
from tests.support.fakes import FakeService, openai_models, searxng_config

# --- NUL and control characters -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["%00", "a%00b", "%01", "%1B[31m", "%7F"])
@pytest.mark.parametrize("path", ["/", "/documents/search/", "/api/topics", "/api/search"])
def test_control_characters_in_a_query_are_refused_not_a_server_error(
    alice_client: Client, path: str, value: str
) -> None:
    response = alice_client.get(f"{path}?q={value}")
    assert response.status_code in (400, 422), response.status_code


@pytest.mark.usefixtures("web_search_configured")
def test_control_characters_in_a_form_are_a_400_and_save_nothing(alice: User, alice_client: Client) -> None:
    form = {"question": "Why\x00 is the sky blue?", "sources": "web", "mode": "quick", "time_range": ""}
    assert alice_client.post("/topics/new/", form).status_code == 400
    assert not Topic.objects.exists()
    # Line breaks and tabs are text.
    form["question"] = "Why is\tthe sky\nblue?"
    assert alice_client.post("/topics/new/", form).status_code == 302


def test_a_nul_in_an_api_body_is_a_422(alice_client: Client) -> None:
    response = alice_client.post("/api/topics", {"question": "sky\x00blue"}, content_type="application/json")
    assert response.status_code == 422


# --- The status page ----------------------------------------------------------------------------


@pytest.fixture
def services(settings: Any) -> Any:
    routes = {
        ("GET", "/v1/models"): openai_models("secret-model-x"),
        ("GET", "/config"): searxng_config("ddg"),
    }
    with FakeService(routes) as fake:
        settings.AITUNNEL_BASE_URL = f"{fake.url}v1/"
        settings.AITUNNEL_API_KEY = "test-key"
        settings.AITUNNEL_MODEL = "secret-model-x"
        settings.SEARXNG_URL = fake.url
        yield fake


def test_only_staff_see_the_services_details(alice: User, alice_client: Client, services: Any) -> None:
    from django.core.cache import cache

    cache.clear()
    html = alice_client.get("/status/").content.decode()
    for secret in (services.url, "secret-model-x", "PostgreSQL 1", "pgvector", "127.0.0.1"):
        assert secret not in html, secret
    assert "LLM endpoint" in html and "badge ok" in html  # the state is shown
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    html = alice_client.get("/status/").content.decode()
    assert services.url in html and "secret-model-x" in html


def test_the_outside_checks_are_made_once_a_minute(alice_client: Client, services: Any) -> None:
    from django.core.cache import cache

    cache.clear()
    for _ in range(5):
        assert alice_client.get("/status/").status_code == 200
    assert len([r for r in services.requests if r.path == "/config"]) == 1
    # The model list of the LLM check, and the window the server reports for the abilities row
    # (llm.profile, remembered for the process): each asked once, not once a page.
    assert len([r for r in services.requests if r.path == "/v1/models"]) == 2


# --- The topic websocket ------------------------------------------------------------------------

application = URLRouter(websocket_urlpatterns)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def connect(topic: Topic, user: User, cookie: str, query: str = "") -> WebsocketCommunicator:
    comm = WebsocketCommunicator(application, f"/ws/topics/{topic.pk}/{query}")
    comm.scope["user"] = user
    comm.scope["cookies"] = {"csrftoken": cookie}
    return comm


async def everything(comm: WebsocketCommunicator) -> str:
    chunks = []
    while not await comm.receive_nothing(timeout=1.0):
        chunks.append(await comm.receive_from())
    return "".join(chunks)


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"])
async def test_the_cookie_never_reaches_a_frame_unescaped(alice: User) -> None:
    topic = await database_sync_to_async(Topic.objects.create)(
        owner=alice, question="Escapes?", status=Topic.Status.AWAITING_APPROVAL
    )
    await sync_to_async(record_event)(topic, "plan", "Planned", done=1, total=1)
    hostile = '"><script>alert(1)</script><input value="'
    comm = connect(topic, alice, hostile)
    assert (await comm.connect())[0]
    await comm.send_json_to({"since": 0})
    frames = await everything(comm)
    assert "Planned" in frames
    assert "<script>alert(1)" not in frames and hostile not in frames
    await comm.disconnect()


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"])
@pytest.mark.parametrize("since", ["1e999", "-1e999", "NaN", '"3"', "true", "[1]", "1.5", "{}"])
async def test_any_since_leaves_the_socket_working(alice: User, since: str) -> None:
    topic = await database_sync_to_async(Topic.objects.create)(
        owner=alice, question="Since?", status=Topic.Status.RUNNING
    )
    await sync_to_async(record_event)(topic, "search", "First line", done=1, total=2)
    comm = connect(topic, alice, "t" * 32)
    assert (await comm.connect())[0]
    await comm.send_to(text_data='{"since": ' + since + "}")
    await everything(comm)
    await comm.send_json_to({"since": 0})
    assert "First line" in await everything(comm)  # still connected and answering
    await comm.disconnect()
