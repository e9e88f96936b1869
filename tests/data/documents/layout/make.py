"""Make the layout fixtures here (run by hand, not by the tests):

    pip install --target /tmp/tools fpdf2==2.8.9
    PYTHONPATH=/tmp/tools .venv/bin/python tests/data/documents/layout/make.py

justified-ru.pdf: one column of justified Russian at 12 pt (a thesis's page: wide word gaps).
two-column-en.pdf: two justified columns of English at 9 pt, 8 mm apart (a conference paper's).
Both are sentences of frequent words (wordfreq's lists) written here; each NAME.sentences holds
them, one a line. Font: Debian's DejaVu Serif (free licence).
"""

from __future__ import annotations

import random
from pathlib import Path

import wordfreq
from fpdf import FPDF

HERE = Path(__file__).resolve().parent
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"


def sentences(rng: random.Random, language: str, count: int) -> list[str]:
    vocabulary = [word for word in wordfreq.top_n_list(language, 4000) if word.isalpha() and len(word) > 1]
    return [
        " ".join(rng.choice(vocabulary) for _ in range(rng.randint(8, 22))).capitalize() + "."
        for _ in range(count)
    ]


def justified_russian(rng: random.Random) -> None:
    text = sentences(rng, "ru", 400)
    document = FPDF()
    document.add_font("D", "", FONT)
    document.set_font("D", size=12)
    document.set_margins(25, 20, 25)
    document.add_page()
    for first in range(0, len(text), 6):
        paragraph = "    " + " ".join(text[first : first + 6])
        document.multi_cell(0, 6, paragraph, align="J", new_x="LMARGIN", new_y="NEXT")
        document.ln(2)
    document.output(str(HERE / "justified-ru.pdf"))
    (HERE / "justified-ru.sentences").write_text("\n".join(text), encoding="utf-8")


def two_columns(rng: random.Random) -> None:
    text = sentences(rng, "en", 500)
    document = FPDF()
    document.add_font("D", "", FONT)
    document.set_font("D", size=9)
    document.set_auto_page_break(False)
    width, gap, top, bottom, leading = 85, 8, 20, 277, 4.2
    document.add_page()
    column, y = 0, float(top)
    for first in range(0, len(text), 5):
        lines = document.multi_cell(
            width, leading, " ".join(text[first : first + 5]), align="J", dry_run=True, output="LINES"
        )
        for line in lines:
            if y + leading > bottom:
                column, y = column + 1, float(top)
                if column == 2:
                    document.add_page()
                    column = 0
            document.set_xy(15 + column * (width + gap), y)
            align = "L" if line is lines[-1] else "J"
            document.multi_cell(width, leading, line, align=align, new_x="LMARGIN", new_y="NEXT")
            y += leading
        y += 2
    document.output(str(HERE / "two-column-en.pdf"))
    (HERE / "two-column-en.sentences").write_text("\n".join(text), encoding="utf-8")


if __name__ == "__main__":
    generator = random.Random(3)
    justified_russian(generator)
    two_columns(generator)
