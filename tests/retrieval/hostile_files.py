"""Hostile files built on the fly (none is committed): zips whose members lie about their size.

`lying_zip` writes a zip by hand, so a member can declare any size while its deflate stream
inflates to far more; the deflate streams are made a megabyte at a time, never held inflated.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

MIB = 2**20
CONTENT_TYPES = (
    b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Override PartName="/word/document.xml" ContentType='
    b'"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)
RELS = (
    b'<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    b'<Relationship Id="rId1" Target="word/document.xml" Type='
    b'"http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"/></Relationships>'
)
DOCUMENT = (
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
    b"<w:p><w:r><w:t>Quokkas live on Rottnest Island.</w:t></w:r></w:p></w:body></w:document>"
)


@dataclass
class Member:
    name: str
    raw: bytes  # the deflate stream
    declared: int  # the size the zip says it unpacks to
    crc: int = 0


def deflated(pieces: Iterable[bytes], level: int = 9) -> bytes:
    packer = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return b"".join(packer.compress(piece) for piece in pieces) + packer.flush()


def honest(name: str, data: bytes) -> Member:
    return Member(name, deflated([data]), len(data), zlib.crc32(data))


def lying_zip(members: list[Member]) -> bytes:
    local, central = b"", b""
    for member in members:
        name = member.name.encode()
        sizes = (member.crc, len(member.raw), member.declared, len(name), 0)
        central += struct.pack(
            "<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, *sizes, 0, 0, 0, 0, len(local)
        )
        central += name
        local += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0, *sizes) + name + member.raw
    end = struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(local), 0
    )
    return local + central + end


def content_types_bomb(inflated_mib: int = 800) -> bytes:
    """The probe's 816 KB DOCX: [Content_Types].xml declares 1 KB and inflates to `inflated_mib`."""
    blank = b" " * MIB
    bomb = Member(
        "[Content_Types].xml", deflated([CONTENT_TYPES, *(blank for _ in range(inflated_mib))]), 1024
    )
    return lying_zip([bomb, honest("_rels/.rels", RELS), honest("word/document.xml", DOCUMENT)])


def relationships_bomb(inflated_mib: int = 187) -> bytes:
    """The probe's 8 MB DOCX: `_rels/.rels` honestly unpacks to `inflated_mib` of dense XML."""
    return lying_zip(
        [
            honest("[Content_Types].xml", CONTENT_TYPES),
            Member("_rels/.rels", deflated(_dense_xml(inflated_mib), level=1), inflated_mib * MIB),
            honest("word/document.xml", DOCUMENT),
        ]
    )


def _dense_xml(mib: int) -> Iterable[bytes]:
    """Relationships with random ids: about 20 times smaller deflated, not 1,000, like real XML."""
    yield RELS[: RELS.index(b"<Relationship ")]
    per_mib = MIB // len(_relationship(b"0000"))
    for _ in range(mib):
        ids = os.urandom(per_mib * 2).hex().encode()
        yield b"".join(_relationship(ids[i : i + 4]) for i in range(0, len(ids), 4))


def _relationship(rid: bytes) -> bytes:
    return (
        b'<Relationship Id="rId' + rid + b'" Target="media/image' + rid + b'.png" Type="http://schemas.'
        b'openxmlformats.org/officeDocument/2006/relationships/image"/>'
    )


def pdf_bomb(inflated_mib: int = 600) -> bytes:
    """A one-page PDF whose FlateDecode content stream shows a line of text, then inflates to
    `inflated_mib` of spaces: the PDF compression bomb that reached 1.5 GB in the parser."""
    text = b"BT /F1 12 Tf 72 720 Td (Quokkas) Tj ET\n"
    stream = deflated_zlib([text, *(b" " * MIB for _ in range(inflated_mib))])
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def deflated_zlib(pieces: Iterable[bytes]) -> bytes:
    """A zlib stream (with its header and checksum, as PDF's FlateDecode has it)."""
    packer = zlib.compressobj(9)
    return b"".join(packer.compress(piece) for piece in pieces) + packer.flush()
