"""The documents pages: upload, the list with its live status, one document, delete, search, and
who may see what. Indexing runs for real (parser, chunker, bundled model) where a test needs it."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from mindsearch.clients import llm
from retrieval.highlight import mark_words
from retrieval.ingest import ingest
from retrieval.models import Chunk, UploadedDocument
from retrieval.search import Passage
from retrieval.views import worth_showing
from tests.retrieval.test_parsing import docx_bytes, pdf_bytes

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
QUOKKAS = (
    "# Quokka field notes\n\n"
    "Quokkas live on Rottnest Island, where they are known for their smiles. "
    "A quokka weighs between 2.5 and 5 kilograms and feeds at night on grasses and leaves.\n"
)
ROUTING = "# Routing\n\nMixture of Tokens routes every token to all experts with learned weights.\n"
RUSSIAN = "# Токены\n\nСмесь токенов направляет токены ко всем экспертам сразу, без жёсткой маршрутизации.\n"


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def as_file(name: str, data: bytes | str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data.encode() if isinstance(data, str) else data)


def upload(client: Client, *files: SimpleUploadedFile, htmx: bool = False):
    headers = {"HX-Request": "true"} if htmx else {}
    return client.post(reverse("document_upload"), {"files": list(files)}, headers=headers)


def add_document(owner: User, name: str, text: str, *, index: bool = True) -> UploadedDocument:
    """An upload through the same code the page uses; indexed in this process when `index`."""
    from retrieval.uploads import accept_upload

    document, _ = accept_upload(owner, as_file(name, text))
    if index:
        ingest(document.pk)
        document.refresh_from_db()
    return document


def page_text(response) -> str:
    return re.sub(r"[ \t\r\n]+", " ", response.content.decode())


# --- Who may see what -------------------------------------------------------------------------------


def document_urls(document: UploadedDocument) -> list[tuple[str, str]]:
    return [
        ("get", reverse("document_detail", args=[document.pk])),
        ("get", reverse("document_status", args=[document.pk])),
        ("get", reverse("document_file", args=[document.pk])),
        ("get", reverse("document_delete", args=[document.pk])),
        ("post", reverse("document_delete", args=[document.pk])),
        ("post", reverse("document_retry", args=[document.pk])),
    ]


def test_anonymous_visitors_are_sent_to_sign_in_everywhere(alice):
    document = add_document(alice, "notes.md", QUOKKAS, index=False)
    pages = [("get", reverse(name)) for name in ("document_list", "document_rows", "document_search")]
    pages += [("post", reverse("document_upload")), *document_urls(document)]
    for method, url in pages:
        response = getattr(Client(), method)(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url
    assert UploadedDocument.objects.filter(pk=document.pk).exists()


def test_another_user_gets_404_on_every_document_url_and_changes_nothing(alice, bob_client):
    document = add_document(alice, "notes.md", QUOKKAS)
    document.fail("the embedding endpoint is not reachable")
    for method, url in document_urls(document):
        assert getattr(bob_client, method)(url).status_code == 404, (method, url)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.FAILED
    assert document.chunks.exists()
    assert (document.file.storage.path(document.file.name)).endswith(document.sha256)


def test_another_user_sees_none_of_the_documents_or_their_passages(alice, bob, bob_client):
    add_document(alice, "quokka-notes.md", QUOKKAS)
    add_document(bob, "routing.md", ROUTING)
    listing = page_text(bob_client.get(reverse("document_list")))
    assert "routing.md" in listing
    assert "quokka-notes.md" not in listing
    rows = page_text(bob_client.get(reverse("document_rows")))
    assert "quokka-notes.md" not in rows
    found = page_text(bob_client.get(reverse("document_search"), {"q": "Where do quokkas live?"}))
    assert "quokka-notes.md" not in found
    assert "Rottnest" not in found


def test_the_owner_may_open_every_document_url(alice, alice_client):
    document = add_document(alice, "notes.md", QUOKKAS)
    for method, url in document_urls(document)[:4]:
        assert getattr(alice_client, method)(url).status_code == 200, url


def test_stored_files_are_not_served_by_any_url(alice, alice_client):
    document = add_document(alice, "notes.md", QUOKKAS, index=False)
    name = document.file.name
    for url in (f"/media/{name}", f"/{name}", f"/static/../media/{name}", f"/static/{name}"):
        assert alice_client.get(url).status_code == 404, url


# --- The page and uploading -------------------------------------------------------------------------


def test_empty_page_explains_itself_and_offers_a_multi_file_form(alice_client):
    response = alice_client.get(reverse("document_list"))
    text = page_text(response)
    assert response.status_code == 200
    assert "No documents yet." in text
    assert 'enctype="multipart/form-data"' in text
    assert re.search(r'<input id="upload-files" type="file" name="files" multiple', text)
    assert "up to 20.0\xa0MB each, at most 20 at a time" in text
    # RTF is read (retrieval/parsing.py), so the page and the file picker name it (issue 29).
    assert "PDF, DOCX, RTF, Markdown" in text and ".rtf," in text and "application/rtf" in text
    assert 'href="/documents/"' in text  # the nav link
    assert "hx-trigger" not in text.split('id="document-list"')[1]  # nothing to poll for


def test_several_files_at_once_each_get_their_own_result(
    alice, alice_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(
            alice_client,
            as_file("paper.pdf", pdf_bytes(["Quokkas smile."])),
            as_file("notes.docx", docx_bytes()),
            as_file("photo.pdf", PNG),
        )
    assert response.status_code == 302
    text = page_text(alice_client.get(response["Location"]))
    assert "paper.pdf was uploaded; indexing has started." in text
    assert "notes.docx was uploaded; indexing has started." in text
    assert "photo.pdf is not a PDF, DOCX, RTF, Markdown, text or HTML file." in text
    assert sorted(UploadedDocument.objects.for_user(alice).values_list("original_name", flat=True)) == [
        "notes.docx",
        "paper.pdf",
    ]


def test_htmx_upload_answers_with_the_results_and_a_refreshed_live_list(alice_client):
    response = upload(alice_client, as_file("notes.md", QUOKKAS), htmx=True)
    text = page_text(response)
    assert response.status_code == 200
    started = r'<li class="message success" id="upload-outcome-\d+">notes.md was uploaded; indexing has'
    assert re.search(started, text)
    card = text.split('id="document-list"')[1]
    assert 'hx-swap-oob="true"' in card
    assert 'hx-trigger="every 2s"' in card
    assert "notes.md" in card and "Waiting" in card
    # The quota line above the form counts the new document (issue 29: it stayed at 0).
    assert '<p class="muted" id="quota" hx-swap-oob="true">You keep 1 of at most' in text


def test_the_same_file_again_is_reported_not_added(alice, alice_client):
    upload(alice_client, as_file("notes.md", QUOKKAS))
    response = upload(alice_client, as_file("copy of notes.md", QUOKKAS), htmx=True)
    assert "copy of notes.md was already uploaded as notes.md; it was not added again." in page_text(response)
    assert UploadedDocument.objects.for_user(alice).count() == 1


def test_too_many_files_are_refused_together(alice, alice_client, settings):
    settings.UPLOAD_MAX_FILES = 2
    response = upload(alice_client, *(as_file(f"{n}.md", f"note {n}") for n in range(3)), htmx=True)
    assert "3 files were sent at once; upload at most 2 at a time." in page_text(response)
    assert not UploadedDocument.objects.exists()


def test_a_file_over_the_limit_is_named_and_the_others_still_go_in(alice, alice_client, settings):
    settings.UPLOAD_MAX_BYTES = 100
    files = [as_file("big.md", QUOKKAS), as_file("small.md", "A small note.")]
    response = upload(alice_client, *files, htmx=True)
    text = page_text(response)
    assert f"big.md is {len(QUOKKAS)}\xa0bytes; files may be at most 100\xa0bytes." in text
    assert "small.md was uploaded" in text
    assert list(UploadedDocument.objects.values_list("original_name", flat=True)) == ["small.md"]


def test_posting_no_file_asks_for_one(alice_client):
    response = upload(alice_client, htmx=True)
    assert "Choose at least one file to upload." in page_text(response)


def row_of(text: str, name: str) -> str:
    rows = re.findall(r'<tr id="document-\d+">.*?</tr>', text)
    [row] = [row for row in rows if f">{name}</a>" in row]
    return row


def test_the_list_shows_every_column_and_the_error_of_a_failed_document(alice, alice_client):
    paper = add_document(alice, "paper.pdf", pdf_bytes(["Quokkas on page one.", "Wallabies on page two."]))
    failed = add_document(alice, "broken.md", "# Broken\n\nA note.", index=False)
    failed.fail("the embedding endpoint is not reachable")
    text = page_text(alice_client.get(reverse("document_list")))
    assert 'Uploaded documents <span class="muted">(2)</span>' in text
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row_of(text, "paper.pdf"))
    assert cells[1:5] == ["PDF", f"{paper.size_bytes}\xa0bytes", "2", str(paper.chunk_count)]
    assert "Ready" in cells[5]
    created = paper.created_at
    assert cells[6] == f'<time datetime="{created.isoformat()}">{created:%Y-%m-%d %H:%M}</time>'
    broken = row_of(text, "broken.md")
    assert "Failed" in broken
    assert '<div class="errors small">the embedding endpoint is not reachable</div>' in broken


# --- Live status -------------------------------------------------------------------------------------


def test_the_list_polls_while_indexing_answers_204_while_unchanged_and_stops_when_settled(
    alice, alice_client
):
    document = add_document(alice, "notes.md", QUOKKAS, index=False)
    page = page_text(alice_client.get(reverse("document_list")))
    version = re.search(r'hx-get="/documents/rows/\?version=(\w+)" hx-trigger="every 2s"', page).group(1)
    assert "Waiting" in page
    unchanged = alice_client.get(reverse("document_rows"), {"version": version})
    assert unchanged.status_code == 204

    ingest(document.pk)
    changed = alice_client.get(reverse("document_rows"), {"version": version})
    text = page_text(changed)
    assert changed.status_code == 200
    assert "doc-status-ready" in text and "Ready" in text
    assert "hx-trigger" not in text  # everything is settled: polling stops


def test_a_missing_worker_is_said_plainly_while_documents_wait(alice, alice_client):
    add_document(alice, "notes.md", QUOKKAS, index=False)
    text = page_text(alice_client.get(reverse("document_list")))
    assert "No worker is running, so these documents wait." in text


def test_the_detail_status_block_polls_until_the_document_is_settled(alice, alice_client):
    document = add_document(alice, "notes.md", QUOKKAS, index=False)
    url = reverse("document_status", args=[document.pk])
    waiting = page_text(alice_client.get(url))
    assert f'hx-get="{url}" hx-trigger="every 2s"' in waiting
    assert "Indexing runs in the background" in waiting
    ingest(document.pk)
    ready = page_text(alice_client.get(url))
    assert "hx-trigger" not in ready
    assert re.search(r"\d+ passages?", ready)


def test_the_detail_page_shows_the_facts_and_the_first_passages_with_their_pages(alice, alice_client):
    document = add_document(alice, "paper.pdf", pdf_bytes(["Quokkas on page one.", "Wallabies on page two."]))
    text = page_text(alice_client.get(reverse("document_detail", args=[document.pk])))
    assert '<h1 id="document-title" class="question">paper.pdf</h1>' in text
    assert "2 pages" in text
    assert "page 1" in text and "Quokkas on page one." in text
    assert document.sha256 in text


# --- Failed documents, download, delete --------------------------------------------------------------


def test_a_failed_document_can_be_indexed_again(alice, alice_client, django_capture_on_commit_callbacks):
    document = add_document(alice, "notes.md", QUOKKAS, index=False)
    document.fail("the embedding endpoint is not reachable")
    detail = page_text(alice_client.get(reverse("document_detail", args=[document.pk])))
    assert "Indexing failed:</strong> the embedding endpoint is not reachable" in detail
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("document_retry", args=[document.pk]))
    assert response.status_code == 302
    document.refresh_from_db()
    assert (document.status, document.error) == (UploadedDocument.Status.PENDING, "")


def test_download_is_always_an_attachment_of_the_original_bytes(alice, alice_client):
    html = "<!doctype html><html><body><script>alert(1)</script><p>Quokkas</p></body></html>"
    document = add_document(alice, "page.html", html, index=False)
    response = alice_client.get(reverse("document_file", args=[document.pk]))
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="page.html"'
    assert response["Content-Type"] == "text/html"
    assert b"".join(response.streaming_content) == html.encode()


def test_a_stored_file_gone_from_disk_is_a_404_not_an_error(alice, alice_client, media_root):
    document = add_document(alice, "notes.md", QUOKKAS, index=False)
    (media_root / document.file.name).unlink()
    assert alice_client.get(reverse("document_file", args=[document.pk])).status_code == 404


def test_delete_asks_first_then_removes_the_file_and_the_passages(
    alice, alice_client, media_root, django_capture_on_commit_callbacks
):
    document = add_document(alice, "notes.md", QUOKKAS)
    stored = media_root / document.file.name
    url = reverse("document_delete", args=[document.pk])
    confirm = page_text(alice_client.get(url))
    assert "Delete notes.md?" in confirm
    assert f'<form method="post" action="{url}"' in confirm
    assert UploadedDocument.objects.filter(pk=document.pk).exists()

    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(url)
    assert response.status_code == 302
    assert not UploadedDocument.objects.filter(pk=document.pk).exists()
    assert not Chunk.objects.filter(document_id=document.pk).exists()
    assert not stored.exists()
    after = page_text(alice_client.get(response["Location"]))
    assert "notes.md was deleted, with its file and its passages." in after
    assert "No documents yet." in after


def test_delete_needs_the_csrf_token(alice):
    document = add_document(alice, "notes.md", QUOKKAS, index=False)
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(reverse("document_delete", args=[document.pk])).status_code == 403
    assert UploadedDocument.objects.filter(pk=document.pk).exists()


# --- Search ------------------------------------------------------------------------------------------


def test_search_ranks_passages_with_name_page_score_and_marked_word_forms(alice, alice_client):
    add_document(alice, "routing.md", ROUTING)
    add_document(alice, "quokka-notes.md", QUOKKAS)
    add_document(alice, "paper.pdf", pdf_bytes(["Introduction.", "Routing tokens to experts is learned."]))
    response = alice_client.get(reverse("document_search"), {"q": "How are tokens routed?"})
    text = page_text(response)
    assert response.status_code == 200
    first = text.split('<li class="passage">')[1]
    assert "routing.md" in first or "paper.pdf" in first
    assert re.search(r"score \d\.\d\d", first)
    # "routed" and "tokens" find "routes", "Routing", "token" and "tokens"; "How" and "are" are stop words.
    assert "<mark>routes</mark>" in text and "<mark>Routing</mark>" in text
    assert "<mark>token</mark>" in text and "<mark>tokens</mark>" in text
    assert "<mark>How</mark>" not in text
    paper = next(part for part in text.split('<li class="passage">') if "paper.pdf" in part)
    assert "page 2" in paper


def test_search_marks_russian_word_forms_as_the_keyword_index_stems_them(alice, alice_client):
    add_document(alice, "tokens_ru.md", RUSSIAN)
    text = page_text(alice_client.get(reverse("document_search"), {"q": "маршрутизация токенов"}))
    assert "<mark>токенов</mark>" in text
    assert "<mark>маршрутизации</mark>" in text
    assert "<mark>экспертам</mark>" not in text


def test_search_escapes_document_names_and_text_before_marking(alice, alice_client):
    evil_name = '<img src=x onerror="alert(1)">quokka.md'
    evil_text = "# Quokkas\n\n<script>alert('quokka')</script> Quokkas & <b>wallabies</b> smile."
    add_document(alice, evil_name, evil_text)
    response = alice_client.get(reverse("document_search"), {"q": "quokka script"})
    html = response.content.decode()
    assert "<script>alert" not in html
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;quokka.md" in html
    assert "&lt;<mark>script</mark>&gt;alert(&#x27;<mark>quokka</mark>&#x27;)" in html
    assert "<mark>Quokkas</mark> &amp; &lt;b&gt;wallabies&lt;/b&gt;" in html
    listing = alice_client.get(reverse("document_list")).content.decode()
    assert "<img src=x" not in listing


def test_search_without_ready_documents_says_why(alice, alice_client):
    empty = page_text(alice_client.get(reverse("document_search"), {"q": "quokkas"}))
    assert "No documents yet" in empty
    assert '<li class="passage">' not in empty
    add_document(alice, "notes.md", QUOKKAS, index=False)
    waiting = page_text(alice_client.get(reverse("document_search"), {"q": "quokkas"}))
    assert "Nothing is indexed yet" in waiting


def test_search_with_no_match_says_so(alice, alice_client):
    add_document(alice, "notes.md", QUOKKAS)
    text = page_text(alice_client.get(reverse("document_search"), {"q": "zyxxyzzy"}))
    # Dense search always finds a nearest passage; only a question with no usable word finds none.
    assert '<li class="passage">' in text or "Nothing in your documents matches" in text
    text = page_text(alice_client.get(reverse("document_search"), {"q": "   "}))
    assert '<li class="passage">' not in text


def test_search_falls_back_to_keywords_when_the_model_is_unavailable(
    alice, alice_client, settings, monkeypatch
):
    add_document(alice, "notes.md", QUOKKAS)
    add_document(alice, "routing.md", ROUTING)
    monkeypatch.setattr(llm, "BACKOFF_SECONDS", 0.0)
    settings.EMBEDDING_BACKEND = "openai"
    settings.AITUNNEL_BASE_URL = "http://127.0.0.1:9/v1/"  # nothing listens there
    settings.AITUNNEL_API_KEY = "sk-test"
    text = page_text(alice_client.get(reverse("document_search"), {"q": "quokkas"}))
    assert "Matching by meaning is unavailable (the embedding endpoint is not reachable" in text
    assert "<mark>Quokkas</mark>" in text
    assert "routing.md" not in text  # keyword search alone: no nearest-by-meaning filler


def test_an_unavailable_embedding_model_is_said_plainly_on_the_page(alice_client, settings):
    settings.EMBEDDING_BACKEND = "openai"
    text = page_text(alice_client.get(reverse("document_list")))
    problem = "EMBEDDING_BACKEND=openai but no LLM endpoint is configured"
    assert f"The embedding model is unavailable:</strong> {problem}" in text


def test_marking_escapes_every_piece_and_shows_markdown_headings_bold():
    text = "## Quokka <b>facts</b>\n\nA & B: quokkas smile.\n#hashtag stays"
    html = mark_words(text, lambda word: word.lower().startswith("quokka"))
    assert html == (
        "<strong><mark>Quokka</mark> &lt;b&gt;facts&lt;/b&gt;</strong>\n\n"
        "A &amp; B: <mark>quokkas</mark> smile.\n#hashtag stays"
    )


def test_passages_far_below_the_best_are_not_shown():
    def passage(score: float) -> Passage:
        return Passage(1, 1, "notes.md", None, "text", score, 1, None)

    shown = worth_showing([passage(0.9), passage(0.3), passage(0.1), passage(0.08), passage(0.0)])
    assert [item.score for item in shown] == [0.9, 0.3, 0.1]
    assert worth_showing([]) == []


def test_the_upload_message_says_when_indexing_has_finished(alice, alice_client):
    response = upload(alice_client, as_file("notes.md", QUOKKAS), htmx=True)
    document = UploadedDocument.objects.get(owner=alice)
    text = page_text(response)
    assert (
        f'<li class="message success" id="upload-outcome-{document.pk}">notes.md was uploaded; indexing'
        in text
    )
    poll = re.search(r'hx-get="(/documents/rows/\?version=\w+&amp;announced=(\d+))"', text)
    assert poll and poll.group(2) == str(document.pk)
    ingest(document.pk)
    rows = page_text(alice_client.get(poll.group(1).replace("&amp;", "&"), headers={"accept-language": "ru"}))
    message = f'<li class="message success" id="upload-outcome-{document.pk}" hx-swap-oob="true">'
    assert message + "Файл notes.md проиндексирован: 1 фрагмент, по нему уже можно искать." in rows
    assert "hx-trigger" not in rows and "announced" not in rows  # settled: told once, polling stops
    # Another user's document id announced is never told.
    other = add_document(User.objects.create_user("carol"), "carol.md", QUOKKAS)
    rows = page_text(alice_client.get(reverse("document_rows"), {"announced": f"{other.pk},x,{document.pk}"}))
    assert f"upload-outcome-{other.pk}" not in rows and f"upload-outcome-{document.pk}" in rows
