"""The whole journey in a real browser: sign up, steer the plan, watch the run, read and share the
report, revoke the link; and a stranger who sees nothing. A screenshot follows every step.

Live updates are proven by a marker set on `window` after a page loads: a reload or any other
navigation makes a fresh window without it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect
from playwright.sync_api import Error as PlaywrightError

from tests.support.world import TOPIC

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"]),
]

PASSWORD = "correct horse battery staple"
RUN_TIMEOUT = 120_000
STAGES = ("plan", "queries", "search", "score_hits", "read", "summarise", "score_summaries", "answer")

# Resolves with "open" or "closed <code>": what a page's own websocket to `path` is allowed to do.
TRY_WEBSOCKET = """path => new Promise(resolve => {
  const socket = new WebSocket(`ws://${location.host}${path}`);
  socket.onopen = () => { resolve("open"); socket.close(); };
  socket.onclose = event => resolve(`closed ${event.code}`);
})"""

# Every distinct state of the progress bars the page shows, in order, as the websocket swaps them in.
RECORD_PROGRESS = """() => {
  window.__progress = [];
  const read = () => [...document.querySelectorAll("#progress progress")].map(bar => Number(bar.value));
  const record = () => {
    const now = JSON.stringify(read());
    if (window.__progress.at(-1) !== now) window.__progress.push(now);
  };
  record();
  new MutationObserver(record).observe(document.querySelector("#live"), {childList: true, subtree: true});
}"""


# --- Helpers ------------------------------------------------------------------------------------


def shot(page: Page, folder: Path, name: str, *, focus: Locator | None = None) -> None:
    """The whole page, or with `focus` what the window shows around that element."""
    if focus is not None:
        for attempt in range(3):
            try:
                focus.scroll_into_view_if_needed()
                break
            except PlaywrightError:  # a live update swapped the element out meanwhile
                if attempt == 2:
                    raise
    page.screenshot(path=folder / f"{name}.png", full_page=focus is None)


def mark_loaded(page: Page) -> None:
    page.evaluate("window.__noReload = 1")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__noReload") == 1, "the page was reloaded or navigated away"


def event_seqs(page: Page) -> list[int]:
    seqs = page.locator("#event-log li").evaluate_all("lines => lines.map(line => line.dataset.seq)")
    return [int(seq) for seq in seqs]


def event_count(page: Page) -> int:
    return page.locator("#event-log li").count()


def wait_for_more_events(page: Page, than: int) -> None:
    page.wait_for_function("n => document.querySelectorAll('#event-log li').length > n", arg=than)


def assert_newest_line_shown(page: Page) -> None:
    # Once the report is ready the progress and the event log are folded under it: open them.
    folded = page.locator("details#work-progress:not([open]) > summary")
    if folded.count():
        folded.click()
    page.locator("#events").scroll_into_view_if_needed()
    expect(page.locator("#event-log li").last).to_be_in_viewport()


def status(page: Page) -> Locator:
    return page.locator("#topic-status .status")


def topic_path(page: Page) -> str:
    match = re.search(r"/topics/\d+/", page.url)
    assert match, page.url
    return match.group(0)


def new_context(browser: Browser, site: str) -> BrowserContext:
    context = browser.new_context(base_url=site, viewport={"width": 1280, "height": 900}, locale="en-US")
    context.set_default_timeout(30_000)
    return context


def sign_up(page: Page, username: str) -> None:
    page.goto("/accounts/signup/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password confirmation").fill(PASSWORD)


def submit_sign_up(page: Page, username: str) -> None:
    page.get_by_role("button", name="Sign up").click()
    expect(page.get_by_text(f"Welcome to MindSearch, {username}.")).to_be_visible()


def start_topic(page: Page, *, auto_approve: bool = False) -> None:
    page.get_by_label("Your question").fill(TOPIC)
    page.locator("input[name=sources][value=web]").check()
    if auto_approve:
        page.get_by_label("Start without reviewing the plan").check()


def plan_inputs(page: Page) -> Locator:
    return page.locator("#plan .plan-list > li textarea[name^=text-]")


def plan_texts(page: Page) -> list[str]:
    return plan_inputs(page).evaluate_all("inputs => inputs.map(i => i.value)")


def submit_in_plan(page: Page, button: Locator) -> None:
    """Click a plan button and wait until htmx has swapped in the server's answer."""
    with page.expect_response(lambda r: "/subqueries/" in r.url and r.request.method == "POST") as answer:
        button.click()
    assert answer.value.ok
    expect(page.locator("#plan.htmx-request, #plan .htmx-request")).to_have_count(0)


def wait_for_report(page: Page) -> None:
    expect(page.locator("#event-log li[data-stage=done]")).to_have_count(1, timeout=RUN_TIMEOUT)
    expect(status(page)).to_have_text("Completed")
    expect(page.locator("#report article.markdown")).to_be_visible()


# --- Steps of the journey -----------------------------------------------------------------------


def sign_up_alice(page: Page, folder: Path) -> None:
    sign_up(page, "alice")
    shot(page, folder, "01-signup")
    submit_sign_up(page, "alice")
    expect(page.get_by_role("heading", name="No topics yet")).to_be_visible()
    checks = page.locator("table.status tbody")
    for name in ("Database", "Worker", "Live progress (channel layer)", "LLM endpoint", "SearXNG", "Reader"):
        expect(checks.get_by_role("rowheader", name=name)).to_be_visible()
    expect(checks.locator(".badge.error")).to_have_count(0)
    shot(page, folder, "02-empty-workspace")


def ask_question(page: Page, folder: Path) -> None:
    start_topic(page)
    shot(page, folder, "03-new-topic")
    page.get_by_role("button", name="Research it").click()
    expect(page).to_have_url(re.compile(r"/topics/\d+/$"))
    # The plan must still be in the making, or the page cannot show it arriving live.
    expect(status(page)).to_have_text(re.compile("Planning|Queued"))
    mark_loaded(page)


def review_plan(page: Page, folder: Path) -> list[str]:
    """Wait for the plan to arrive live, then edit, delete, add and move sub-queries with htmx."""
    expect(status(page)).to_have_text("Waiting for plan approval")
    expect(plan_inputs(page)).to_have_count(3)
    assert_not_reloaded(page)
    shot(page, folder, "04-plan-review")

    edited = "Что такое Mixture of Tokens и чем он отличается от Mixture of Experts?"
    first = page.locator("#plan .plan-list > li").nth(0)
    first.locator("textarea[name^=text-]").fill(edited)
    submit_in_plan(page, first.get_by_role("button", name="Save"))
    assert plan_texts(page)[0] == edited

    submit_in_plan(page, page.locator("#plan .plan-list > li").nth(2).get_by_role("button", name="Delete"))
    expect(plan_inputs(page)).to_have_count(2)

    added = "Какие ограничения есть у Mixture of Tokens?"
    page.locator("#new-subquery").fill(added)
    submit_in_plan(page, page.locator("#plan").get_by_role("button", name="Add", exact=True).first)
    expect(plan_inputs(page)).to_have_count(3)
    assert plan_texts(page)[2] == added

    before = plan_texts(page)
    submit_in_plan(page, page.locator("#plan .plan-list > li").nth(0).get_by_label("Move down"))
    after = plan_texts(page)
    assert after == [before[1], before[0], before[2]]
    assert_not_reloaded(page)
    shot(page, folder, "05-plan-edited")
    return after


def approve_and_watch(page: Page, folder: Path, plan: list[str]) -> None:
    page.get_by_role("button", name="Approve and research").click()
    expect(status(page)).to_have_text(re.compile("Queued|Running"))
    mark_loaded(page)
    page.evaluate(RECORD_PROGRESS)
    loaded_with = event_count(page)

    # Mid-run: some bars full, the report's still empty, lines arriving.
    page.wait_for_function(
        """() => {
          const value = key => Number(document.querySelector(`#stage-${key} progress`).value);
          return value("search") === 100 && value("answer") === 0;
        }""",
        timeout=RUN_TIMEOUT,
    )
    mid_run = event_count(page)
    assert mid_run > loaded_with
    expect(status(page)).to_have_text("Running")
    assert_newest_line_shown(page)
    shot(page, folder, "06-running")

    wait_for_report(page)
    assert event_count(page) > mid_run
    assert_not_reloaded(page)
    seqs = event_seqs(page)
    assert seqs == list(range(1, len(seqs) + 1))
    bars = page.locator("#progress progress").evaluate_all("bars => bars.map(b => Number(b.value))")
    assert bars == [100] * len(STAGES)
    states = [tuple(map(int, re.findall(r"\d+", state))) for state in page.evaluate("window.__progress")]
    # The bars filled in many visible steps, not in one jump at the end.
    assert len(states) >= 5, states
    assert sum(states[0]) < sum(states[len(states) // 2]) < sum(states[-1])
    # The approved plan is the edited one: the moved LLM sub-query first, the user's two marked.
    readonly = page.locator("#plan .plan-list.readonly > li")
    expect(readonly).to_have_count(3)
    for item, text in zip(readonly.all(), plan, strict=True):
        expect(item).to_contain_text(text)
    tags = [item.locator(":scope > .tag").count() for item in readonly.all()]
    assert tags == [0, 1, 1]
    assert_newest_line_shown(page)
    shot(page, folder, "07-report")


def follow_citation(page: Page, folder: Path) -> None:
    # A click (or a tap) opens the source's card in place; the card's link leads to the list.
    page.locator('#report article a[href="#source-1"]').first.click()
    card = page.locator("#citation-card")
    expect(card).to_be_visible()
    assert "#" not in page.url
    card.get_by_role("link", name="See it in the list of sources").click()
    expect(page).to_have_url(re.compile("#source-1$"))
    expect(page.locator("#source-1")).to_be_in_viewport()
    shot(page, folder, "08-citation", focus=page.locator("#source-1"))


def download_markdown(page: Page) -> None:
    with page.expect_download() as download:
        page.get_by_role("link", name="Download Markdown").click()
    assert download.value.suggested_filename.endswith(".md")
    markdown = Path(download.value.path()).read_text(encoding="utf-8")
    assert "## Источники" in markdown
    assert "[1]" in markdown


def create_share_link(page: Page, folder: Path) -> str:
    page.get_by_role("button", name="Create a share link").click()
    url = page.locator("#share-url").input_value()
    assert re.search(r"/s/[^/]+/$", url), url
    expect(page.locator("#sharing table.links tbody tr")).to_have_count(1)
    shot(page, folder, "09-share-link", focus=page.locator("#sharing"))
    return url


def read_shared(anonymous: Page, url: str, folder: Path) -> None:
    response = anonymous.goto(url)
    assert response and response.status == 200
    expect(anonymous.locator("h1.question")).to_have_text(TOPIC)
    expect(anonymous.locator("#report article.markdown")).to_be_visible()
    expect(anonymous.locator("#report .sources > li").first).to_be_visible()
    for name in ("Cancel", "Delete", "Research again", "Revoke", "Create a share link"):
        expect(anonymous.get_by_role("button", name=name)).to_have_count(0)
    expect(anonymous.get_by_text("My topics")).to_have_count(0)
    expect(anonymous.locator("#plan, #event-log, #sharing, #hits, #documents, #progress")).to_have_count(0)
    expect(anonymous.get_by_role("link", name="Sign in")).to_be_visible()
    shot(anonymous, folder, "10-shared-anonymous")


def revoke(page: Page, anonymous: Page, folder: Path) -> None:
    page.locator("#sharing").get_by_role("button", name="Revoke").click()
    expect(page.get_by_text("The share link was revoked")).to_be_visible()
    expect(page.locator("#sharing table.links tbody tr td").nth(2)).to_have_text("revoked")
    shot(page, folder, "11-revoked", focus=page.locator("#sharing"))
    response = anonymous.reload()
    assert response and response.status == 404
    shot(anonymous, folder, "12-shared-after-revoke")


def stranger_sees_nothing(bob: Page, alice: Page, topic: str, folder: Path) -> None:
    sign_up(bob, "bob")
    submit_sign_up(bob, "bob")
    expect(bob.get_by_role("heading", name="No topics yet")).to_be_visible()
    expect(bob.locator("table.topics")).to_have_count(0)
    expect(bob.get_by_text(TOPIC)).to_have_count(0)
    # Checked after websockets have used this web process: the layer check must still pass.
    expect(bob.locator("table.status tbody .badge.error")).to_have_count(0)
    shot(bob, folder, "13-bob-workspace")
    socket = f"/ws{topic}"
    assert alice.evaluate(TRY_WEBSOCKET, socket) == "open"
    assert bob.evaluate(TRY_WEBSOCKET, socket).startswith("closed")
    response = bob.goto(topic)
    assert response and response.status == 404
    for path in ("report.md", "report.pdf"):
        assert bob.request.get(f"{topic}{path}").status == 404
    shot(bob, folder, "14-bob-404")


# --- Tests --------------------------------------------------------------------------------------


def test_journey_from_sign_up_to_revoked_share(browser: Browser, site: str, artifacts: Path) -> None:
    alice = new_context(browser, site).new_page()
    sign_up_alice(alice, artifacts)
    ask_question(alice, artifacts)
    plan = review_plan(alice, artifacts)
    approve_and_watch(alice, artifacts, plan)
    follow_citation(alice, artifacts)
    download_markdown(alice)
    share_url = create_share_link(alice, artifacts)
    anonymous = new_context(browser, site).new_page()
    read_shared(anonymous, share_url, artifacts)
    revoke(alice, anonymous, artifacts)
    stranger_sees_nothing(new_context(browser, site).new_page(), alice, topic_path(alice), artifacts)


def test_reload_and_second_tab_miss_nothing_and_repeat_nothing(
    browser: Browser, site: str, artifacts: Path
) -> None:
    context = new_context(browser, site)
    page = context.new_page()
    sign_up(page, "carol")
    submit_sign_up(page, "carol")
    start_topic(page, auto_approve=True)
    page.get_by_role("button", name="Research it").click()
    expect(page).to_have_url(re.compile(r"/topics/\d+/$"))
    second = context.new_page()
    second.goto(topic_path(page))
    mark_loaded(second)

    # Reload in the middle of the run, while lines are still arriving.
    expect(page.locator("#event-log li[data-stage=score_hits]").first).to_be_attached(timeout=RUN_TIMEOUT)
    expect(status(page)).to_have_text("Running")
    page.reload()
    mark_loaded(page)
    after_reload = event_count(page)
    assert page.locator("#event-log li[data-stage=done]").count() == 0, "the run ended before the reload"
    shot(page, artifacts, "reload-01-after-reload")
    wait_for_more_events(page, after_reload)

    wait_for_report(page)
    wait_for_report(second)
    assert_not_reloaded(page)
    assert_not_reloaded(second)
    seqs = event_seqs(page)
    assert seqs == list(range(1, len(seqs) + 1)), "a line is missing or repeated after the reload"
    assert event_seqs(second) == seqs
    shot(page, artifacts, "reload-02-completed")
    shot(second, artifacts, "reload-03-second-tab")
