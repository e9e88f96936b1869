"""The picture a topic was asked with, in a topic archive: written under "image" as base64 with
the vision model's description; on import it is decoded and prepared again like any upload
(`research/images.py`: type by content, size limit, re-encoded), so an archive cannot bring in
anything but a clean picture. Archives without one import as they always did."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.utils.translation import gettext as _

from research import images
from research.archive.checks import ArchiveError
from research.models import Topic, TopicImage

KEY = "image"
TEXTS = ("text", "description", "vision_model", "error")
MAX_WORDS = 20
MAX_CHARS = 2000


def export_row(topic: Topic) -> dict[str, Any] | None:
    image = TopicImage.objects.filter(topic=topic).first()
    if image is None:
        return None
    return {
        "data": base64.b64encode(bytes(image.data)).decode(),
        "analysis": image.analysis,
        "labels": image.labels,
        "entities": image.entities,
        **{name: getattr(image, name) for name in TEXTS},
    }


def check(data: dict[str, Any]) -> dict[str, Any] | None:
    """The archive's picture, prepared again, with its description checked; None without one."""
    row = data.get(KEY)
    if row is None:
        return None
    refused = ArchiveError(_("The archive's picture is not one MindSearch accepts."))
    if not isinstance(row, dict) or not isinstance(row.get("data"), str):
        raise refused
    try:
        prepared = images.prepare(base64.b64decode(row["data"], validate=True))
    except (binascii.Error, ValueError, images.ImageRejected):
        raise refused from None
    analysis = row.get("analysis", TopicImage.Analysis.PENDING)
    words = {name: row.get(name, []) for name in ("labels", "entities")}
    texts = {name: row.get(name, "") for name in TEXTS}
    if (
        analysis not in TopicImage.Analysis.values
        or any(not isinstance(v, list) or len(v) > MAX_WORDS for v in words.values())
        or any(not isinstance(w, str) or len(w) > 200 for v in words.values() for w in v)
        or any(not isinstance(t, str) or len(t) > MAX_CHARS for t in texts.values())
    ):
        raise refused
    return {"prepared": prepared, "analysis": analysis, **words, **texts}


def create(topic: Topic, checked: dict[str, Any] | None) -> None:
    if checked is None:
        return
    images.save(topic, checked.pop("prepared"), **checked)
