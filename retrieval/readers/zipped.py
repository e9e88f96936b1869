"""Zip members inflated under a hard cap on the bytes actually produced, never the declared size.

A member's declared size is the sender's word: `ZipFile.read` hands the whole compressed member to
zlib in one call, so a part that declares 1 KB and inflates to 800 MiB is inflated whole before it
is cut to 1 KB (issue 26). Here each member's raw bytes are read from its local header on and
inflated a chunk at a time, counting what comes out: past `MEMBER_MAX_BYTES` in one member, past
`TOTAL_MAX_BYTES` in all, or past `MAX_RATIO` times the archive's size (once over
`RATIO_FROM_BYTES`), the archive is refused with `TooLarge`, whose message is for the user. Memory
held is one chunk at a time for `check`, at most the cap for `read`. Only stored and deflated
members are read (all that Office, OpenDocument and EPUB packages use); encrypted ones are not.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Iterator

MEMBER_MAX_BYTES = 64 * 1024 * 1024
TOTAL_MAX_BYTES = 200 * 1024 * 1024
MAX_RATIO = 100
# Small archives can compress very well without being bombs; the ratio is judged above this.
RATIO_FROM_BYTES = 10 * 1024 * 1024
CHUNK = 64 * 1024
LOCAL_HEADER = struct.Struct("<4s22xHH")
LOCAL_SIGNATURE = b"PK\x03\x04"


class TooLarge(Exception):
    """The archive unpacks to more than a cap allows; the message says which, for the user."""


class Unsupported(Exception):
    """A member is encrypted or compressed in a way not read here."""


def check(archive: zipfile.ZipFile, packed_bytes: int) -> None:
    """Inflate every member (discarding the bytes) under the per-member, total and ratio caps."""
    total = 0
    for info in archive.infolist():
        for piece in inflate(archive, info, MEMBER_MAX_BYTES):
            total += len(piece)
            if total > TOTAL_MAX_BYTES:
                raise TooLarge(f"the file unpacks to more than {TOTAL_MAX_BYTES // 2**20} MB")
            if total > RATIO_FROM_BYTES and total > MAX_RATIO * max(packed_bytes, 1):
                raise TooLarge(f"the file unpacks to more than {MAX_RATIO} times its size")


def read(archive: zipfile.ZipFile, name: str, limit: int = MEMBER_MAX_BYTES) -> bytes:
    """The member called `name`, inflated, or TooLarge past `limit` bytes (KeyError if absent)."""
    return b"".join(inflate(archive, archive.getinfo(name), limit))


def inflate(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> Iterator[bytes]:
    """The member's bytes, a chunk at a time; TooLarge once more than `limit` came out."""
    if info.flag_bits & 0x1:
        raise Unsupported(f"{info.filename} is encrypted")
    produced = 0
    for piece in _pieces(archive, info):
        produced += len(piece)
        if produced > limit:
            raise TooLarge(f"a part of the file unpacks to more than {_megabytes(limit)}")
        yield piece


def _pieces(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Iterator[bytes]:
    if info.compress_type == zipfile.ZIP_STORED:
        yield from _raw(archive, info)
        return
    if info.compress_type != zipfile.ZIP_DEFLATED:
        raise Unsupported(f"{info.filename} is compressed with method {info.compress_type}")
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    for raw in _raw(archive, info):
        while raw and not inflater.eof:
            piece = inflater.decompress(raw, CHUNK)  # never more than CHUNK bytes per call
            raw = inflater.unconsumed_tail
            if piece:
                yield piece
        if inflater.eof:
            return
    raise zipfile.BadZipFile(f"{info.filename} ends before its compressed data does")


def _raw(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """The member's compressed bytes, found from its local header as zipfile finds them."""
    source = archive.fp
    if source is None:
        raise ValueError("the archive is closed")
    source.seek(info.header_offset)
    header = source.read(LOCAL_HEADER.size)
    if len(header) != LOCAL_HEADER.size:
        raise zipfile.BadZipFile("truncated local header")
    signature, name_length, extra_length = LOCAL_HEADER.unpack(header)
    if signature != LOCAL_SIGNATURE:
        raise zipfile.BadZipFile("bad local header")
    source.seek(info.header_offset + LOCAL_HEADER.size + name_length + extra_length)
    left = info.compress_size
    while left > 0:
        raw = source.read(min(CHUNK, left))
        if not raw:
            raise zipfile.BadZipFile(f"{info.filename} is truncated")
        left -= len(raw)
        yield raw


def _megabytes(limit: int) -> str:
    return f"{limit // 2**20} MB" if limit >= 2**20 else f"{limit // 1024} KB"
