"""The status page's two free probes: they must answer while research calls hold the limits' next
slots (the status page asks at most once a minute), so they take none."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from mindsearch.clients import llm, ratelimit, websearch
from tests.support.fakes import FakeService, openai_models, searxng_config


def _models(service: FakeService, settings: Any) -> Coroutine[Any, Any, Any]:
    settings.AITUNNEL_BASE_URL, settings.AITUNNEL_API_KEY = f"{service.url}v1/", "test-key"
    return llm.list_models(2.0)


def _config(service: FakeService, settings: Any) -> Coroutine[Any, Any, Any]:
    settings.SEARXNG_URL = service.url
    return websearch.read_config(2.0)


@pytest.mark.parametrize(
    ("limit", "route", "ask"),
    [
        ("acquire_llm", {("GET", "/v1/models"): openai_models("test-model")}, _models),
        ("acquire_search", {("GET", "/config"): searxng_config("duckduckgo")}, _config),
    ],
)
def test_a_status_probe_does_not_queue_behind_the_rate_limit(
    limit: str,
    route: dict,
    ask: Callable[[FakeService, Any], Coroutine[Any, Any, Any]],
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def queued(**kwargs: object) -> float:
        raise AssertionError(f"the probe waited for {limit}")

    monkeypatch.setattr(ratelimit, limit, queued)
    with FakeService(route) as service:
        assert asyncio.run(ask(service, settings)).status == 200
