"""A question's picture: accepted by its content, re-encoded without metadata, stored privately.

The type is read from the first bytes (JPEG, PNG, GIF, WebP), never from the name or the
browser's word. Pillow then decodes the pixels (with its decompression-bomb guard) and they are
written again as a new JPEG or PNG: EXIF (GPS, camera, owner), XMP, ICC comments and anything
appended after the image are left behind, and so are comments (JPEG COM, the GIF comment
extension), which Pillow would otherwise copy into the new JPEG. A picture larger than `MAX_SIDE`
is scaled down.

Decoding is bounded before it starts (issue 26: a 436 KB progressive JPEG of 31,000 tiny scans
cost 30 s of CPU, one pass over every block per scan): the pixels are read from the header, a
JPEG's scans are counted by walking its markers (linear in its bytes), and a JPEG of more than
`MAX_JPEG_SCANS` scans, or whose scans times pixels exceed `MAX_SCAN_PIXELS`, or a progressive
one over `MAX_DECODED_PIXELS` (its coefficients are held whole), is refused undecoded.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import warnings
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _
from PIL import Image, ImageOps, UnidentifiedImageError

from research.models import Topic, TopicImage

MAX_SIDE = 2048
MAX_PIXELS = 40_000_000
# Other formats are decoded whole (no DCT scaling): 16 MP RGBA is 64 MB of pixels.
MAX_DECODED_PIXELS = 16_000_000
# Encoders write 1 scan (baseline) or about 10 (progressive); each costs a pass over every block.
MAX_JPEG_SCANS = 32
MAX_SCAN_PIXELS = 200_000_000
SOS, EOI = 0xDA, 0xD9
# Markers without a length: TEM, RST0-7, SOI, EOI.
BARE_MARKERS = {0x01, *range(0xD0, 0xD8), 0xD8, EOI}
MAGIC = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
)


class ImageRejected(Exception):
    """The upload is not a picture MindSearch accepts; `message` says why, for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class PreparedImage:
    data: bytes
    content_type: str
    width: int
    height: int
    sha256: str
    original_bytes: int


def sniff(data: bytes) -> str:
    """ "JPEG", "PNG", "GIF" or "WEBP" from the first bytes; "" for anything else."""
    for magic, kind in MAGIC:
        if data.startswith(magic):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return ""


def max_bytes() -> int:
    return settings.TOPIC_IMAGE_MAX_BYTES


def prepare(data: bytes) -> PreparedImage:
    """The picture re-encoded without metadata, or ImageRejected with the reason."""
    if not data:
        raise ImageRejected(_("The picture is empty."))
    if len(data) > max_bytes():
        raise ImageRejected(
            _("The picture is %(size).1f MB; the limit is %(limit).1f MB.")
            % {"size": len(data) / 2**20, "limit": max_bytes() / 2**20}
        )
    kind = sniff(data)
    if not kind:
        raise ImageRejected(_("This file is not a JPEG, PNG, GIF or WebP picture."))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[kind]) as opened:
                check_work(kind, data, opened)
                opened.seek(0)  # an animation: its first frame
                if kind == "JPEG":  # decoded at the smallest DCT scale over MAX_SIDE: 2.3x faster (27 MP)
                    opened.draft("RGB", (MAX_SIDE, MAX_SIDE))
                # Shrunk in place as it is decoded, so one full-size buffer at most is ever held;
                # then turned as the camera meant it (a copy of the small picture).
                opened.thumbnail((MAX_SIDE, MAX_SIDE))
                image = ImageOps.exif_transpose(opened)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError,
            Image.DecompressionBombWarning) as exc:  # fmt: skip
        raise ImageRejected(_("The picture could not be read: it is damaged or not what it says.")) from exc
    image.info.clear()  # comments (JPEG COM, GIF's comment) would be written into the new file
    has_alpha = image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)
    out = io.BytesIO()
    if has_alpha:
        clean = image.convert("RGBA")
        clean.save(out, format="PNG", optimize=True)
        content_type = "image/png"
    else:
        clean = image.convert("RGB")
        clean.save(out, format="JPEG", quality=88)
        content_type = "image/jpeg"
    encoded = out.getvalue()
    return PreparedImage(
        data=encoded,
        content_type=content_type,
        width=clean.width,
        height=clean.height,
        sha256=hashlib.sha256(encoded).hexdigest(),
        original_bytes=len(data),
    )


def check_work(kind: str, data: bytes, opened: Image.Image) -> None:
    """ImageRejected unless decoding is cheap enough, judged from the header alone."""
    pixels = opened.width * opened.height
    progressive = kind == "JPEG" and bool(opened.info.get("progressive") or opened.info.get("progression"))
    if pixels > (MAX_PIXELS if kind == "JPEG" and not progressive else MAX_DECODED_PIXELS):
        raise ImageRejected(_("The picture has too many pixels."))
    if kind != "JPEG":
        return
    scans = jpeg_scans(data)
    if scans > MAX_JPEG_SCANS or scans * pixels > MAX_SCAN_PIXELS:
        raise ImageRejected(
            _("The picture is stored in %(scans)d passes, too many to decode; save it as an ordinary JPEG.")
            % {"scans": scans}
        )


def jpeg_scans(data: bytes) -> int:
    """How many scans (SOS segments) the JPEG holds, by walking its markers; linear in its size."""
    at, scans = 2, 0
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return scans  # not a marker where one must be: Pillow will call it damaged
        marker = data[at + 1]
        if marker == EOI:
            return scans
        if marker in BARE_MARKERS or marker == 0xFF:
            at += 1 if marker == 0xFF else 2  # fill bytes, or a marker without a length
            continue
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
        if marker == SOS:
            scans += 1
            at = _end_of_entropy_data(data, at)
    return scans


def _end_of_entropy_data(data: bytes, at: int) -> int:
    """Where the scan's coded data ends: the next 0xFF that is neither a stuffed 0x00 nor RST."""
    while True:
        at = data.find(b"\xff", at)
        if at < 0 or at + 1 >= len(data):
            return len(data)
        following = data[at + 1]
        if following == 0 or 0xD0 <= following <= 0xD7 or following == 0xFF:
            at += 1
            continue
        return at


def decode_base64(text: str) -> bytes:
    """An API client's picture: plain base64, or a data URL (data:image/…;base64,…)."""
    if text.startswith("data:"):
        text = text.split(",", 1)[-1]
    if len(text) > max_bytes() * 4 // 3 + 16:
        raise ImageRejected(
            _("The picture is over the limit of %(limit).1f MB.") % {"limit": max_bytes() / 2**20}
        )
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageRejected(_("The picture is not valid base64.")) from exc


def data_url(data: bytes, content_type: str) -> str:
    """The image as the chat-completions API takes it inline (an `image_url` content part)."""
    return f"data:{content_type};base64,{base64.b64encode(data).decode()}"


def save(topic: Topic, image: PreparedImage, **described: Any) -> TopicImage:
    """The topic's picture row: the prepared pixels, and what the vision model said of it when
    that is known already (an imported archive brings it along)."""
    return TopicImage.objects.create(
        topic=topic,
        data=image.data,
        content_type=image.content_type,
        width=image.width,
        height=image.height,
        sha256=image.sha256,
        original_bytes=image.original_bytes,
        **described,
    )
