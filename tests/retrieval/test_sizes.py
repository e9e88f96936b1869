"""Sizes in messages are precise enough that two different sizes never read the same."""

from __future__ import annotations

import pytest
from django.utils import translation

from retrieval.sizes import file_size, sizes_that_differ
from retrieval.uploads import UploadRejected, check_size

MB = 1024 * 1024


def plain(sizes: tuple[str, str]) -> tuple[str, str]:
    """Without the no-break spaces that keep a number with its unit (as filesizeformat does)."""
    return tuple(size.replace("\xa0", " ") for size in sizes)  # type: ignore[return-value]


def test_one_byte_over_the_limit_is_written_in_bytes():
    assert plain(sizes_that_differ(20 * MB + 1, 20 * MB)) == ("20,971,521 bytes", "20,971,520 bytes")


def test_as_many_decimals_as_it_takes():
    assert plain(sizes_that_differ(21 * MB, 20 * MB)) == ("21.0 MB", "20.0 MB")
    assert plain(sizes_that_differ(20 * MB + 50 * 1024, 20 * MB)) == ("20.04 MB", "20.00 MB")
    assert plain(sizes_that_differ(20 * MB + 2 * 1024, 20 * MB)) == ("20.001 MB", "20.000 MB")
    assert plain(sizes_that_differ(3 * 1024**3, 2 * 1024**3)) == ("3.0 GB", "2.0 GB")
    assert plain(sizes_that_differ(500, 200)) == ("500 bytes", "200 bytes")


def test_file_size_reads_like_django_filesizeformat():
    assert file_size(1) == "1\xa0byte"
    assert file_size(1536) == "1.5\xa0KB"
    assert file_size(20 * MB) == "20.0\xa0MB"


@pytest.mark.django_db
def test_the_upload_limit_message_tells_the_sizes_apart(settings):
    settings.UPLOAD_MAX_BYTES = 20 * MB
    with pytest.raises(UploadRejected) as rejected:
        check_size("report.pdf", 20 * MB + 1)
    assert (
        str(rejected.value) == "report.pdf is 20,971,521\xa0bytes; files may be at most 20,971,520\xa0bytes."
    )


def test_sizes_in_russian():
    with translation.override("ru"):
        first, second = sizes_that_differ(20 * MB + 50 * 1024, 20 * MB)
    assert first.endswith("МБ") and first != second
