"""Real headless Chromium against a real daphne and qcluster, with the loopback internet behind them.

Playwright drives Debian's chromium (never a downloaded browser): CI installs it with
`scripts/ensure-chromium`. Without it these tests are skipped by name, saying how to install it;
under CI (`CI=true`) a missing browser fails them instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django_q.status import Stat
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, expect, sync_playwright

from tests.support import needs, processes
from tests.support.fakes import openai_models, searxng_config
from tests.support.world import world

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ARTIFACTS = processes.ROOT / "tests" / "artifacts" / "browser"
# Slow enough that the plan cannot be ready before the topic page has loaded, and that
# progress arrives in many visible steps; fast enough for the whole file to take about a minute.
LLM_LATENCY = 0.5

expect.set_options(timeout=30_000)


@pytest.fixture(autouse=True)
def chromium() -> None:
    """Before `site` starts its processes (autouse fixtures come first): is there a browser?"""
    if not CHROMIUM.exists():
        needs.absent(f"{CHROMIUM} is missing: install it (Debian: apt-get install chromium) to run this test")


@pytest.fixture
def site() -> Iterator[str]:
    """The base URL of a daphne + qcluster pair on the test database, wired to the fakes."""
    with serving() as url:
        yield url


@contextmanager
def serving(**world_options: Any) -> Iterator[str]:
    """A daphne + qcluster pair on the test database with the loopback world behind them
    (`world_options` go to `world`: an LLM's pace, for example)."""
    # The cache lives in a database table that flushing between tests leaves alone: without this,
    # every browser test's sign-ups from 127.0.0.1 count against SIGNUP_RATE_PER_HOUR together,
    # and the sixth account of the run is refused (as CI saw once the suite grew).
    cache.clear()
    with world(llm_latency=LLM_LATENCY, **world_options) as w:
        # The status page asks these; the world's fakes answer only what a run needs.
        w.llm.routes[("GET", "/v1/models")] = openai_models("test-model")
        w.searxng.routes[("GET", "/config")] = searxng_config("duckduckgo", "wikipedia")
        env = processes.process_env(**w.env())
        with processes.daphne(env) as host, processes.qcluster(env):
            wait_for_worker()
            yield f"http://{host}"


def wait_for_worker(timeout: float = 60) -> None:
    """Until the cluster's first heartbeat the status table would report no worker."""
    deadline = time.monotonic() + timeout
    while not Stat.get_all():
        assert time.monotonic() < deadline, f"the qcluster did not start within {timeout} s"
        time.sleep(0.2)


@pytest.fixture
def browser(site: str) -> Iterator[Browser]:
    # Depends on `site` so that its database work happens first: while Playwright's sync API is
    # active its event loop counts as running, and Django refuses ORM calls.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        violations = watch_for_csp_violations(browser)
        try:
            yield browser
        finally:
            browser.close()
    assert not violations, f"the pages broke their Content-Security-Policy: {violations}"


def watch_for_csp_violations(browser: Browser) -> list[str]:
    """What Chromium reports in the console of any page when the CSP blocks something there
    ("Refused to execute inline script…"); the pages must never need that."""
    violations: list[str] = []
    open_context = browser.new_context

    def record(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            where = message.location
            violations.append(f"{where.get('url')}:{where.get('lineNumber')}: {message.text[:120]}")

    def new_context(**options: object) -> BrowserContext:
        context = open_context(**options)
        context.on("console", record)
        return context

    browser.new_context = new_context
    return violations


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
