"""pdfminer's page layout with its one quadratic step bounded (imported by `pdf` when it reads).

pdfminer orders a page's text boxes by grouping them hierarchically (`group_textboxes`): it keeps a
heap of the distance between every pair of boxes, so its memory grows with the square of their
number. An ordinary page has a few dozen boxes (at most 45 a page in the real documents measured:
a 300-page white paper, two manuals, the test files); a hostile page of 22,000 glyphs each placed on
its own has 2,230, and the heap took the parser's child from 72 MB to 575 MB (914 boxes: +154 MB
and 6.9 s of CPU). Past `MAX_GROUPED_BOXES` a page's boxes are put in reading order by their place
alone (top to bottom, left to right: pdfminer's own order when `boxes_flow` is None): linear
in memory, and the page is still read, by pdfminer, with its text and font sizes.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence

from pdfminer.converter import PDFPageAggregator
from pdfminer.layout import (
    LAParams,
    LTFigure,
    LTLayoutContainer,
    LTPage,
    LTTextBox,
    LTTextBoxVertical,
    LTTextGroup,
)
from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
from pdfminer.pdfpage import PDFPage
from pdfminer.utils import Matrix, Rect, mult_matrix

# 500 boxes make a heap of 125,000 pairs: about 45 MB and 2 s of CPU (the memory grows as the square).
MAX_GROUPED_BOXES = 500


def _bounded_groups(
    container: LTPage | LTFigure, laparams: LAParams, boxes: Sequence[LTTextBox]
) -> list[LTTextGroup]:
    if len(boxes) <= MAX_GROUPED_BOXES:
        return LTLayoutContainer.group_textboxes(container, laparams, boxes)
    # pdfminer's own order without grouping (LAParams.boxes_flow=None): vertical boxes first, right
    # to left, then the rest top to bottom, left to right. A plain group keeps the order it is given.
    in_order: list[LTTextBox] = sorted(boxes, key=_reading_key)
    return [LTTextGroup(in_order)]


def _reading_key(box: LTTextBox) -> tuple[int, float, float]:
    if isinstance(box, LTTextBoxVertical):
        return (0, -box.x1, -box.y0)
    return (1, -box.y0, box.x0)


class BoundedPage(LTPage):
    def group_textboxes(self, laparams: LAParams, boxes: Sequence[LTTextBox]) -> list[LTTextGroup]:
        return _bounded_groups(self, laparams, boxes)


class BoundedFigure(LTFigure):
    """A form XObject's contents, laid out as a page's when `all_texts` is set: bounded alike."""

    def group_textboxes(self, laparams: LAParams, boxes: Sequence[LTTextBox]) -> list[LTTextGroup]:
        return _bounded_groups(self, laparams, boxes)


class BoundedAggregator(PDFPageAggregator):
    def begin_page(self, page: PDFPage, ctm: Matrix) -> None:
        super().begin_page(page, ctm)
        self.cur_item = BoundedPage(self.pageno, self.cur_item.bbox)

    def begin_figure(self, name: str, bbox: Rect, matrix: Matrix) -> None:
        self._stack.append(self.cur_item)
        self.cur_item = BoundedFigure(name, bbox, mult_matrix(matrix, self.ctm))


def extract_pages(data: bytes, laparams: LAParams) -> Iterator[LTPage]:
    """Each page's layout, as `pdfminer.high_level.extract_pages` gives it, with grouping bounded."""
    resources = PDFResourceManager(caching=True)
    device = BoundedAggregator(resources, laparams=laparams)
    interpreter = PDFPageInterpreter(resources, device)
    for page in PDFPage.get_pages(io.BytesIO(data), caching=True):
        interpreter.process_page(page)
        yield device.get_result()
