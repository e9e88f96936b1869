"""On a phone the documents table stacks (issue 29 point 7): each row a block, each cell under its
row's title named by its column (static/css/mindsearch.css, `td[data-label]::before`). Without a
cell's label a stacked row reads as numbers with no names; tests/browser/test_look.py checks the
layout at 375 px, this checks the names are there, in the reader's language."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from retrieval.models import UploadedDocument
from tests.support.code import ROOT

pytestmark = pytest.mark.django_db


def rows(page: str, table_class: str) -> list[list[str]]:
    """The cells of each body row of the table with `table_class`, as their opening tags."""
    table = page.split(f'class="{table_class}')[1].split("</table>")[0]
    body = table.split("<tbody")[1] if "<tbody" in table else table.split("</thead>")[1]
    return [re.findall(r"<td\b[^>]*>", row) for row in body.split("<tr")[1:]]


def test_every_cell_of_the_documents_table_is_named_by_its_column(alice: User, alice_client: Client) -> None:
    sha256 = hashlib.sha256(b"report").hexdigest()
    UploadedDocument.objects.create(
        owner=alice, file=f"x/{sha256}", original_name="report.pdf", sha256=sha256
    )
    alice_client.cookies["django_language"] = "ru"
    page = alice_client.get(reverse("document_list")).content.decode()
    [cells] = rows(page, "uploads")
    # The name is the row's title and Delete names itself; every other cell says its column.
    labels = [re.search(r'data-label="([^"]*)"', cell) for cell in cells[1:-1]]
    assert all(labels), cells
    head = page.split('class="uploads')[1].split("</thead>")[0]
    columns = [re.sub(r"<[^>]+>", "", th).strip() for th in re.findall(r"<th\b[^>]*>(.*?)</th>", head)]
    assert [m.group(1) for m in labels if m] == columns[1:-1]
    assert columns[1:3] == ["Тип", "Размер"]  # in the reader's language


def test_the_phone_layout_names_the_cells_it_stacks() -> None:
    css = (ROOT / "static" / "css" / "mindsearch.css").read_text()
    phone = css.split("@media (max-width: 40rem)")[1:]
    assert any("table.uploads" in block and 'content: attr(data-label) ": "' in block for block in phone)
