"""Deep mode and a greeting in a real browser: the rounds arrive live, the search stops by itself,
the report cites one page per site; a greeting is answered without a search."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import wait_for_worker
from tests.browser.test_journey import RUN_TIMEOUT, mark_loaded, new_context, shot, sign_up, submit_sign_up
from tests.support import processes
from tests.support.deep_world import QUESTION, deep_world

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"]),
]


@pytest.fixture
def site() -> Iterator[str]:
    """daphne + qcluster wired to the Kestrel web (the `browser` fixture builds on this one)."""
    with deep_world(llm_latency=0.3, reader_latency=0.2) as web:
        env = processes.process_env(**web.env())
        with processes.daphne(env) as host, processes.qcluster(env):
            wait_for_worker()
            yield f"http://{host}"


def ask(page: Page, question: str, *, deep: bool) -> None:
    page.goto("/")
    page.get_by_label("Your question").fill(question)
    page.locator("input[name=sources][value=web]").check()
    page.locator(f"input[name=mode][value={'deep' if deep else 'quick'}]").check()
    page.get_by_label("Start without reviewing the plan").check()
    page.get_by_role("button", name="Research it").click()
    expect(page).to_have_url(re.compile(r"/topics/\d+/$"))


def test_deep_rounds_arrive_live_and_stop_by_themselves(browser: Browser, site: str, artifacts: Path) -> None:
    folder = artifacts / "deep"
    folder.mkdir(exist_ok=True)
    page = new_context(browser, site).new_page()
    sign_up(page, "alice")
    submit_sign_up(page, "alice")
    ask(page, QUESTION, deep=True)
    mark_loaded(page)
    rounds = page.locator("#progress table.rounds")
    expect(rounds.locator("#round-2")).to_be_visible(timeout=RUN_TIMEOUT)
    shot(page, folder, "01-second-round-under-way", focus=page.locator("#progress"))
    expect(page.locator("#event-log li[data-stage=done]")).to_have_count(1, timeout=RUN_TIMEOUT)
    assert page.evaluate("window.__noReload") == 1  # every round came over the websocket
    expect(rounds.locator("tbody tr")).to_have_count(4)
    expect(rounds.locator("#round-4")).to_contain_text("Little new was found")
    expect(rounds.locator("#round-2")).to_contain_text("0.40")
    shot(page, folder, "02-rounds-done", focus=page.locator("#progress"))
    sources = page.locator("#report ol.sources > li")
    # Eight sites, then the shared site's second page in the ninth place (a preference, not a cap).
    expect(sources).to_have_count(9)
    hosts = [
        re.sub(r"^https?://([^/]+)/.*$", r"\1", href)
        for href in sources.locator("> a").evaluate_all("as => as.map(a => a.href)")
    ]
    assert len(set(hosts)) == 8
    expect(page.locator("#report .passage")).to_contain_text("Commit rule")
    shot(page, folder, "03-report-sources", focus=page.locator("#sources"))


def test_a_greeting_is_answered_without_a_search(browser: Browser, site: str, artifacts: Path) -> None:
    folder = artifacts / "deep"
    folder.mkdir(exist_ok=True)
    page = new_context(browser, site).new_page()
    sign_up(page, "bob")
    submit_sign_up(page, "bob")
    ask(page, "Hello there!", deep=False)
    expect(page.locator("#report article.markdown")).to_contain_text("Hello!", timeout=RUN_TIMEOUT)
    expect(page.locator("#report")).to_contain_text("needed no search")
    expect(page.locator("#hits")).not_to_contain_text("http")
    shot(page, folder, "04-greeting")
