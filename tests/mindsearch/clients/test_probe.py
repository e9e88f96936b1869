"""The status page's two free probes, the LLM endpoint's model list and SearXNG's /config: they
must answer while research calls hold the limits' next slots, so they take none, and say whether
nothing answered at all or nothing answered in time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from mindsearch.clients import llm, probe, ratelimit, websearch
from tests.support.fakes import FakeService, Fault, openai_models, searxng_config
from tests.support.processes import free_port

Ask = Callable[[str, Any, float], Coroutine[Any, Any, Any]]


def _models(url: str, settings: Any, timeout: float = 2.0) -> Coroutine[Any, Any, Any]:
    settings.AITUNNEL_BASE_URL, settings.AITUNNEL_API_KEY = f"{url}v1/", "test-key"
    return llm.list_models(timeout)


def _config(url: str, settings: Any, timeout: float = 2.0) -> Coroutine[Any, Any, Any]:
    settings.SEARXNG_URL = url
    return websearch.read_config(timeout)


PROBES = pytest.mark.parametrize(
    ("limit", "route", "ask"),
    [
        ("acquire_llm", {("GET", "/v1/models"): openai_models("test-model")}, _models),
        ("acquire_search", {("GET", "/config"): searxng_config("duckduckgo")}, _config),
    ],
)


@PROBES
def test_a_status_probe_does_not_queue_behind_the_rate_limit(
    limit: str, route: dict, ask: Ask, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def queued(**kwargs: object) -> float:
        raise AssertionError(f"the probe waited for {limit}")

    monkeypatch.setattr(ratelimit, limit, queued)
    with FakeService(route) as service:
        assert asyncio.run(ask(service.url, settings, 2.0)).status == 200


@PROBES
def test_a_status_probe_says_when_nothing_answered(limit: str, route: dict, ask: Ask, settings: Any) -> None:
    with pytest.raises(probe.Unreachable) as refused:
        asyncio.run(ask(f"http://127.0.0.1:{free_port()}/", settings, 2.0))
    assert not refused.value.timed_out
    with FakeService(route) as service:
        service.inject(Fault.hang(2.0))
        with pytest.raises(probe.Unreachable) as slow:
            asyncio.run(ask(service.url, settings, 0.3))
    assert slow.value.timed_out
