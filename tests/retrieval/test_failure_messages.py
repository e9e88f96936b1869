"""Why a file failed, said specifically and in the reader's language."""

from __future__ import annotations

import io

import pytest
from django.utils import translation

from retrieval import failures
from retrieval.models import UploadedDocument
from retrieval.parsing import ParseError, parse, sniff_kind
from tests.retrieval.test_parsing import docx_bytes, fixture, without_ocr

OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def ole2_with(*streams: str) -> bytes:
    """An OLE2 (compound file) header and a directory naming `streams`, as Word writes them."""
    directory = b"".join(name.encode("utf-16-le").ljust(64, b"\x00") + b"\x00" * 64 for name in streams)
    return OLE2 + b"\x00" * 504 + directory + b"\x00" * 512


def test_a_password_protected_docx_is_called_so_not_an_old_office_file():
    encrypted = ole2_with("Root Entry", "EncryptionInfo", "EncryptedPackage", "\x06DataSpaces")
    with pytest.raises(ParseError) as raised:
        parse(encrypted, filename="secret.docx")
    assert str(raised.value) == failures.ENCRYPTED_OFFICE
    with pytest.raises(ParseError, match="password-protected"):
        sniff_kind(io.BytesIO(encrypted))
    # A real old .doc is still one.
    with pytest.raises(ParseError, match="old Microsoft Office"):
        parse(ole2_with("Root Entry", "WordDocument", "\x01CompObj"), filename="old.doc")


def test_a_truncated_docx_is_called_incomplete_not_unsupported():
    data = docx_bytes()
    for cut in (len(data) // 2, len(data) - 30):
        with pytest.raises(ParseError) as raised:
            parse(data[:cut], filename="report.docx")
        assert str(raised.value) == failures.TRUNCATED_DOCX
        with pytest.raises(ParseError, match="incomplete"):
            sniff_kind(io.BytesIO(data[:cut]))


def test_a_zip_that_is_no_docx_is_still_unsupported():
    with pytest.raises(ParseError, match=failures.UNSUPPORTED):
        parse(b"PK\x03\x04" + b"\x00" * 100, filename="x.docx")


@pytest.mark.parametrize(
    ("stored", "russian"),
    [
        (failures.PDF_PASSWORD, "PDF защищён паролем"),
        ("reading the file took longer than 60 s", "Чтение файла заняло больше 60 с"),
        (
            "the PDF's text layer is unreadable (glyph codes instead of letters) on page 9",
            "текстовый слой PDF нечитаем (коды глифов вместо букв) на странице 9",
        ),
        (
            "the PDF could not be read (not words in any language (OCR noise, a scan read sideways,"
            " or a wrong encoding)) on pages 3–4",
            "PDF не удалось прочитать (не слова ни одного языка (шум OCR, скан, прочитанный боком, или"
            " неверная кодировка)) на страницах 3–4",
        ),
        ("the PDF is damaged: Unexpected EOF", "PDF повреждён: Unexpected EOF"),
        ("a message nobody wrote", "a message nobody wrote"),
    ],
)
def test_stored_failures_are_shown_in_the_readers_language(stored, russian):
    with translation.override("ru"):
        assert failures.translate(stored) == russian
    with translation.override("en"):
        assert failures.translate(stored) == stored


def test_every_part_of_a_real_refusal_is_translated(monkeypatch):
    without_ocr(monkeypatch)
    with pytest.raises(ParseError) as raised:
        parse(fixture("glyph-codes.pdf"), filename="glyph-codes.pdf")
    with translation.override("ru"):
        shown = failures.translate(str(raised.value))
    assert shown.startswith("текстовый слой PDF нечитаем (коды глифов вместо букв) на всех страницах; OCR не")
    assert "scripts/ensure-tesseract" in shown and "is not installed" not in shown


def test_a_document_names_the_pages_it_left_out_in_the_readers_language():
    document = UploadedDocument(status=UploadedDocument.Status.READY, unreadable_pages=[3, 4, 9])
    with translation.override("ru"):
        assert document.unreadable_notice.startswith("Страницы 3–4, 9 не удалось прочитать")
    with translation.override("en"):
        assert document.unreadable_notice.startswith("Pages 3–4, 9 could not be read")
    assert UploadedDocument(unreadable_pages=[]).unreadable_notice == ""
    document.error = "the PDF is password-protected"
    with translation.override("ru"):
        assert document.error_message == "PDF защищён паролем"
