"""A question's picture is decoded only when that is cheap, and keeps no comment (issue 26,
finding 4 and point 10).

A 436 KB progressive JPEG cost 30 s of CPU in the request: libjpeg makes one pass over every
block per scan, and a flat picture's AC scans are 14 bytes each, so 31,000 of them fit in the
file. Here a 16 MP flat picture with 6,000 copies of such a scan (about 180 KB) is prepared in a
child process capped at 2 s of CPU: refused undecoded now, killed by the cap before. An ordinary
progressive JPEG still goes through, and comments (JPEG COM, GIF comment) do not.
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from research import images

ROOT = Path(__file__).resolve().parents[2]
CPU_SECONDS = 2
SECRET = b"GPS 55.7558 37.6173 owner@example.org"


def progressive(size: tuple[int, int], colour: tuple[int, int, int] = (120, 130, 140)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "JPEG", progressive=True, quality=90)
    return out.getvalue()


def many_scans(copies: int = 6000, size: tuple[int, int] = (4000, 4000)) -> bytes:
    """A flat progressive JPEG with its smallest scan repeated `copies` times before the end."""
    data = progressive(size)
    scans = []
    at = 2
    while data[at + 1] != 0xD9:
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        end = _scan_end(data, at + 2 + length) if data[at + 1] == 0xDA else at + 2 + length
        if data[at + 1] == 0xDA:
            scans.append(data[at:end])
        at = end
    smallest = min(scans, key=len)
    return data[:-2] + smallest * copies + b"\xff\xd9"


def _scan_end(data: bytes, at: int) -> int:
    """The test's own reading of where a scan's coded data ends (the code under test has one too)."""
    while data[at] != 0xFF or data[at + 1] == 0 or 0xD0 <= data[at + 1] <= 0xD7:
        at += 1
    return at


def test_a_jpeg_of_thousands_of_scans_is_refused_within_a_cpu_budget() -> None:
    program = textwrap.dedent(f"""
        import resource
        import django
        django.setup()
        from research import images
        from tests.research.test_image_budgets import many_scans
        data = many_scans()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cap = int(usage.ru_utime + usage.ru_stime) + 1 + {CPU_SECONDS}  # counted from the start
        resource.setrlimit(resource.RLIMIT_CPU, (cap, cap))
        try:
            images.prepare(data)
            print("decoded")
        except images.ImageRejected as rejected:
            print(rejected.message)
    """)
    completed = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "mindsearch.settings"},
    )
    assert completed.returncode == 0, completed.stderr[-1000:]
    assert "passes, too many to decode" in completed.stdout, completed.stdout


def test_scans_are_counted_from_the_markers() -> None:
    assert images.jpeg_scans(progressive((64, 64))) == 10
    assert images.jpeg_scans(many_scans(copies=50, size=(64, 64))) == 60
    baseline = io.BytesIO()
    Image.new("RGB", (64, 64)).save(baseline, "JPEG")
    assert images.jpeg_scans(baseline.getvalue()) == 1


def test_an_ordinary_progressive_picture_is_prepared() -> None:
    prepared = images.prepare(progressive((1200, 800), (10, 200, 30)))
    assert (prepared.width, prepared.height, prepared.content_type) == (1200, 800, "image/jpeg")


@pytest.mark.parametrize("kind", ["JPEG", "GIF"])
def test_a_comment_does_not_survive_re_encoding(kind: str) -> None:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(out, kind, comment=SECRET)
    assert SECRET in out.getvalue()
    prepared = images.prepare(out.getvalue())
    assert SECRET not in prepared.data
    assert "comment" not in Image.open(io.BytesIO(prepared.data)).info


@pytest.mark.usefixtures("web_search_configured")
@pytest.mark.django_db
def test_the_active_topic_limit_is_checked_before_the_picture_is_decoded(alice: Any, settings: Any) -> None:
    """A damaged picture tells the order: refused for the limit (429), not for the picture (400)."""
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import Client

    from research.models import Topic

    settings.RESEARCH_MAX_ACTIVE_TOPICS = 1
    Topic.objects.create(owner=alice, question="How do tides work?", status=Topic.Status.RUNNING)
    client = Client()
    client.force_login(alice)
    damaged = b"\xff\xd8\xff\xe0" + b"\x00" * 64
    form = {"question": "What is in this picture?", "sources": "web", "mode": "quick", "time_range": ""}
    page = client.post("/topics/new/", {**form, "image": SimpleUploadedFile("a.jpg", damaged)})
    assert page.status_code == 429 and "already have 1 topic" in page.content.decode()
    payload = {**form, "image": base64.b64encode(damaged).decode()}
    api = client.post("/api/topics", payload, content_type="application/json")
    assert api.status_code == 429, api.content
    assert Topic.objects.filter(owner=alice).count() == 1
