"""A new user's first hour in Chromium: plan review that never loses work, every page at 375 px
without sideways scrolling (light and dark, English and Russian), a revoked share link's styled
page, and the screenshots the README shows.

One run of the loopback world serves all of it: a research run takes most of a minute.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.test_journey import (
    RUN_TIMEOUT,
    new_context,
    plan_inputs,
    plan_texts,
    shot,
    sign_up,
    start_topic,
    status,
    submit_in_plan,
    submit_sign_up,
    topic_path,
    wait_for_report,
)

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"]),
]

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "benchmarks" / "scifact" / "corpus.jsonl"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
PHONE = {"width": 375, "height": 812}
# Records, from now on, whether any button of the page has said "Copied" (window.sawCopied).
SAW_COPIED = """() => {
  window.sawCopied = false;
  const look = () => {
    const buttons = [...document.querySelectorAll("button")];
    if (buttons.some((b) => b.textContent.trim() === "Copied")) window.sawCopied = true;
  };
  new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""

# Where an element sticks out past the window's right edge: the culprits of a sideways scroll.
WIDER_THAN_WINDOW = """() => {
  const width = document.documentElement.clientWidth;
  const scrolled = el => el.parentElement?.closest(".table-wrap, .upload-results, pre");
  const name = el => `${el.tagName.toLowerCase()}#${el.id}.${[...el.classList].join(".")}`;
  const wide = [...document.querySelectorAll("body *")]
    .filter(el => el.getBoundingClientRect().right > width + 1 && !scrolled(el))
    .slice(0, 5)
    .map(el => `${name(el)} → ${Math.round(el.getBoundingClientRect().right)}`);
  return {scroll: document.documentElement.scrollWidth, width, wide};
}"""


def scifact_markdown() -> bytes:
    """A few real SciFact abstracts as one Markdown document (public data, not written here)."""
    lines = ["# SciFact abstracts", ""]
    with SCIFACT.open(encoding="utf-8") as corpus:
        for _index, line in zip(range(6), corpus, strict=False):
            doc = json.loads(line)
            lines += [f"## {doc['title']}", "", doc["text"], ""]
    return "\n".join(lines).encode()


def assert_fits(page: Page, where: str) -> None:
    fit = page.evaluate(WIDER_THAN_WINDOW)
    assert fit["scroll"] <= fit["width"], f"{where} scrolls sideways at {fit['width']} px: {fit}"


def phone_context(browser: Browser, site: str, state: dict, *, locale: str, dark: bool) -> BrowserContext:
    context = browser.new_context(
        base_url=site,
        viewport=PHONE,
        locale=locale,
        color_scheme="dark" if dark else "light",
        storage_state=state,
    )
    context.set_default_timeout(30_000)
    return context


# --- Steps --------------------------------------------------------------------------------------


def review_without_saving(page: Page, folder: Path) -> list[str]:
    """Type into fields and never press Save: approving must research exactly what is shown."""
    expect(status(page)).to_have_text("Waiting for plan approval")
    expect(plan_inputs(page)).to_have_count(3)
    # Nothing is read or written before approval: no empty Report or Pages read cards.
    expect(page.locator("#report")).to_be_hidden()
    expect(page.locator("#work-sources")).to_be_hidden()

    # An empty Add answers 400: its error is shown beside the field, and typed rows survive it.
    first = plan_inputs(page).nth(0)
    first.fill("Что такое Mixture of Tokens — коротко?")
    with page.expect_response(
        lambda r: r.url.endswith("/subqueries/") and r.request.method == "POST"
    ) as answer:
        page.locator("#plan").get_by_role("button", name="Add", exact=True).first.click()
    assert answer.value.status == 400
    expect(page.locator("#new-subquery-error")).to_have_text("A sub-query cannot be empty.")
    expect(page.locator("#new-subquery")).to_have_attribute("aria-invalid", "true")
    assert plan_texts(page)[0] == "Что такое Mixture of Tokens — коротко?"
    shot(page, folder, "first-run-01-empty-add")

    # ↑/↓: the focus stays with the moved row, also when it reaches the bottom.
    row_id = page.locator("#plan .plan-list > li").nth(1).get_attribute("id")
    submit_in_plan(page, page.locator(f"#{row_id}").get_by_label("Move down"))
    expect(page.locator("#plan .plan-list > li").nth(2)).to_have_id(row_id)
    focused = page.evaluate("document.activeElement.id")
    assert focused == f"sq-{row_id.removeprefix('subquery-')}-up", focused

    # Enter in a field saves it (Shift+Enter would make a new line).
    second = plan_inputs(page).nth(1)
    second.fill("Где используется Mixture of Tokens?")
    with page.expect_response(lambda r: "/subqueries/" in r.url and r.request.method == "POST"):
        second.press("Enter")
    expect(page.locator("#plan.htmx-request, #plan .htmx-request")).to_have_count(0)

    # The field is as wide as the card and grows with a long text.
    card = page.locator("#plan").bounding_box()
    field = plan_inputs(page).nth(2)
    one_line = field.bounding_box()
    assert one_line["width"] > 0.8 * card["width"], (one_line, card)
    unsaved = (
        "Какие улучшения Mixture of Tokens предлагались после первой статьи — transition tuning, "
        "масштабирование групп, сочетание с Mixture of Experts — и насколько каждое из них меняет "
        "качество и стоимость обучения больших языковых моделей?"
    )
    field.fill(unsaved)
    assert field.bounding_box()["height"] > 1.8 * one_line["height"]
    page.locator("#new-subquery").fill("Кто сравнивал Mixture of Tokens с Mixture of Experts?")
    shot(page, folder, "first-run-02-unsaved-edits")
    expected = [*plan_texts(page), "Кто сравнивал Mixture of Tokens с Mixture of Experts?"]
    page.get_by_role("button", name="Approve and research").click()
    expect(status(page)).to_have_text(re.compile("Queued|Running"))
    expect(page.locator("#report")).to_be_visible()
    readonly = page.locator("#plan .plan-list.readonly > li")
    expect(readonly).to_have_count(4)
    for item, text in zip(readonly.all(), expected, strict=True):
        expect(item).to_contain_text(" ".join(text.split()))
    return expected


def upload_scifact(page: Page) -> None:
    page.goto("/documents/")
    page.get_by_label("Files to upload").set_input_files(
        [{"name": "scifact-abstracts.md", "mimeType": "text/markdown", "buffer": scifact_markdown()}]
    )
    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.locator("#upload-results")).to_contain_text("scifact-abstracts.md")
    expect(page.locator(".doc-status-ready")).to_have_count(1, timeout=RUN_TIMEOUT)
    # The upload's message follows the indexing: "indexing has started" does not stay.
    expect(page.locator("#upload-results")).to_contain_text("scifact-abstracts.md is indexed")
    expect(page.locator("#upload-results")).not_to_contain_text("indexing has started")


def every_page_fits_a_phone(browser: Browser, site: str, state: dict, pages: list[str], folder: Path) -> None:
    for locale, dark in (("en-US", False), ("ru-RU", True), ("en-US", True), ("ru-RU", False)):
        context = phone_context(browser, site, state, locale=locale, dark=dark)
        page = context.new_page()
        for path in pages:
            page.goto(path)
            name = re.sub(r"\W+", "-", path).strip("-") or "home"
            assert_fits(page, f"{path} ({locale}, {'dark' if dark else 'light'})")
            if (locale, dark) in {("ru-RU", True), ("en-US", False)}:
                shot(page, folder, f"phone-{locale}-{'dark' if dark else 'light'}-{name}")
        context.close()


# --- The test -----------------------------------------------------------------------------------


def test_first_run_plan_review_phone_layout_and_revoked_share(
    browser: Browser, site: str, artifacts: Path
) -> None:
    context = new_context(browser, site)
    page = context.new_page()
    sign_up(page, "dana")
    submit_sign_up(page, "dana")
    upload_scifact(page)
    page.goto("/")
    start_topic(page)
    # Shift+Enter makes a new line in the question; Enter sends the form.
    question = page.get_by_label("Your question")
    question.press("Shift+Enter")
    assert question.input_value().endswith("\n")
    assert page.url.endswith("/")
    question.press("Enter")
    expect(page).to_have_url(re.compile(r"/topics/\d+/$"))
    review_without_saving(page, artifacts)
    topic = topic_path(page)

    # Mid-run, for the README: the topic page live.
    page.wait_for_function(
        "() => Number(document.querySelector('#stage-search progress').value) === 100",
        timeout=RUN_TIMEOUT,
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    # The page leads with what moves (status, event log, report, progress): its first screen.
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=SCREENSHOTS / "topic-live.png")
    wait_for_report(page)
    page.evaluate("document.getElementById('report').scrollIntoView()")
    page.screenshot(path=SCREENSHOTS / "report.png")

    # A new share link: copied with its button, then revoked.
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.get_by_role("button", name="Create a share link").click()
    share_url = page.locator("#share-url").input_value()
    # The button says "Copied" for 2 s; a live update may swap the panel within them, so what the
    # page showed is recorded as it happens rather than looked for afterwards.
    page.evaluate(SAW_COPIED)
    page.get_by_role("button", name="Copy", exact=True).click()
    page.wait_for_function("() => window.sawCopied === true")
    assert page.evaluate("navigator.clipboard.readText()") == share_url
    share_path = re.sub(r"^https?://[^/]+", "", share_url)

    page.goto("/documents/")
    page.screenshot(path=SCREENSHOTS / "documents.png", full_page=True)

    state = context.storage_state()
    pages = ["/", topic, "/documents/", "/documents/search/?q=diffusion+tensor+MRI", "/status/",
             "/settings/tokens/", "/accounts/password/", share_path]  # fmt: skip
    every_page_fits_a_phone(browser, site, state, pages, artifacts)

    page.goto(topic)
    page.locator("#sharing").get_by_role("button", name="Revoke").click()
    expect(page.get_by_text("The share link was revoked")).to_be_visible()
    anonymous = new_context(browser, site).new_page()
    response = anonymous.goto(share_path)
    assert response and response.status == 404
    expect(anonymous.get_by_role("heading", name="This link no longer works")).to_be_visible()
    expect(anonymous.get_by_text("This link was revoked or has expired.")).to_be_visible()
    # The site's own stylesheet, not Django's bare or DEBUG page (which lists every URL).
    expect(anonymous.locator("link[rel=stylesheet]")).to_have_count(1)
    expect(anonymous.get_by_text("URLconf")).to_have_count(0)
    shot(anonymous, artifacts, "first-run-03-revoked-share")
    for path in (share_path, "/accounts/login/", "/accounts/signup/"):
        phone = phone_context(
            browser, site, {"cookies": [], "origins": []}, locale="en-US", dark=False
        ).new_page()
        phone.goto(path)
        assert_fits(phone, f"{path} (signed out)")
        phone.context.close()

    # Dark mode: the system's choice by default, the header's switch remembered across pages.
    light = new_context(browser, site)
    light.add_cookies(context.cookies())
    tab = light.new_page()
    tab.goto("/status/")
    background = "getComputedStyle(document.body).backgroundColor"
    assert tab.evaluate(background) == "rgb(247, 247, 245)"
    tab.get_by_label("Theme").select_option("dark")
    assert tab.evaluate(background) == "rgb(20, 21, 23)"
    tab.goto("/")
    assert tab.evaluate("document.documentElement.dataset.theme") == "dark"
    assert tab.evaluate(background) == "rgb(20, 21, 23)"
    expect(tab.get_by_label("Theme")).to_have_value("dark")
    shot(tab, artifacts, "first-run-04-dark-home")
