"""Private documents in a real browser: upload a PDF (file picker) and a DOCX (drag and drop), watch
them become Ready without a reload, find a passage by question, delete one; a second user sees
none of it. A real daphne and qcluster index the files with the bundled model.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterator
from pathlib import Path

import docx
import pytest
from playwright.sync_api import Browser, FilePayload, Page, expect

from tests.browser.conftest import wait_for_worker
from tests.browser.test_journey import (
    assert_not_reloaded,
    mark_loaded,
    new_context,
    shot,
    sign_up,
    submit_sign_up,
)
from tests.retrieval.test_parsing import pdf_bytes
from tests.support import processes

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(transaction=True, databases=["default", "channels_postgres"]),
]

INDEX_TIMEOUT = 120_000
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
PDF_PAGES = [
    "Quokka field notes, spring survey.",
    "Quokkas live on Rottnest Island and smile at visitors.",
    "Counts were taken at dawn near the lakes.",
]

# Drops files on an element the way a browser does: dragenter, dragover, then drop, all carrying
# one DataTransfer with the files in it.
DROP_FILES = """([selector, files]) => {
  const transfer = new DataTransfer();
  for (const file of files) {
    const bytes = Uint8Array.from(atob(file.data), (c) => c.charCodeAt(0));
    transfer.items.add(new File([bytes], file.name, { type: file.type }));
  }
  const target = document.querySelector(selector);
  for (const type of ["dragenter", "dragover", "drop"]) {
    target.dispatchEvent(new DragEvent(type, { dataTransfer: transfer, bubbles: true, cancelable: true }));
  }
}"""

# Every status text the documents table shows, in order, as it is swapped in.
RECORD_STATUSES = """() => {
  window.__statuses = [];
  const record = () => {
    const pills = document.querySelectorAll("#document-list tbody .status");
    const text = [...pills].map((pill) => pill.textContent.trim()).join("|");
    if (text && window.__statuses.at(-1) !== text) window.__statuses.push(text);
  };
  new MutationObserver(record).observe(document.querySelector("main"), { childList: true, subtree: true });
}"""


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    """daphne + qcluster on the test database, their uploads in a folder of this test's own."""
    env = processes.process_env(MINDSEARCH_DATA_DIR=str(tmp_path), EMBEDDING_BACKEND="local")
    with processes.daphne(env) as host, processes.qcluster(env):
        wait_for_worker()
        yield f"http://{host}"


def docx_file() -> bytes:
    document = docx.Document()
    document.add_heading("Mixture of Tokens", level=1)
    document.add_paragraph("Mixture of Tokens routes every token to all experts with learned weights.")
    document.add_heading("Results", level=2)
    document.add_paragraph("Mixing tokens across examples keeps every expert busy during training.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def row(page: Page, name: str):
    return page.locator("#document-list tbody tr", has=page.get_by_role("link", name=name, exact=True))


# --- Steps ------------------------------------------------------------------------------------------


def open_empty_documents(page: Page, folder: Path) -> None:
    page.get_by_role("link", name="Documents", exact=True).click()
    expect(page.get_by_role("heading", name="My documents", exact=True)).to_be_visible()
    expect(page.get_by_text("No documents yet.")).to_be_visible()
    shot(page, folder, "documents-01-empty")
    mark_loaded(page)
    page.evaluate(RECORD_STATUSES)


def upload_with_the_picker(page: Page, folder: Path) -> None:
    """The PDF and a PNG that calls itself a PDF, chosen with the file input, sent with the button."""
    files: list[FilePayload] = [
        {"name": "field-notes.pdf", "mimeType": "application/pdf", "buffer": pdf_bytes(PDF_PAGES)},
        {"name": "holiday.pdf", "mimeType": "application/pdf", "buffer": PNG},
    ]
    page.get_by_label("Files to upload").set_input_files(files)
    page.get_by_role("button", name="Upload", exact=True).click()
    results = page.locator("#upload-results")
    expect(results.get_by_text("field-notes.pdf was uploaded; indexing has started.")).to_be_visible()
    refused = "holiday.pdf is not a PDF, DOCX, RTF, Markdown, text or HTML file."
    expect(results.get_by_text(refused)).to_be_visible()
    expect(row(page, "field-notes.pdf")).to_have_count(1)
    expect(row(page, "holiday.pdf")).to_have_count(0)
    shot(page, folder, "documents-02-uploaded")


def upload_by_dropping(page: Page, folder: Path) -> None:
    files = [
        {
            "name": "mixture-of-tokens.docx",
            "type": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "data": base64.b64encode(docx_file()).decode(),
        }
    ]
    page.evaluate(DROP_FILES, [".dropzone", files])
    expect(page.locator("#upload-results").get_by_text("mixture-of-tokens.docx was uploaded")).to_be_visible()
    expect(page.locator("#document-list tbody tr")).to_have_count(2)


def watch_them_become_ready(page: Page, folder: Path) -> None:
    for name in ("field-notes.pdf", "mixture-of-tokens.docx"):
        expect(row(page, name).locator(".status")).to_have_text("Ready", timeout=INDEX_TIMEOUT)
    assert_not_reloaded(page)
    seen = page.evaluate("window.__statuses")
    assert any(re.search("Waiting|Parsing|Indexing", state) for state in seen), seen
    assert seen[-1] == "Ready|Ready", seen
    pdf = row(page, "field-notes.pdf").locator("td")
    expect(pdf.nth(1)).to_have_text("PDF")
    expect(pdf.nth(3)).to_have_text("3")  # pages
    expect(row(page, "mixture-of-tokens.docx").locator("td").nth(1)).to_have_text("DOCX")
    # Polling stopped once everything settled.
    expect(page.locator("#document-list[hx-trigger]")).to_have_count(0)
    shot(page, folder, "documents-03-ready")


def search_by_question(page: Page, folder: Path) -> None:
    page.get_by_label("Question").fill("Where do quokkas live?")
    page.get_by_label("Question").press("Enter")
    expect(page).to_have_url(re.compile(r"/documents/search/\?q=Where"))
    first = page.locator(".passage").first
    expect(first.locator(".passage-head")).to_contain_text("field-notes.pdf")
    expect(first.locator(".passage-head")).to_contain_text("page 2")
    expect(first.locator(".passage-head")).to_contain_text(re.compile(r"score \d\.\d\d"))
    expect(first.locator("mark")).to_have_text(["Quokkas", "live"])
    shot(page, folder, "documents-04-search")

    page.get_by_label("Question").fill("How are tokens routed to experts?")
    page.get_by_role("button", name="Search").click()
    first = page.locator(".passage").first
    expect(first.locator(".passage-head")).to_contain_text("mixture-of-tokens.docx")
    expect(first.locator("mark", has_text="routes")).to_have_count(1)
    shot(page, folder, "documents-05-search-docx")


def open_and_delete(page: Page, folder: Path) -> str:
    page.get_by_role("link", name="My documents", exact=True).click()
    page.get_by_role("link", name="field-notes.pdf", exact=True).click()
    expect(page.get_by_role("heading", name="field-notes.pdf")).to_be_visible()
    expect(page.locator("#document-status .status")).to_have_text("Ready")
    expect(page.locator(".passage").first).to_contain_text("page 1")
    shot(page, folder, "documents-06-detail")
    detail = page.url

    page.get_by_role("link", name="My documents", exact=True).click()
    page.get_by_role("link", name="Delete mixture-of-tokens.docx").click()
    expect(page.get_by_role("heading", name="Delete mixture-of-tokens.docx?")).to_be_visible()
    shot(page, folder, "documents-07-confirm-delete")
    page.get_by_role("button", name="Delete it").click()
    deleted = "mixture-of-tokens.docx was deleted, with its file and its passages."
    expect(page.get_by_text(deleted)).to_be_visible()
    expect(page.locator("#document-list tbody tr")).to_have_count(1)
    return detail


def stranger_sees_nothing(bob: Page, alice_detail: str, folder: Path) -> None:
    sign_up(bob, "bob")
    submit_sign_up(bob, "bob")
    bob.goto("/documents/")
    expect(bob.get_by_text("No documents yet.")).to_be_visible()
    expect(bob.get_by_text("field-notes.pdf")).to_have_count(0)
    shot(bob, folder, "documents-08-bob-empty")
    bob.goto("/documents/search/?q=Where+do+quokkas+live%3F")
    expect(bob.get_by_role("heading", name="No documents yet")).to_be_visible()
    expect(bob.locator(".passage")).to_have_count(0)
    expect(bob.get_by_text("Rottnest")).to_have_count(0)
    shot(bob, folder, "documents-09-bob-search")
    for path in ("", "status/", "file/", "delete/"):
        assert bob.request.get(f"{alice_detail}{path}").status == 404, path
    response = bob.goto(alice_detail)
    assert response and response.status == 404


# --- Test -------------------------------------------------------------------------------------------


def test_upload_index_live_search_and_privacy(browser: Browser, site: str, artifacts: Path) -> None:
    alice = new_context(browser, site).new_page()
    sign_up(alice, "alice")
    submit_sign_up(alice, "alice")
    open_empty_documents(alice, artifacts)
    upload_with_the_picker(alice, artifacts)
    upload_by_dropping(alice, artifacts)
    watch_them_become_ready(alice, artifacts)
    search_by_question(alice, artifacts)
    detail = open_and_delete(alice, artifacts)
    stranger_sees_nothing(new_context(browser, site).new_page(), detail, artifacts)
