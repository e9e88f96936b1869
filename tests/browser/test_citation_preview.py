"""Citation previews in Chromium: hovering or focusing `[n]` in a report shows the card with the
cited passage, its marked words and the check's verdict; Escape closes it; a private source's card
opens the document at the cited passage; on a phone the card stays inside the window."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect

from research.models import Topic
from tests.browser.test_journey import PASSWORD, new_context, shot
from tests.research.pipeline.test_citation_report import report_with_citations
from tests.research.test_citation_previews import private_report

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"]),
]


@pytest.fixture
def reports(site: str, settings: Any) -> tuple[Topic, Topic]:
    # Made before the `browser` fixture starts Playwright, whose running loop forbids ORM calls;
    # hashed with the server's hasher (the tests' fast one is not on its list).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    erin = User.objects.create_user("erin", "erin@example.com", PASSWORD)
    return report_with_citations(erin), private_report(erin)[0]


def signed_in(browser: Browser, site: str, **options: object) -> Page:
    context = new_context(browser, site)
    page = context.new_page()
    if options:
        page.set_viewport_size(options["viewport"])  # type: ignore[arg-type]
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("erin")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    # On a phone the header's links (Sign out among them) are folded behind its Menu button.
    expect(page.get_by_role("button", name="Sign out", include_hidden=True)).to_have_count(1)
    return page


def test_hover_and_focus_show_the_cited_passage(
    reports: tuple[Topic, Topic], browser: Browser, site: str, artifacts: Path
) -> None:
    topic, _private = reports
    page = signed_in(browser, site)
    page.goto(f"/topics/{topic.pk}/")
    citations = page.locator("#report article.markdown a.citation")
    expect(citations).to_have_count(3)
    card = page.locator("#citation-card")
    citations.nth(0).hover()
    expect(card).to_be_visible()
    expect(card).to_contain_text("Tokens are mixed across examples.")
    expect(card).to_contain_text("The source supports this sentence")
    expect(card.locator("mark").first).to_have_text("Tokens")
    expect(citations.nth(0)).to_have_attribute("aria-describedby", "citation-card")
    shot(page, artifacts, "citation-preview", focus=card)
    # The keyboard reaches the same card; each citation has its own passage and verdict.
    page.mouse.move(0, 0)
    citations.nth(2).focus()
    expect(card).to_contain_text("Routing weights are trained.")
    expect(card).to_contain_text("only in part")
    page.keyboard.press("Escape")
    expect(card).to_be_hidden()
    expect(citations.nth(2)).to_be_focused()


def test_a_private_source_opens_at_the_cited_passage_and_fits_a_phone(
    reports: tuple[Topic, Topic], browser: Browser, site: str
) -> None:
    _topic, private = reports
    page = signed_in(browser, site, viewport={"width": 375, "height": 812})
    page.goto(f"/topics/{private.pk}/")
    citation = page.locator("#report article.markdown a[href='#source-1']").first
    citation.focus()
    card = page.locator("#citation-card")
    expect(card).to_contain_text("52 employees")
    box = card.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375, box
    card.get_by_role("link", name="Open the document at this passage").click()
    expect(page.locator("#passage-2.cited")).to_contain_text("Staff numbers rose from 40 to 52")
    expect(page.get_by_role("heading", name="Passages from the cited one on")).to_be_visible()
