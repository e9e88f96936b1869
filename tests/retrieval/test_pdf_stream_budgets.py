"""PDF streams inflate under a cap (issue 26, finding 2): a compression bomb reached 1.5 GB in
the parser's child, stopped only by its 2 GiB address-space cap.

A one-page PDF whose content stream inflates to 600 MiB of spaces is refused with "a stream in
the PDF unpacks to more than 64 MB", read in a child whose peak memory grows by under 200 MB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval.parsing import ParseError, parse
from retrieval.readers import pdfstreams
from tests.retrieval.hostile_files import pdf_bomb
from tests.retrieval.test_parsing import pdf_bytes

ROOT = Path(__file__).resolve().parents[2]
MAX_GROWTH_MB = 200

READ_IN_A_CHILD = """
import json, resource
from retrieval.readers import pdf, pdfstreams
from tests.retrieval.hostile_files import pdf_bomb

data = pdf_bomb()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    read = pdf.read(data)
    outcome = "read: " + " ".join(read.pages)[:100]
except pdfstreams.StreamTooLarge as error:
    outcome = str(error)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"outcome": outcome, "grown_mb": grown}))
"""


def test_a_pdf_compression_bomb_is_refused_in_bounded_memory() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", READ_IN_A_CHILD],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-1000:]
    measured = json.loads(completed.stdout)
    assert measured["outcome"] == "a stream in the PDF unpacks to more than 64 MB", measured
    assert measured["grown_mb"] < MAX_GROWTH_MB, measured


def test_the_worker_says_so() -> None:
    with pytest.raises(ParseError, match=r"unpacks to more than 64 MB \(a compression bomb\?\)"):
        parse(pdf_bomb(100), filename="bomb.pdf")


def test_an_ordinary_compressed_pdf_still_reads() -> None:
    assert "Quokkas" in parse(pdf_bomb(1), filename="small.pdf").text
    assert "Rottnest" in parse(pdf_bytes(["Rottnest Island"]), filename="plain.pdf").text


def test_run_length_data_is_measured_before_it_is_decoded() -> None:
    pdfstreams.start()
    with pytest.raises(pdfstreams.StreamTooLarge, match="more than 64 MB"):
        pdfstreams._rldecode(bytes([129, ord(" ")]) * 600_000)  # 1.2 MB of runs, 77 MB decoded
    pdfstreams.start()
    assert pdfstreams._rldecode(bytes([2]) + b"abc" + bytes([254, ord("x"), 128])) == b"abcxxx"
