"""An archive's `topic.json` looked over as it is inflated, before anything is parsed.

`json.loads` builds every value it reads: 64 MB of `{}` became 1.7 GB of dictionaries in a worker
before any check had looked at them. Here the inflated bytes pass, block by block, through a
scanner that builds nothing: it follows strings and nesting, counts the containers (objects and
lists) and the values of the whole file, and the rows of each top-level table, and stops at the
first count past its limit. What passes holds at most so many values, whatever its bytes say,
and only then is it parsed (research/archive/__init__.py).
"""

from __future__ import annotations

import re

from django.utils.translation import gettext as _

from research.archive.checks import ArchiveError

# What the biggest topic MindSearch writes holds, with room to spare (a row is one object, its
# JSON columns a few more): 100,000 rows of about a dozen values each.
MAX_CONTAINERS = 400_000
MAX_VALUES = 4_000_000
MAX_DEPTH = 64
# A top-level key longer than this is not one of the archive's names.
KEY_BYTES = 64
# Rows under a top-level key the archive does not know (the import ignores them).
OTHER_ROWS = 1_000
STRUCTURE = re.compile(rb'["\[\]{},]')
STRING_END = re.compile(rb'["\\]')


class Shape:
    """Fed the JSON's bytes in order; raises ArchiveError once a count passes its limit.
    `row_limits` caps the elements of the list under each top-level key."""

    def __init__(self, row_limits: dict[str, int], default_rows: int) -> None:
        self.row_limits = row_limits
        self.default_rows = default_rows
        self.depth = 0
        self.containers = 0
        self.values = 0
        self.rows: dict[str, int] = {}  # the commas between the rows of each top-level list
        self.in_string = False
        self.escaped = False
        self.key = bytearray()  # the string being read at depth 1 (a top-level key), if short
        self.last_key = ""
        self.table = ""  # the top-level key whose list is open, if any

    def feed(self, block: bytes) -> None:
        at, end = 0, len(block)
        while at < end:
            at = self._in_string(block, at) if self.in_string else self._structure(block, at)

    def _in_string(self, block: bytes, at: int) -> int:
        if self.escaped:
            self.escaped = False
            self._keep(block[at : at + 1])
            return at + 1
        found = STRING_END.search(block, at)
        if found is None:
            self._keep(block[at:])
            return len(block)
        self._keep(block[at : found.start()])
        if found.group() == b"\\":
            self.escaped = True
            return found.end()
        self.in_string = False
        if self.depth == 1:
            self.last_key = self.key.decode("utf-8", "replace") if len(self.key) <= KEY_BYTES else ""
        return found.end()

    def _keep(self, part: bytes) -> None:
        if self.depth == 1 and len(self.key) <= KEY_BYTES:
            self.key += part[: KEY_BYTES + 1]

    def _structure(self, block: bytes, at: int) -> int:
        found = STRUCTURE.search(block, at)
        if found is None:
            return len(block)
        char = found.group()
        if char == b'"':
            self.in_string = True
            self.key.clear()
        elif char in (b"{", b"["):
            self._open(char)
        elif char in (b"}", b"]"):
            self.depth -= 1
            if self.depth == 1:
                self.table = ""
        else:
            self._comma()
        return found.end()

    def _open(self, char: bytes) -> None:
        self.containers += 1
        if self.containers > MAX_CONTAINERS:
            raise ArchiveError(_("The archive holds more values than a topic archive can."))
        if self.depth == 1 and char == b"[":
            self.table = self.last_key or "?"
            self.rows[self.table] = 0
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ArchiveError(_("The archive nests its values deeper than a topic archive does."))

    def _comma(self) -> None:
        self.values += 1
        if self.values > MAX_VALUES:
            raise ArchiveError(_("The archive holds more values than a topic archive can."))
        if self.depth == 2 and self.table:
            self._row()

    def _row(self) -> None:
        """One more comma between rows: the list holds at least one row more than its commas."""
        commas = self.rows[self.table] = self.rows.get(self.table, 0) + 1
        limit = self.row_limits.get(self.table, self.default_rows)
        if commas >= limit:
            message = _("The archive holds more than %(n)d rows of %(table)s.")
            raise ArchiveError(message % {"n": limit, "table": self.table[:KEY_BYTES]})
