"""The report written live, in Chromium: it grows in the page while the worker writes it, a reload
mid-stream shows the text so far and goes on growing, and the finished report then leads the
page, names itself in the tab title and folds the work panels away."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import serving
from tests.browser.test_journey import (
    RUN_TIMEOUT,
    assert_not_reloaded,
    mark_loaded,
    new_context,
    shot,
    sign_up,
    start_topic,
    status,
    submit_sign_up,
)
from tests.support.fakes import Pace
from tests.support.world import prompt_kind

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"]),
]

DRAFT = "#report[data-state=writing] article.report-draft"


def answer_tokens(messages: list[dict], text: str) -> int:
    """The report takes about 8 s to write, in ~90 pieces; other answers come at once."""
    return 320 if prompt_kind(messages[0]["content"]) == "answer" else 0


@pytest.fixture
def site() -> Iterator[str]:
    """The browser tests' site, with an LLM that writes the report at 40 tokens a second."""
    with serving(llm_pace=Pace(tokens_per_second=40, tokens=answer_tokens)) as url:
        yield url


def draft_length(page: Page) -> int:
    return page.evaluate(
        "() => document.querySelector('#report article.report-draft')?.textContent.length ?? -1"
    )


def wait_for_growth(page: Page, than: int) -> None:
    page.wait_for_function(
        """n => {
          const draft = document.querySelector('#report article.report-draft');
          return draft && draft.textContent.length > n;
        }""",
        arg=than,
        timeout=15_000,
    )


def test_the_report_grows_in_the_page_and_survives_a_reload(
    browser: Browser, site: str, artifacts: Path
) -> None:
    page = new_context(browser, site).new_page()
    sign_up(page, "dora")
    submit_sign_up(page, "dora")
    start_topic(page, auto_approve=True)
    page.get_by_role("button", name="Research it").click()
    expect(page).to_have_url(re.compile(r"/topics/\d+/$"))
    mark_loaded(page)

    # The first words appear while the worker is still writing, and the text grows in place.
    expect(page.locator(DRAFT)).to_be_visible(timeout=RUN_TIMEOUT)
    first = draft_length(page)
    assert first > 0
    wait_for_growth(page, first)
    expect(status(page)).to_have_text("Running")
    assert_not_reloaded(page)
    shot(page, artifacts, "live-report-01-writing", focus=page.locator("#report"))

    # A reload mid-stream: the served page already holds the text so far, and it goes on growing.
    before_reload = draft_length(page)
    response = page.reload()
    assert response is not None
    served = response.text()
    assert 'data-state="writing"' in served, "the run finished writing before the reload"
    mark_loaded(page)
    after_reload = draft_length(page)
    assert after_reload >= before_reload > 0
    expect(page.locator(DRAFT)).to_contain_text("Mixture of Tokens")
    wait_for_growth(page, after_reload)
    shot(page, artifacts, "live-report-02-after-reload", focus=page.locator("#report"))

    # The checked report replaces the draft; the page leads with it and says so.
    expect(page.locator("#report")).to_have_attribute("data-state", "ready", timeout=RUN_TIMEOUT)
    expect(page.locator("#report ol.sources > li").first).to_be_visible()
    expect(page.locator("#report article.report-draft")).to_have_count(0)
    expect(page).to_have_title(re.compile(r"^Report ready · "))
    assert page.evaluate("() => document.getElementById('topic-status').nextElementSibling.id") == "report"
    assert page.locator("details.work-panel[open]").count() == 0
    assert_not_reloaded(page)
    page.evaluate("() => window.scrollTo(0, 0)")
    shot(page, artifacts, "live-report-03-ready")
