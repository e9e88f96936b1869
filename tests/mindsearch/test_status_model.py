"""The status page's lines about the model itself: its abilities as the client knows them, a busy
server told from an absent one, and *Check the model* (one plan call, and what the pipeline makes
of the answer) — against loopback servers speaking OpenAI's protocol."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from mindsearch.clients import llm
from research.models import LLMCall
from tests.mindsearch.test_status import row
from tests.support.fakes import FakeService, openai_chat, openai_models
from tests.support.world import World

CHECK = "/status/model-check/"


@pytest.fixture(autouse=True)
def staff_viewer_of_fresh_checks(alice: User, settings: Any) -> Iterator[None]:
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    settings.STATUS_CACHE_SECONDS = 0
    llm.forget_endpoints()
    yield
    llm.forget_endpoints()


def point_at(settings: Any, fake: FakeService, **extra: Any) -> None:
    settings.AITUNNEL_BASE_URL = f"{fake.url}v1/"
    settings.AITUNNEL_API_KEY = "test-key"
    settings.AITUNNEL_MODEL = "test-model"
    for name, value in extra.items():
        setattr(settings, name, value)


def test_a_busy_server_is_busy_not_unreachable(alice_client: Client, settings: Any) -> None:
    # It accepts the connection and the request, and answers after the check has given up.
    with FakeService({("GET", "/v1/models"): openai_models("test-model")}, latency=1.5) as fake:
        point_at(settings, fake, STATUS_CHECK_TIMEOUT=0.3)
        line = row(alice_client.get("/status/").content.decode(), "LLM endpoint")
    assert "Busy" in line and "badge warn" in line, line
    assert "Not reachable" not in line
    assert "accepted the connection" in line


def test_an_absent_server_is_still_not_reachable(alice_client: Client, settings: Any) -> None:
    with FakeService() as fake:
        dead = fake.url
    settings.AITUNNEL_BASE_URL = f"{dead}v1/"
    settings.AITUNNEL_MODEL = "test-model"
    line = row(alice_client.get("/status/").content.decode(), "LLM endpoint")
    assert "Not reachable" in line and "badge error" in line


def test_the_abilities_line_names_the_window_and_its_source(alice_client: Client, settings: Any) -> None:
    with FakeService({("GET", "/v1/models"): openai_models("test-model")}) as fake:
        point_at(settings, fake, AITUNNEL_CONTEXT_TOKENS=8192)
        line = row(alice_client.get("/status/").content.decode(), "LLM abilities")
        assert "context window 8192 tokens, from AITUNNEL_CONTEXT_TOKENS" in line and "badge ok" in line
        assert "streaming not seen yet" in line and "no parameter refused" in line
        # Nothing says the window: the page says how to set it, and what Ollama does without it.
        settings.AITUNNEL_CONTEXT_TOKENS = 0
        line = row(alice_client.get("/status/").content.decode(), "LLM abilities")
    assert "context window unknown" in line and "num_ctx" in line and "badge warn" in line


def test_others_see_no_check_button_and_cannot_post_it(bob_client: Client, loopback: World) -> None:
    page = bob_client.get("/status/").content.decode()
    assert CHECK not in page
    assert bob_client.post(CHECK).status_code == 404
    assert not [r for r in loopback.llm.requests if r.path == "/v1/chat/completions"]


def test_checking_the_model_plans_once_and_says_the_pipeline_reads_its_sub_queries(
    alice_client: Client, alice: User, loopback: World
) -> None:
    assert CHECK in alice_client.get("/status/").content.decode()
    page = alice_client.post(CHECK).content.decode()
    chats = [r for r in loopback.llm.requests if r.path == "/v1/chat/completions"]
    assert len(chats) == 1
    system = chats[0].json()["messages"][0]["content"]
    assert "ПОДЗАПРОС" in system  # the pipeline's own plan prompt
    assert "The pipeline reads 3 sub-queries from this answer" in page
    assert page.count("<li>") >= 3
    call = LLMCall.objects.get(stage="model-check")
    assert call.user == alice and call.completion_tokens > 0


def test_an_answer_without_sub_queries_is_said_to_fall_back(alice_client: Client, settings: Any) -> None:
    prose = "Sure! Memory use can be reduced by quantisation, pruning and distillation."
    routes = {
        ("POST", "/v1/chat/completions"): openai_chat(lambda _messages: prose),
        ("GET", "/v1/models"): openai_models("test-model"),
    }
    with FakeService(routes) as fake:
        point_at(settings, fake)
        page = alice_client.post(CHECK).content.decode()
    assert "would use keyword sub-queries instead" in page and "ПОДЗАПРОС:" in page
    assert "quantisation, pruning and distillation" in page  # the answer itself is shown
