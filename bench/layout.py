"""pdfminer's layout parameters on justified and two-column pages: which keep lines together.

    nice -n 10 .venv/bin/python bench/layout.py

For each fixture in tests/data/documents/layout (made by its make.py) and each parameter set,
read as MindSearch's PDF reader reads it (`retrieval.readers.pdf`, pdfminer only): text blocks,
blocks of one or two words (a justified line come apart), and the share of the fixture's
sentences found whole in the text. Prints JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import argument_parser, print_report  # noqa: E402
from retrieval.readers import pdf  # noqa: E402

FOLDER = ROOT / "tests" / "data" / "documents" / "layout"
VARIANTS: dict[str, pdf.LayoutParams] = {
    "pdfminer defaults": {},
    "char_margin 3": {"char_margin": 3.0},
    "char_margin 4": {"char_margin": 4.0},
    "char_margin 6": {"char_margin": 6.0},
    "word_margin 0.3": {"word_margin": 0.3},
    "line_margin 0.3": {"line_margin": 0.3},
}


def measure(data: bytes, sentences: list[str]) -> dict[str, float]:
    pages, _title, _error, _complete = pdf._pdfminer_pages(data)
    blocks = [block.text for page in pages for block in page.blocks]
    text = " ".join(" ".join(pdf._page_text(page) for page in pages).split())
    whole = sum(1 for sentence in sentences if " ".join(sentence.split()) in text)
    return {
        "blocks": len(blocks),
        "short_blocks": sum(1 for block in blocks if len(block.split()) <= 2),
        "sentences_whole": round(whole / len(sentences), 3),
    }


def main() -> None:
    argument_parser(__doc__).parse_args()
    chosen = pdf.LAPARAMS.copy()
    report: dict[str, object] = {"chosen": chosen}
    for path in sorted(FOLDER.glob("*.pdf")):
        sentences = path.with_suffix(".sentences").read_text(encoding="utf-8").splitlines()
        results = {}
        for name, parameters in VARIANTS.items():
            pdf.LAPARAMS = parameters
            results[name] = measure(path.read_bytes(), sentences)
        report[path.name] = results
    pdf.LAPARAMS = chosen
    print_report(report, ok=True)


if __name__ == "__main__":
    main()
