"""How the pages look, in Chromium: every page in English and in Russian, at 1280 and 375 px, light
and dark, with axe-core's contrast rule (axe-core as bundled by axe-playwright-python, never
fetched); a topic walked in the Russian interface from plan review to its report, whose first
screen shows the stage, the newest events and the report as it grows, on a desktop and a phone;
an English and a Russian report with an unsupported claim downloaded as Markdown, DOCX and PDF
through the page's own links, from either interface, each file with its marks and summary line in
the report's language (issue 29).

Screenshots of every state land in tests/artifacts/browser/look/ to be looked at. One browser, one
page: the viewport and the colour scheme change in place, so each state is loaded once.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe  # type: ignore[import-untyped]
from django.contrib.auth.models import User
from docx import Document
from pdfminer.high_level import extract_text
from playwright.sync_api import Browser, Locator, Page, expect
from playwright.sync_api import Error as PlaywrightError

from retrieval.models import UploadedDocument
from tests.browser.conftest import serving
from tests.browser.test_journey import PASSWORD, RUN_TIMEOUT, new_context
from tests.research.pipeline.test_citation_report import report_with_citations
from tests.research.test_citation_previews import private_report
from tests.research.test_export_check import RUSSIAN, RUSSIAN_ANSWER, answered_with_check
from tests.support.fakes import Pace
from tests.support.world import TOPIC, prompt_kind

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"]),
]

SIZES = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 375, "height": 812}}
SCHEMES = ("light", "dark")
CONTRAST = {"runOnly": {"type": "rule", "values": ["color-contrast"]}, "resultTypes": ["violations"]}
axe = Axe()


def answer_tokens(messages: list[dict], text: str) -> int:
    """The report takes about 8 s to write, in many pieces; other answers come at once."""
    return 320 if prompt_kind(messages[0]["content"]) == "answer" else 0


@pytest.fixture
def site() -> Iterator[str]:
    with serving(llm_pace=Pace(tokens_per_second=40, tokens=answer_tokens)) as url:
        yield url


@pytest.fixture
def made(site: str, settings: Any) -> dict[str, int]:
    """A checked report with an unsupported claim, and a ready document with its passages (made
    before `browser` starts Playwright, whose running loop forbids ORM calls)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    vera = User.objects.create_user("vera", "vera@example.com", PASSWORD)
    checked = report_with_citations(vera)
    russian = answered_with_check(vera, RUSSIAN, "Что такое смесь токенов?", RUSSIAN_ANSWER)
    _private, uploaded = private_report(vera)
    ready = UploadedDocument.Status.READY
    UploadedDocument.objects.filter(pk=uploaded.pk).update(status=ready, chunk_count=3)
    return {"report": checked.pk, "russian": russian.pk, "document": uploaded.pk}


# An open panel whose card shows its own heading under the panel's summary ("▸ Plan", then "Plan").
# A completed topic's work panels start closed: they are opened for the look and closed again.
DOUBLED_HEADINGS = """() => {
  const closed = [...document.querySelectorAll('details.work-panel:not([open])')];
  closed.forEach(panel => { panel.open = true; });
  const doubled = [...document.querySelectorAll('details[open] > summary')].flatMap(summary => {
    const title = summary.textContent.trim();
    return [...summary.parentElement.querySelectorAll('h2, h3')].filter(heading => {
      const box = heading.getBoundingClientRect();
      return heading.textContent.trim() === title && box.width > 1 && box.height > 1;
    }).map(() => title);
  });
  closed.forEach(panel => { panel.open = false; });
  return doubled;
}"""
# A visible <select> left as the browser draws it: the page's font, the theme's line, rounded.
UNSTYLED_SELECTS = """() => {
  const probe = document.createElement('div');
  probe.style.border = '1px solid var(--line)';
  document.body.append(probe);
  const line = getComputedStyle(probe).borderTopColor;
  probe.remove();
  const font = getComputedStyle(document.body).fontFamily;
  const shown = [...document.querySelectorAll('select')].filter(select => select.getClientRects().length);
  return shown.filter(select => {
    const style = getComputedStyle(select);
    return style.fontFamily !== font || style.borderTopColor !== line || style.borderTopLeftRadius === '0px';
  }).map(select => '#' + (select.id || select.name));
}"""


def scroll_into_view(locator: Locator) -> None:
    """Scroll to what the locator finds now: a live update may swap the element found a moment
    ago for its new copy (the plan panel is re-rendered as the run's events arrive)."""
    for _attempt in range(4):
        try:
            locator.scroll_into_view_if_needed()
            return
        except PlaywrightError as error:
            if "not attached to the DOM" not in str(error):
                raise
    locator.scroll_into_view_if_needed()


class Looks:
    """Every state looked at: its screenshots, and what axe and the layout checks found."""

    def __init__(self, page: Page, folder: Path) -> None:
        self.page = page
        self.folder = folder / "look"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.problems: list[str] = []

    def at(self, size: str, scheme: str) -> None:
        self.page.set_viewport_size(SIZES[size])  # type: ignore[arg-type]
        self.page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]

    def every_way(self, name: str, *, scroll_to: Locator | None = None) -> None:
        for size in SIZES:
            for scheme in SCHEMES:
                self.at(size, scheme)
                self.check(f"{name}-{size}-{scheme}", scroll_to=scroll_to)

    def check(self, name: str, *, scroll_to: Locator | None = None) -> None:
        page = self.page
        if scroll_to is None:
            page.evaluate("window.scrollTo(0, 0)")
        else:
            scroll_into_view(scroll_to)
        result = axe.run(page, options=CONTRAST)
        for violation in result.response["violations"]:
            for node in violation["nodes"]:
                why = node["any"][0]["message"] if node["any"] else ""
                self.problems.append(f"{name}: {node['target']} {why}")
        sideways = page.evaluate("(e => e.scrollWidth - e.clientWidth)(document.documentElement)")
        if sideways > 0:
            self.problems.append(f"{name}: the page scrolls {sideways} px sideways")
        for title in page.evaluate(DOUBLED_HEADINGS):
            self.problems.append(f"{name}: “{title}” twice, the panel's summary and its card's heading")
        for select in page.evaluate(UNSTYLED_SELECTS):
            self.problems.append(f"{name}: the <select> {select} is not styled like the other fields")
        page.screenshot(path=self.folder / f"{name}.png")


def in_first_screen(page: Page, selector: str) -> bool:
    """Whether the element's top is inside the window with the page scrolled to its top."""
    return page.evaluate(
        """selector => {
          window.scrollTo(0, 0);
          const box = document.querySelector(selector)?.getBoundingClientRect();
          return !!box && box.height > 0 && box.top >= 0 && box.top < window.innerHeight - 40;
        }""",
        selector,
    )


def sign_in(page: Page) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("vera")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()


def use_language(page: Page, site: str, code: str) -> None:
    page.context.add_cookies([{"name": "django_language", "value": code, "url": site}])


def test_every_page_reads_in_both_languages_sizes_and_themes_and_on_a_phone(
    made: dict[str, int], browser: Browser, site: str, artifacts: Path
) -> None:
    page = new_context(browser, site).new_page()
    looks = Looks(page, artifacts)
    sign_in(page)
    for language in ("en", "ru"):
        use_language(page, site, language)
        page.goto("/")
        looks.every_way(f"{language}-home")
        page.goto(f"/topics/{made['report']}/")
        expect(page.locator("#citation-summary")).to_be_visible()
        looks.every_way(f"{language}-report")
        looks.every_way(f"{language}-report-sources", scroll_to=page.locator("#report ol.sources"))
        page.goto("/documents/")
        expect(page.locator("#document-list .doc-status-ready")).to_be_visible()
        looks.every_way(f"{language}-documents")
        page.goto(f"/documents/{made['document']}/?from=2")
        expect(page.locator(".passage-text").first).to_be_visible()
        looks.every_way(f"{language}-document", scroll_to=page.locator(".passage.cited"))
        page.goto("/status/")
        looks.every_way(f"{language}-status")
        downloads_carry_the_check(page, looks, made, language)
    use_language(page, site, "en")
    a_phone_taps_a_citation_and_reads_the_tables(page, looks, made)
    assert not looks.problems, "\n".join(looks.problems)


DOWNLOAD_LINKS = {
    "en": {"md": "Download Markdown", "docx": "Download DOCX", "pdf": "Download PDF"},
    "ru": {"md": "Скачать Markdown", "docx": "Скачать DOCX", "pdf": "Скачать PDF"},
}
# What each file must show, in its report's language whatever the interface's: the unsupported
# claims' marks (the Markdown's in bold), and the summary lines (of the report, and of the Russian
# follow-up's answer); never the other language's words for them.
IN_THE_FILES: dict[str, dict[str, list[str]]] = {
    "report": {
        "marks": ["The moon is cheese [1] (not supported, note 1)."],
        "summaries": ["1 of 3 citations supported by their sources · 1 not supported, 1 weakly supported"],
        "never": ["не подтверждено", "Источники подтверждают"],
    },
    "russian": {
        "marks": [
            "на Марсе [1] (не подтверждено, примечание 1).",
            "на Луне [2] (не подтверждено, примечание 3).",
        ],
        "summaries": [
            "Источники подтверждают 1 из 3 ссылок · 1 не подтверждена, 1 подтверждена слабо",
            "Источники подтверждают 1 из 2 ссылок · 1 не подтверждена",
        ],
        "never": ["not supported", "citations supported"],
    },
}


def in_markdown(mark: str) -> str:
    """A mark as the Markdown writes it: "[1] **(not supported, note 1)**"."""
    return re.sub(r"(\(.+\))", r"**\1**", mark)


def downloads_carry_the_check(page: Page, looks: Looks, made: dict[str, int], language: str) -> None:
    """Both reports downloaded through the page's own links, as Markdown, DOCX and PDF."""
    looks.at("desktop", "light")
    for report, expected in IN_THE_FILES.items():
        page.goto(f"/topics/{made[report]}/")
        files = {}
        for kind, name in DOWNLOAD_LINKS[language].items():
            with page.expect_download() as started:
                page.locator("#report .actions").get_by_role("link", name=name, exact=True).click()
            download = started.value
            assert download.failure() is None, (report, kind, download.failure())
            files[kind] = Path(download.path()).read_bytes()
        texts = {
            "md": files["md"].decode(),
            "docx": "\n".join(p.text for p in Document(io.BytesIO(files["docx"])).paragraphs),
            "pdf": extract_text(io.BytesIO(files["pdf"])),
        }
        for kind, text in texts.items():
            flat = " ".join(text.split())
            marks = [in_markdown(mark) for mark in expected["marks"]] if kind == "md" else expected["marks"]
            for phrase in [*marks, *expected["summaries"]]:
                if phrase not in flat:
                    looks.problems.append(f"{language} interface, {report} {kind}: no “{phrase}”")
            for word in expected["never"]:
                if word in flat:
                    looks.problems.append(f"{language} interface, {report} {kind}: “{word}”")
    looks.check(f"{language}-downloaded-from")


def a_phone_taps_a_citation_and_reads_the_tables(page: Page, looks: Looks, made: dict[str, int]) -> None:
    looks.at("phone", "light")
    page.goto(f"/topics/{made['report']}/")
    citation = page.locator("#report article.markdown a.citation").nth(1)
    citation.scroll_into_view_if_needed()
    before = page.evaluate("window.scrollY")
    citation.click()
    card = page.locator("#citation-card")
    expect(card).to_be_visible()
    expect(card).to_contain_text("The source does not support this sentence")
    assert page.evaluate("location.hash") == "", "the tap jumped to the sources list"
    assert page.evaluate("window.scrollY") == before
    box = card.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375, box
    looks.check("phone-citation-card", scroll_to=card)
    card.get_by_role("button", name="Close the preview").click()
    expect(card).to_be_hidden()
    expect(citation).to_be_focused()
    # The card's own link is the way to the list.
    citation.click()
    card.get_by_role("link", name="See it in the list of sources").click()
    expect(page).to_have_url(re.compile("#source-1$"))
    expect(card).to_be_hidden()

    # Tables stack at 375 px: each cell is named by its column, nothing scrolls sideways.
    tables = (("/status/", "table.status"), ("/documents/", "table.uploads"), ("/", "table.topics"))
    for path, table in tables:
        page.goto(path)
        rows = page.locator(f"{table} tbody tr")
        expect(rows.first).to_be_visible()
        overflow = page.locator(table).evaluate("t => t.scrollWidth - t.clientWidth")
        assert overflow <= 0, (path, overflow)
        expect(page.locator(f"{table} thead")).not_to_be_in_viewport()
    labelled = page.locator("table.topics tbody tr").first.locator("td[data-label]").first
    label = labelled.evaluate("td => getComputedStyle(td, '::before').content")
    assert label == '"Status: "', label


def test_a_topic_keeps_what_moves_in_the_first_screen(browser: Browser, site: str, artifacts: Path) -> None:
    page = new_context(browser, site).new_page()
    looks = Looks(page, artifacts)
    page.goto("/accounts/signup/")
    page.get_by_label("Username").fill("mira")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password confirmation").fill(PASSWORD)
    page.get_by_role("button", name="Sign up").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    use_language(page, site, "ru")
    page.goto("/")
    page.locator("#id_question").fill(TOPIC)
    page.locator("input[name=sources][value=web]").check()
    page.locator("form.topic-form button.primary").click()
    expect(page).to_have_url(re.compile(r"/topics/\d+/$"))

    # Plan review: Approve is at hand below however many rows, on a phone too.
    approve = page.locator("#plan-form > .actions button.primary")
    expect(approve).to_be_visible(timeout=RUN_TIMEOUT)
    for size in SIZES:
        looks.at(size, "light")
        scroll_into_view(page.locator("#plan-form textarea").first)
        expect(approve).to_be_in_viewport()
    looks.every_way("ru-plan-review", scroll_to=page.locator("#plan-form textarea").first)

    # The run: the stage, the newest events and the report as it is written lead the page.
    looks.at("desktop", "light")
    approve.click()
    draft = "#report[data-state=writing] article.report-draft"
    expect(page.locator(draft)).to_be_visible(timeout=RUN_TIMEOUT)
    for size in SIZES:
        looks.at(size, "dark" if size == "phone" else "light")
        grown = f"n => (document.querySelector('{draft}')?.textContent.length ?? 0) > n"
        length = page.evaluate(f"document.querySelector('{draft}')?.textContent.length ?? 0")
        page.wait_for_function(grown, arg=length, timeout=15_000)
        looks.check(f"ru-running-{size}")
        for part in ("#topic-status .status-running", "#event-log > li:last-child", draft):
            if not in_first_screen(page, part):
                looks.problems.append(f"{part} is not in the first screen at {size}")
    looks.every_way("ru-running")

    # Done: the report leads, and the way to ask a follow-up stays at the bottom of the window.
    looks.at("desktop", "light")
    expect(page.locator("#report")).to_have_attribute("data-state", "ready", timeout=RUN_TIMEOUT)
    expect(page.locator("#followup-form")).to_have_count(1)
    for size in SIZES:
        looks.at(size, "light")
        assert in_first_screen(page, "#report"), size
        expect(page.locator("#followup-dock a")).to_be_in_viewport()
    page.locator("#followup-dock a").click()
    expect(page.locator("#followup-question")).to_be_focused()
    looks.every_way("ru-completed")

    # The history menu, one click away: this topic with its status, and a search that narrows it.
    looks.at("desktop", "light")
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("#history > summary").click()
    entries = page.locator("#history-list li")
    expect(entries).to_have_count(1)
    expect(entries.first.locator(".status")).to_have_text("Завершено")
    looks.check("ru-history-desktop")
    page.locator("#history-q").fill("нет такой темы")
    expect(page.locator("#history-list")).to_contain_text("Подходящих тем нет.")
    assert not looks.problems, "\n".join(looks.problems)
