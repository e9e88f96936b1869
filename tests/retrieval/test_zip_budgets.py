"""Zips are judged by what they really inflate to, a chunk at a time (issue 26, finding 2).

The probe's two DOCX files, rebuilt here: an 800 KB one whose `[Content_Types].xml` declares 1 KB
and inflates to 800 MiB (it took the web process from 254 MB to 1,830 MB), and a 10 MB one whose
`_rels/.rels` honestly unpacks to 187 MB (ratio 19, under every declared-size rule; daphne went
to 1.7 GB). Both are refused by the upload check with "unpacks to more than …", in a child
process whose peak memory may grow by at most 100 MB and whose CPU for the check stays under 1 s.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from retrieval.parsing import ParseError, parse, sniff_kind
from retrieval.readers import zipped
from tests.retrieval.hostile_files import (
    CONTENT_TYPES,
    DOCUMENT,
    RELS,
    Member,
    content_types_bomb,
    deflated,
    honest,
    lying_zip,
)

ROOT = Path(__file__).resolve().parents[2]
MAX_GROWTH_MB = 100
MAX_CPU_SECONDS = 1.0

CHECK_IN_A_CHILD = """
import io, json, resource, sys, time
from retrieval.parsing import ParseError, sniff_kind
from tests.retrieval import hostile_files

data = getattr(hostile_files, sys.argv[1])()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.process_time()
try:
    outcome = sniff_kind(io.BytesIO(data))
except ParseError as error:
    outcome = str(error)
cpu = time.process_time() - started
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"outcome": outcome, "grown_mb": grown, "cpu_s": cpu}))
"""


@pytest.mark.parametrize("bomb", ["content_types_bomb", "relationships_bomb"])
def test_the_upload_check_refuses_a_docx_by_what_it_inflates_to_in_bounded_memory_and_cpu(bomb: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-c", CHECK_IN_A_CHILD, bomb],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-1000:]
    measured = json.loads(completed.stdout)
    assert "unpacks to more than" in measured["outcome"], measured
    assert measured["grown_mb"] < MAX_GROWTH_MB, measured
    assert measured["cpu_s"] < MAX_CPU_SECONDS, measured


@pytest.fixture(scope="module")
def lying_docx() -> bytes:
    return content_types_bomb()


def test_the_worker_refuses_it_too_with_the_same_words(lying_docx: bytes) -> None:
    with pytest.raises(ParseError, match=r"unpacks to more than 64 MB \(a zip bomb\?\)"):
        parse(lying_docx, filename="report.docx")


def test_a_member_declaring_less_than_it_holds_is_cut_at_the_cap_not_at_its_word() -> None:
    blank = b" " * zipped.CHUNK
    archive = lying_zip([Member("part.xml", deflated([blank] * 40), declared=10)])
    with zipfile.ZipFile(io.BytesIO(archive)) as opened:
        assert len(zipped.read(opened, "part.xml", limit=40 * zipped.CHUNK)) == 40 * zipped.CHUNK
        with pytest.raises(zipped.TooLarge, match="more than 2 MB"):
            zipped.read(opened, "part.xml", limit=2 * 2**20)


def test_a_good_docx_built_by_hand_still_reads() -> None:
    good = lying_zip(
        [
            honest("[Content_Types].xml", CONTENT_TYPES),
            honest("_rels/.rels", RELS),
            honest("word/document.xml", DOCUMENT),
        ]
    )
    assert sniff_kind(io.BytesIO(good)) == "docx"
    assert parse(good, filename="good.docx").text == "Quokkas live on Rottnest Island."


def test_a_truncated_member_is_an_incomplete_docx() -> None:
    """Refused, and said to be cut short (issue 28: not "not a PDF, DOCX…")."""
    good = honest("word/document.xml", DOCUMENT * 50)
    cut = Member(good.name, good.raw[: len(good.raw) // 2], good.declared)
    archive = lying_zip([honest("[Content_Types].xml", CONTENT_TYPES), honest("_rels/.rels", RELS), cut])
    with pytest.raises(ParseError, match="the DOCX file is incomplete"):
        sniff_kind(io.BytesIO(archive))
