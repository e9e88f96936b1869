"""Accepting uploads: limits, the type by content, the same file twice, storing and deleting."""

from __future__ import annotations

import hashlib
import stat

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile, TemporaryUploadedFile
from django_q.models import OrmQ

from retrieval.ingest import ingest
from retrieval.models import Chunk, KeywordStats, TermStat, UploadedDocument
from retrieval.parsing import SNIFF_BYTES
from retrieval.search import keyword_search
from retrieval.uploads import (
    UploadRejected,
    accept_upload,
    check_file_count,
    delete_document,
    display_name,
    index_again,
)
from tests.retrieval.test_parsing import DOCUMENTS, docx_bytes, known_text, pdf_bytes, zip_bytes

NOTES = b"# Quokkas\n\nQuokkas live on Rottnest Island and smile at visitors.\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
HTML = b"<!doctype html><html><head><title>Sign in</title></head><body><p>Please sign in.</p></body></html>"


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def upload_file(name: str, data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/octet-stream")


def accept(owner, name: str, data: bytes, on_commit) -> tuple[UploadedDocument, bool]:
    with on_commit(execute=True):
        return accept_upload(owner, upload_file(name, data))


def rejection(owner, name: str, data: bytes) -> str:
    with pytest.raises(UploadRejected) as raised:
        accept_upload(owner, upload_file(name, data))
    return raised.value.message


def queued_ids() -> list[int]:
    # Indexing goes through the fair queue: mindsearch.fairq.run("files", owner, func, id).
    tasks = [task.args() for task in OrmQ.objects.all() if task.func() == "mindsearch.fairq.run"]
    return [args[3] for args in tasks if args[2] == "retrieval.tasks.ingest_document"]


# --- Accepted ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "content_type", "label"),
    [
        ("paper.pdf", pdf_bytes(["Quokkas smile."]), "application/pdf", "PDF"),
        (
            "notes.docx",
            docx_bytes(),
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "DOCX",
        ),
        ("notes.md", NOTES, "text/markdown", "Markdown"),
        ("notes.txt", NOTES, "text/plain", "Text"),
        ("page.html", HTML, "text/html", "HTML"),
        ("README", NOTES, "text/plain", "Text"),
    ],
)
def test_each_supported_kind_is_stored_and_queued_for_indexing(
    alice, media_root, django_capture_on_commit_callbacks, name, data, content_type, label
):
    document, created = accept(alice, name, data, django_capture_on_commit_callbacks)
    assert created
    document.refresh_from_db()
    assert (document.original_name, document.content_type, document.type_label) == (name, content_type, label)
    assert document.status == UploadedDocument.Status.PENDING
    assert document.size_bytes == len(data)
    assert document.sha256 == hashlib.sha256(data).hexdigest()
    stored = media_root / "uploads" / str(alice.pk) / document.sha256
    assert document.file.name == f"uploads/{alice.pk}/{document.sha256}"
    assert stored.read_bytes() == data
    # Private on disk: only the account running MindSearch may read it.
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700
    assert queued_ids() == [document.pk]


def test_nothing_is_queued_before_the_commit(alice, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        accept_upload(alice, upload_file("notes.md", NOTES))
        assert not OrmQ.objects.exists()
    assert OrmQ.objects.count() == 1


def test_a_large_upload_streamed_to_a_temporary_file_is_accepted(alice, django_capture_on_commit_callbacks):
    """Above FILE_UPLOAD_MAX_MEMORY_SIZE Django hands over a temporary file, not bytes in memory."""
    data = NOTES + b"More about quokkas. " * 200_000
    temporary = TemporaryUploadedFile("big.md", "text/markdown", len(data), "utf-8")
    temporary.write(data)
    temporary.seek(0)
    with django_capture_on_commit_callbacks(execute=True):
        document, created = accept_upload(alice, temporary)
    temporary.close()  # as Django does at the end of a request: the file was moved, not copied
    assert created
    assert document.file.read() == data


def test_a_pdf_named_txt_is_taken_for_the_pdf_it_is(alice, django_capture_on_commit_callbacks):
    document, _ = accept(alice, "paper.txt", pdf_bytes(["Quokkas."]), django_capture_on_commit_callbacks)
    assert document.content_type == "application/pdf"


def test_text_cut_inside_a_character_at_the_sniffed_length_is_still_text(
    alice, django_capture_on_commit_callbacks
):
    data = b"a" * (SNIFF_BYTES - 1) + "ж".encode() * 100
    document, created = accept(alice, "notes.txt", data, django_capture_on_commit_callbacks)
    assert created
    assert document.content_type == "text/plain"


def test_the_name_loses_any_folder_the_browser_sent(alice, django_capture_on_commit_callbacks):
    document, _ = accept(
        alice, r"C:\Users\alice\Desktop\report.md", NOTES, django_capture_on_commit_callbacks
    )
    assert document.original_name == "report.md"
    assert display_name("../../etc/passwd") == "passwd"
    assert display_name("") == "unnamed file"


# --- The same file twice -----------------------------------------------------------------------------


def test_the_same_bytes_again_are_the_same_document_and_are_not_indexed_twice(
    alice, django_capture_on_commit_callbacks
):
    first, created = accept(alice, "notes.md", NOTES, django_capture_on_commit_callbacks)
    again, created_again = accept(alice, "renamed copy.md", NOTES, django_capture_on_commit_callbacks)
    assert created and not created_again
    assert again.pk == first.pk
    assert again.original_name == "notes.md"
    assert UploadedDocument.objects.count() == 1
    assert queued_ids() == [first.pk]


def test_another_owner_uploading_the_same_bytes_gets_a_document_of_their_own(
    alice, bob, django_capture_on_commit_callbacks
):
    alices, _ = accept(alice, "notes.md", NOTES, django_capture_on_commit_callbacks)
    bobs, created = accept(bob, "notes.md", NOTES, django_capture_on_commit_callbacks)
    assert created
    assert bobs.pk != alices.pk
    assert bobs.file.name != alices.file.name
    assert sorted(queued_ids()) == sorted([alices.pk, bobs.pk])


def test_a_file_left_by_a_rolled_back_upload_is_replaced(
    alice, media_root, django_capture_on_commit_callbacks
):
    sha256 = hashlib.sha256(NOTES).hexdigest()
    orphan = media_root / "uploads" / str(alice.pk) / sha256
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"partial")
    document, _ = accept(alice, "notes.md", NOTES, django_capture_on_commit_callbacks)
    assert document.file.name == f"uploads/{alice.pk}/{sha256}"
    assert orphan.read_bytes() == NOTES


# --- Refused -----------------------------------------------------------------------------------------


def test_a_file_over_the_size_limit_is_refused_and_nothing_is_stored(alice, settings, media_root):
    settings.UPLOAD_MAX_BYTES = 1024
    message = rejection(alice, "big.md", NOTES * 100)
    assert message == "big.md is 6.4\xa0KB; files may be at most 1.0\xa0KB."
    assert not UploadedDocument.objects.exists()
    assert not media_root.exists() or not any(media_root.rglob("*.*"))


def test_an_empty_file_is_refused(alice):
    assert rejection(alice, "empty.txt", b"") == "empty.txt is empty."


def test_the_document_limit_refuses_new_files_but_not_ones_already_there(
    alice, bob, settings, django_capture_on_commit_callbacks
):
    settings.UPLOAD_MAX_DOCUMENTS = 2
    accept(alice, "one.md", b"one", django_capture_on_commit_callbacks)
    accept(alice, "two.md", b"two", django_capture_on_commit_callbacks)
    message = rejection(alice, "three.md", b"three")
    assert message == (
        "You already have 2 documents, the most one account may keep. Delete some to upload more."
    )
    _, created = accept(alice, "one again.md", b"one", django_capture_on_commit_callbacks)
    assert not created
    # The limit is per account.
    _, created = accept(bob, "three.md", b"three", django_capture_on_commit_callbacks)
    assert created


def test_too_many_files_at_once_are_refused(settings):
    settings.UPLOAD_MAX_FILES = 3
    check_file_count(3)
    with pytest.raises(UploadRejected) as raised:
        check_file_count(4)
    assert raised.value.message == "4 files were sent at once; upload at most 3 at a time."


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("photo.pdf", PNG, "photo.pdf is not a PDF, DOCX, RTF, Markdown, text or HTML file."),
        ("photo.png", PNG, "photo.png is not a PDF, DOCX, RTF, Markdown, text or HTML file."),
        ("paper.pdf", HTML, "paper.pdf is named like a PDF file, but its content is an HTML page."),
        ("paper.pdf", NOTES, "paper.pdf is named like a PDF file, but its content is plain text."),
        ("notes.docx", pdf_bytes(["Hi."]), "notes.docx is named like a DOCX file, but its content is a PDF."),
        (
            "sheet.docx",
            zip_bytes({"xl/workbook.xml": b"<workbook/>"}),
            "sheet.docx is not a PDF, DOCX, RTF, Markdown, text or HTML file.",
        ),
        ("program.md", b"\x7fELF\x02\x01\x01" + bytes(600), None),
    ],
)
def test_a_file_that_is_not_what_it_says_or_not_supported_is_refused_by_name(alice, name, data, message):
    refused = rejection(alice, name, data)
    assert refused == (message or f"{name} is not a PDF, DOCX, RTF, Markdown, text or HTML file.")
    assert not UploadedDocument.objects.exists()


def test_a_docx_zip_bomb_is_refused_before_it_is_stored(alice):
    bomb = zip_bytes({"word/document.xml": b"<w:document/>", "word/padding.xml": b"\0" * (20 * 1024 * 1024)})
    message = rejection(alice, "bomb.docx", bomb)
    assert message == (
        "bomb.docx cannot be read: the file unpacks to more than 100 times its size (a zip bomb?)."
    )
    assert not UploadedDocument.objects.exists()


# --- Deleting and indexing again ---------------------------------------------------------------------


def test_delete_removes_the_file_the_row_its_chunks_and_their_keyword_statistics(
    alice, media_root, django_capture_on_commit_callbacks
):
    keep, _ = accept(alice, "keep.md", b"# Wallabies\n\nWallabies hop.", django_capture_on_commit_callbacks)
    document, _ = accept(alice, "notes.md", NOTES, django_capture_on_commit_callbacks)
    ingest(keep.pk)
    ingest(document.pk)
    stored = media_root / document.file.name
    assert Chunk.objects.filter(document=document).exists()
    with django_capture_on_commit_callbacks(execute=True):
        delete_document(document)
    assert not UploadedDocument.objects.filter(pk=document.pk).exists()
    assert not Chunk.objects.filter(document_id=document.pk).exists()
    assert not stored.exists()
    assert (media_root / keep.file.name).exists()
    stats = KeywordStats.objects.get(owner=alice)
    assert stats.chunk_count == Chunk.objects.filter(owner=alice).count() == keep.chunks.count()
    assert not TermStat.objects.filter(owner=alice, term="quokka").exists()


def test_a_deleted_file_can_be_uploaded_again(alice, django_capture_on_commit_callbacks):
    document, _ = accept(alice, "notes.md", NOTES, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        delete_document(document)
    again, created = accept(alice, "notes.md", NOTES, django_capture_on_commit_callbacks)
    assert created
    assert again.file.read() == NOTES


def test_a_failed_document_can_be_queued_again(alice, django_capture_on_commit_callbacks):
    document, _ = accept(alice, "notes.md", NOTES, django_capture_on_commit_callbacks)
    document.fail("the embedding endpoint is not reachable")
    OrmQ.objects.all().delete()
    with django_capture_on_commit_callbacks(execute=True):
        index_again(document)
    document.refresh_from_db()
    assert (document.status, document.error) == (UploadedDocument.Status.PENDING, "")
    assert queued_ids() == [document.pk]


# --- Real files through the upload check and the worker alike ----------------------------------------


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("cp1251.text", "text/plain"),
        ("koi8-r.text", "text/plain"),
        ("ibm866.text", "text/plain"),
        ("utf-16le-no-bom.text", "text/plain"),
        ("latin-1.text", "text/plain"),
        ("late-html-cp1251.htm", "text/html"),
        ("fragment.html", "text/html"),
        ("tracked-changes.rtf", "text/plain"),
        ("main-part-renamed.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
    ],
)
def test_a_real_file_is_accepted_by_the_check_and_read_by_the_worker(
    alice, django_capture_on_commit_callbacks, name, content_type
):
    document, _ = accept(alice, name, (DOCUMENTS / name).read_bytes(), django_capture_on_commit_callbacks)
    assert document.content_type == content_type
    ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.READY, document.error
    stored = " ".join(" ".join(document.chunks.order_by("position").values_list("text", flat=True)).split())
    last_paragraph = known_text(name).strip().split("\n\n")[-1]
    assert " ".join(last_paragraph.split()) in stored


def test_text_that_turns_legacy_after_the_first_kilobytes_is_read_not_refused_later(
    alice, django_capture_on_commit_callbacks
):
    data = b"Plain ASCII notes. " * 200 + "Отчёт о поиске по документам, часть вторая.".encode("cp1251")
    assert data[:SNIFF_BYTES].isascii()
    document, _ = accept(alice, "notes.txt", data, django_capture_on_commit_callbacks)
    ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.READY, document.error
    assert document.chunks.filter(text__contains="Отчёт о поиске").exists()


def test_text_that_turns_binary_after_the_first_kilobytes_is_refused_at_the_upload(alice):
    data = b"Plain ASCII notes. " * 200 + bytes(range(256)) * 16
    refused = "notes.txt is not a PDF, DOCX, RTF, Markdown, text or HTML file."
    assert rejection(alice, "notes.txt", data) == refused


def test_a_ligature_pdf_is_found_by_keyword_search_for_difficult(alice, django_capture_on_commit_callbacks):
    data = (DOCUMENTS / "ligatures.pdf").read_bytes()
    document, _ = accept(alice, "paper.pdf", data, django_capture_on_commit_callbacks)
    ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.READY, document.error
    for word in ("difficult", "efficient", "offline"):
        assert [passage.document_id for passage in keyword_search(alice, word)] == [document.pk], word


def test_a_markdown_file_that_starts_with_html_is_stored_as_markdown(
    alice, django_capture_on_commit_callbacks
):
    readme = (
        b'<p align="center"><img src="logo.png"></p>\n\n# Quokkas\n\n<p>They</p><p>smile</p><p>a lot.</p>\n'
    )
    document, _ = accept(alice, "README.md", readme, django_capture_on_commit_callbacks)
    assert document.content_type == "text/markdown"


def test_a_reports_chunks_carry_its_headings_and_none_its_running_header(
    alice, django_capture_on_commit_callbacks
):
    data = (DOCUMENTS / "report-headers.pdf").read_bytes()
    document, _ = accept(alice, "report.pdf", data, django_capture_on_commit_callbacks)
    ingest(document.pk)
    document.refresh_from_db()
    assert document.status == UploadedDocument.Status.READY, document.error
    chunks = list(document.chunks.order_by("position"))
    assert chunks and not [chunk.pk for chunk in chunks if "ACME" in chunk.text or "Page " in chunk.text]
    headings = {chunk.page: chunk.heading for chunk in chunks}
    assert headings[1] == "Section 1: Findings" and headings[4] == "Section 4: Методы"


def test_old_office_and_opendocument_files_are_refused_saying_what_would_help(alice):
    doc = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(4096)
    assert rejection(alice, "old.doc", doc) == (
        "old.doc cannot be read: it is an old Microsoft Office file (.doc, .xls or .ppt);"
        " save it as DOCX or PDF and upload that."
    )
    odt = zip_bytes({"mimetype": b"application/vnd.oasis.opendocument.text", "content.xml": b"<office/>"})
    assert rejection(alice, "notes.odt", odt) == (
        "notes.odt cannot be read: it is an OpenDocument file (.odt, .ods or .odp);"
        " save it as DOCX or PDF and upload that."
    )
    assert not UploadedDocument.objects.exists()
