"""File sizes in messages, precise enough that two different sizes never read the same.

Django's filesizeformat rounds to one decimal: a file one byte over a 20 MB limit reads
"20.0 MB; at most 20.0 MB". `sizes_that_differ` adds decimals until the two differ, and falls
back to exact byte counts.
"""

from __future__ import annotations

from django.utils import formats
from django.utils.html import avoid_wrapping
from django.utils.translation import gettext, ngettext

UNITS = ("KB", "MB", "GB", "TB")
MAX_DECIMALS = 3


def file_size(size: int, decimals: int = 1) -> str:
    """Like filesizeformat (1024-based, the reader's number format, a no-break space before the
    unit), with `decimals` decimals."""
    if size < 1024:
        return avoid_wrapping(ngettext("%(size)s byte", "%(size)s bytes", size) % {"size": size})
    power = 1
    while power < len(UNITS) and size >= 1024 ** (power + 1):
        power += 1
    value = formats.number_format(size / 1024**power, decimals)
    return avoid_wrapping(_unit(UNITS[power - 1]) % value)


def exact_size(size: int) -> str:
    grouped = formats.number_format(size, 0, force_grouping=True)
    return avoid_wrapping(ngettext("%(size)s byte", "%(size)s bytes", size) % {"size": grouped})


def sizes_that_differ(size: int, other: int) -> tuple[str, str]:
    """`size` and `other` written alike, with as many decimals as it takes to tell them apart
    (up to 3), else in bytes."""
    if size == other:
        return file_size(size), file_size(other)
    for decimals in range(1, MAX_DECIMALS + 1):
        first, second = file_size(size, decimals), file_size(other, decimals)
        if first != second:
            return first, second
    return exact_size(size), exact_size(other)


def _unit(unit: str) -> str:
    return {
        "KB": gettext("%s KB"),
        "MB": gettext("%s MB"),
        "GB": gettext("%s GB"),
        "TB": gettext("%s TB"),
    }[unit]
