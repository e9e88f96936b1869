"""PDF streams inflated under a cap (issue 26): pdfminer inflates each stream whole, with no limit.

pdfminer decodes a stream's filters with `zlib.decompress`, its own LZW and run-length decoders,
each of which returns everything at once: a 20 MB PDF of FlateDecode bombs reached 1.5 GB in the
parser's child before its address-space cap stopped it. `start()` gives pdfminer's stream decoder
(the module globals `zlib`, `lzwdecode` and `rldecode` of `pdfminer.pdftypes`, which it looks up
at each call) versions that stop at `STREAM_MAX_BYTES` per stream and `DOCUMENT_MAX_BYTES` for the
whole file, raising `StreamTooLarge`; pdfminer swallows some errors, so `check()` raises it again
after the pages are read. pdfium (C, no such hook) only reads what pdfminer could not, inside the
same child's memory cap and timeout (`retrieval.parsing`).
"""

from __future__ import annotations

import io
import types
import zlib
from typing import Any

STREAM_MAX_BYTES = 64 * 1024 * 1024
DOCUMENT_MAX_BYTES = 512 * 1024 * 1024


class StreamTooLarge(Exception):
    """A stream, or all of them, inflate past the cap; the message is for the user."""


class _Budget:
    inflated = 0
    exceeded = ""


def start() -> None:
    """A new document: nothing inflated yet, and pdfminer's decoders capped."""
    _Budget.inflated, _Budget.exceeded = 0, ""
    from pdfminer import pdftypes

    pdftypes.zlib = CAPPED_ZLIB  # type: ignore[assignment]
    pdftypes.lzwdecode = _lzwdecode
    pdftypes.rldecode = _rldecode


def check() -> None:
    """StreamTooLarge if any stream went over a cap, even where pdfminer swallowed the error."""
    if _Budget.exceeded:
        raise StreamTooLarge(_Budget.exceeded)


def _spend(stream_bytes: int, new_bytes: int) -> None:
    _Budget.inflated += new_bytes
    if stream_bytes > STREAM_MAX_BYTES:
        _Budget.exceeded = f"a stream in the PDF unpacks to more than {STREAM_MAX_BYTES // 2**20} MB"
    elif _Budget.inflated > DOCUMENT_MAX_BYTES:
        _Budget.exceeded = f"the PDF's streams unpack to more than {DOCUMENT_MAX_BYTES // 2**20} MB"
    check()


def _decompress(data: bytes, wbits: int = zlib.MAX_WBITS, bufsize: int = 0) -> bytes:
    check()
    inflater = zlib.decompressobj(wbits)
    out = inflater.decompress(data, STREAM_MAX_BYTES + 1)
    _spend(len(out), len(out))
    if not inflater.eof:  # as zlib.decompress says; pdfminer then reads it as a damaged stream
        raise zlib.error("Error -5 while decompressing data: incomplete or truncated stream")
    return out


class _Inflater:
    """zlib's decompress object for pdfminer's reading of damaged streams, counting its output."""

    def __init__(self, *args: Any) -> None:
        self._inner = zlib.decompressobj(*args)
        self._produced = 0

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        check()
        room = STREAM_MAX_BYTES + 1 - self._produced
        out = self._inner.decompress(data, min(max_length, room) if max_length else room)
        self._produced += len(out)
        _spend(self._produced, len(out))
        return out

    @property
    def eof(self) -> bool:
        return self._inner.eof


CAPPED_ZLIB = types.SimpleNamespace(
    decompress=_decompress, decompressobj=_Inflater, error=zlib.error, MAX_WBITS=zlib.MAX_WBITS
)


def _lzwdecode(data: bytes) -> bytes:
    from pdfminer.lzw import LZWDecoder

    check()
    pieces, produced = [], 0
    for piece in LZWDecoder(io.BytesIO(data)).run():
        produced += len(piece)
        if produced > STREAM_MAX_BYTES:
            _spend(produced, 0)
        pieces.append(piece)
    _spend(produced, produced)
    return b"".join(pieces)


def _rldecode(data: bytes) -> bytes:
    """Run-length data, measured first (one step per run) and decoded only when it fits."""
    from pdfminer.runlength import rldecode

    check()
    produced, at = 0, 0
    while at < len(data) and data[at] != 128:
        length = data[at]
        produced += length + 1 if length < 128 else 257 - length
        at += length + 2 if length < 128 else 2
    _spend(produced, produced)
    return rldecode(data)
