"""How well real files are read: each file through the upload check and the worker's parser.

    nice -n 10 .venv/bin/python bench/documents.py [--folder tests/data/documents] [--ocr off]

Every file NAME.EXT in the folder (and its subfolders) that has its known text beside it in
NAME.txt is checked as an upload (`parsing.sniff_kind`, what the documents page and the API call)
and read as the worker reads it (`parsing.parse`, child process and all). Per file: accepted or
refused (with the message), seconds, characters, word recall (share of the known text's words
found, counted with repeats), word precision (share of the extracted words that are in the known
text: running headers or garbage lower it) and order similarity (difflib's ratio over the two
word sequences: columns read in the wrong order lower it). The summary gives the minimum recall
among the files read and lists the refused ones. `--ocr off` hides tesseract from the parser, to
measure what a machine without OCR says. Prints JSON.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path
from typing import TypedDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import argument_parser  # noqa: E402
from retrieval.parsing import ParseError, parse, sniff_kind  # noqa: E402

DEFAULT_FOLDER = ROOT / "tests" / "data" / "documents"
WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return WORD.findall(unicodedata.normalize("NFKC", text).lower())


class Measured(TypedDict, total=False):
    """One file's row: what it is, whether it was read, and how much of the known text came back."""

    file: str
    bytes: int
    kind: str
    accepted: bool
    message: str
    seconds: float
    characters: int
    pages: int
    word_recall: float
    word_precision: float
    order_similarity: float


def measure(path: Path, known: str) -> Measured:
    data = path.read_bytes()
    row: Measured = {"file": path.name, "bytes": len(data)}
    started = time.perf_counter()
    try:
        with path.open("rb") as handle:
            row["kind"] = sniff_kind(handle)
        parsed = parse(data, filename=path.name)
    except ParseError as error:
        row |= {"accepted": False, "message": str(error), "seconds": round(time.perf_counter() - started, 2)}
        return row
    row["seconds"] = round(time.perf_counter() - started, 2)
    expected, found = words(known), words(parsed.text)
    common = sum((Counter(expected) & Counter(found)).values())
    row |= {
        "accepted": True,
        "characters": len(parsed.text),
        "pages": len(parsed.pages),
        "word_recall": round(common / max(1, len(expected)), 3),
        "word_precision": round(common / max(1, len(found)), 3),
        "order_similarity": round(difflib.SequenceMatcher(None, expected, found, autojunk=False).ratio(), 3),
    }
    return row


def main() -> None:
    args = parse_args()
    if args.ocr == "off":
        os.environ["MINDSEARCH_TESSERACT"] = "tesseract-hidden-by-bench"
    files = sorted(
        path
        for path in args.folder.rglob("*")
        if path.suffix not in (".txt", ".py", ".md") and path.with_suffix(".txt").exists()
    )
    rows = [measure(path, path.with_suffix(".txt").read_text(encoding="utf-8")) for path in files]
    read = [row for row in rows if row["accepted"]]
    summary = {
        "files": len(rows),
        "read": len(read),
        "refused": {row["file"]: row["message"] for row in rows if not row["accepted"]},
        "min_word_recall": min((row["word_recall"] for row in read), default=None),
        "min_order_similarity": min((row["order_similarity"] for row in read), default=None),
        "total_seconds": round(sum(row["seconds"] for row in rows), 2),
    }
    print(
        json.dumps({"folder": str(args.folder), "ocr": args.ocr, "files": rows, "summary": summary}, indent=2)
    )


def parse_args() -> argparse.Namespace:
    parser = argument_parser(__doc__)
    parser.add_argument("--folder", type=Path, default=DEFAULT_FOLDER, help="files with NAME.txt known texts")
    parser.add_argument(
        "--ocr", choices=["on", "off"], default="on", help="off: run as if tesseract were missing"
    )
    return parser.parse_args()


if __name__ == "__main__":
    main()
