"""The status page tells what is configured and reachable, for real, against loopback services."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django import Settings

from tests.support.fakes import FakeService, Fault, Response, openai_models, searxng_config


@pytest.fixture(autouse=True)
def staff_viewer_of_fresh_checks(alice: User, settings: Any) -> None:
    """These tests read the details, which only staff see, of checks run for each request
    (the page's one-minute cache is tested in reliability/test_small_inputs.py)."""
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    settings.STATUS_CACHE_SECONDS = 0


def row(html: str, name: str) -> str:
    """The table row of one component, so assertions do not leak across rows."""
    start = html.index(f'<th scope="row">{name}</th>')
    return html[start : html.index("</tr>", start)]


def test_unconfigured_services_say_so(alice_client: Client, settings: Settings) -> None:
    settings.AITUNNEL_API_KEY = ""
    settings.AITUNNEL_BASE_URL = "https://api.aitunnel.ru/v1/"
    settings.SEARXNG_URL = ""
    html = alice_client.get("/status/").content.decode()
    assert "Not configured" in row(html, "LLM endpoint")
    assert "AITUNNEL_API_KEY" in row(html, "LLM endpoint")
    assert "SEARXNG_URL" in row(html, "SearXNG")


def test_database_shows_postgres_and_pgvector(alice_client: Client) -> None:
    database = row(alice_client.get("/status/").content.decode(), "Database")
    assert "PostgreSQL 18" in database
    assert "pgvector 0." in database
    assert "badge ok" in database


def test_no_worker_is_reported_when_none_runs(alice_client: Client) -> None:
    worker = row(alice_client.get("/status/").content.decode(), "Worker")
    assert "No worker is running" in worker


def test_channel_layer_round_trip(alice_client: Client) -> None:
    layer = row(alice_client.get("/status/").content.decode(), "Live progress (channel layer)")
    assert "PostgreSQL LISTEN/NOTIFY" in layer
    assert "badge ok" in layer


def test_reachable_llm_and_searxng(alice_client: Client, settings: Settings) -> None:
    routes = {
        ("GET", "/v1/models"): openai_models("test-model"),
        ("GET", "/config"): searxng_config("duckduckgo", "arxiv", timed=("duckduckgo",)),
    }
    with FakeService(routes) as fake:
        settings.AITUNNEL_BASE_URL = f"{fake.url}v1/"
        settings.AITUNNEL_API_KEY = "test-key"
        settings.AITUNNEL_MODEL = "test-model"
        settings.SEARXNG_URL = fake.url
        settings.SEARXNG_BASIC_AUTH_LOGIN = "searcher"
        settings.SEARXNG_BASIC_AUTH_PASSWORD = "s3cret"
        html = alice_client.get("/status/").content.decode()
        config_request = next(r for r in fake.requests if r.path == "/config")
    assert "badge ok" in row(html, "LLM endpoint")
    assert "test-model" in row(html, "LLM endpoint")
    assert "2 engines enabled, 1 with time ranges" in row(html, "SearXNG")
    assert "duckduckgo ⏱, arxiv" in row(html, "SearXNG")
    assert config_request.headers["authorization"].startswith("Basic ")


def test_rejected_key_and_unlisted_model(alice_client: Client, settings: Settings) -> None:
    with FakeService({("GET", "/v1/models"): openai_models("other-model")}) as fake:
        settings.AITUNNEL_BASE_URL = f"{fake.url}v1/"
        settings.AITUNNEL_API_KEY = "wrong-key"
        settings.AITUNNEL_MODEL = "test-model"
        assert "API key was rejected" in row(alice_client.get("/status/").content.decode(), "LLM endpoint")
        settings.AITUNNEL_API_KEY = "test-key"
        assert "is not listed" in row(alice_client.get("/status/").content.decode(), "LLM endpoint")


def test_unreachable_services_are_problems(alice_client: Client, settings: Settings) -> None:
    with FakeService() as fake:
        dead = fake.url
    settings.SEARXNG_URL = dead
    settings.JINA_READER_URL = dead
    settings.AITUNNEL_BASE_URL = f"{dead}v1/"
    html = alice_client.get("/status/").content.decode()
    for name in ("SearXNG", "Reader", "LLM endpoint"):
        assert "Not reachable" in row(html, name)
        assert "badge error" in row(html, name)


def test_searxng_that_is_not_searxng(alice_client: Client, settings: Settings) -> None:
    with FakeService({("GET", "/config"): lambda request: Response(200, "<html>")}) as fake:
        settings.SEARXNG_URL = fake.url
        assert "not with SearXNG" in row(alice_client.get("/status/").content.decode(), "SearXNG")


def test_embedding_model_is_bundled(alice_client: Client) -> None:
    embedding = row(alice_client.get("/status/").content.decode(), "Embedding model")
    assert "multilingual-e5-small (4-bit), local" in embedding
    assert "badge ok" in embedding


def test_searxng_whose_engines_lack_time_ranges_says_what_happens(
    alice_client: Client, settings: Settings
) -> None:
    with FakeService({("GET", "/config"): searxng_config("wikipedia", "arxiv")}) as fake:
        settings.SEARXNG_URL = fake.url
        html = row(alice_client.get("/status/").content.decode(), "SearXNG")
    assert "0 with time ranges" in html and "asked again without" in html


def test_searxng_with_no_engine_enabled_is_a_warning(alice_client: Client, settings: Settings) -> None:
    with FakeService({("GET", "/config"): searxng_config()}) as fake:
        settings.SEARXNG_URL = fake.url
        html = row(alice_client.get("/status/").content.decode(), "SearXNG")
    assert "badge warn" in html and "No engine is enabled" in html


def test_the_reranker_line(alice_client: Client, settings: Any) -> None:
    from tests.support.rerank import rerank_settings, reranker

    settings.RERANK_URL = ""
    html = row(alice_client.get("/status/").content.decode(), "Reranker")
    assert "Not configured" in html and "RERANK_URL" in html
    with reranker("cohere", key="k") as fake:
        for name, value in rerank_settings(fake, model="rerank-v3.5", key="k").items():
            setattr(settings, name, value)
        html = row(alice_client.get("/status/").content.decode(), "Reranker")
        assert "badge ok" in html and "rerank-v3.5" in html and "with API key" in html
        assert fake.requests[-1].json()["documents"] == ["status", "check"]  # asked for real
        fake.inject(Fault(503, body={"message": "overloaded"}))
        html = row(alice_client.get("/status/").content.decode(), "Reranker")
        assert "badge error" in html and "HTTP 503: overloaded" in html and "original order" in html
        settings.RERANK_MODEL = ""
        html = row(alice_client.get("/status/").content.decode(), "Reranker")
        assert "badge warn" in html and "RERANK_MODEL is not" in html
