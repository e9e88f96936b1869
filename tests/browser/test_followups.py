"""The follow-up thread in Chromium: on a finished topic the owner asks a follow-up, the worker
answers it from the topic's sources, the answer appears in the thread without a reload, and its
citation opens a preview card with the cited passage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, expect

from research.models import Topic
from tests.browser.test_citation_preview import signed_in
from tests.browser.test_journey import PASSWORD, shot
from tests.research.pipeline.test_followups import completed_topic

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"]),
]


@pytest.fixture
def finished(site: str, settings: Any) -> Topic:
    # Made before Playwright starts (its running loop forbids ORM calls), with the server's hasher.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    erin = User.objects.create_user("erin", "erin@example.com", PASSWORD)
    return completed_topic(erin)


def test_a_follow_up_is_answered_in_the_thread_with_a_citation_preview(
    finished: Topic, browser: Browser, site: str, artifacts: Path
) -> None:
    page = signed_in(browser, site)
    page.goto(f"/topics/{finished.pk}/")
    # The report leads the page; the work panels (plan, progress and event log, sources) are folded.
    expect(page.locator("details.work-panel[open]")).to_have_count(0)
    thread = page.locator("#thread")
    expect(thread.get_by_role("heading", name="Follow-up questions")).to_be_visible()
    expect(page.locator("#report button.expand-section")).to_have_count(2)  # one per section heading
    shot(page, artifacts, "followup-ask")
    page.get_by_label("Ask a follow-up").fill("Where is Mixture of Tokens used?")
    page.get_by_role("button", name="Ask", exact=True).click()
    item = thread.locator("li.followup").first
    expect(item).to_contain_text("Where is Mixture of Tokens used?")
    # Answered by the worker and swapped in over the websocket: no reload.
    page.evaluate("window.__noReload = 1")
    answer = item.locator("article.followup-answer")
    expect(answer).to_be_visible(timeout=60_000)
    expect(item).to_contain_text("Answered from the topic's sources")
    assert page.evaluate("window.__noReload") == 1
    citation = answer.locator("a.citation").first
    expect(citation).to_be_visible()
    citation.hover()
    card = page.locator("#citation-card")
    expect(card).to_be_visible()
    expect(card).to_contain_text("MoT paper")
    expect(card).to_contain_text("Mixture of Tokens mixes tokens from different examples")
    expect(card.locator("mark").first).to_be_visible()
    shot(page, artifacts, "followup-thread", focus=card)
    # "Expand this section" beside a report heading asks for that section, answered the same way.
    page.mouse.move(0, 0)
    page.locator("#report button.expand-section", has_text="Expand this section").nth(1).click()
    expanded = thread.locator("li.followup").nth(1)
    expect(expanded).to_contain_text("Expand this section: Применение")
    expect(expanded.locator("article.followup-answer")).to_be_visible(timeout=60_000)
    expect(answer.locator("h3").first).to_be_visible()  # the answer's headings sit under the thread's
    shot(page, artifacts, "followup-expanded", focus=expanded)
    # On a phone the thread, its new sources and the forms fit: no sideways scrolling.
    page.set_viewport_size({"width": 375, "height": 812})
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    shot(page, artifacts, "followup-phone")
