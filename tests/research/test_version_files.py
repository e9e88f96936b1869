"""A later version's files and archive carry its versions and what changed (issue 31)."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User

from research import export, versions
from research.models import Report, Topic

from .test_versions import AFTER, BEFORE, SOURCES_AFTER, SOURCES_BEFORE, completed, words_only

pytestmark = pytest.mark.django_db

RU_BEFORE = (
    "# Ключевая ставка\n\nЦентральный банк сохранил ключевую ставку на уровне 16 процентов в октябре [1]. "
    "Ставка была введена в 2013 году вместо ставки рефинансирования [2]. "
    "Аналитики не ждали снижения до весны [3].\n"
)
RU_AFTER = (
    "# Ключевая ставка\n\nЦентральный банк сохранил ключевую ставку на уровне 16 процентов в октябре [1]. "
    "Ставка была введена в 2013 году вместо ставки рефинансирования [2]. "
    "Новое исследование связывает ставку с падением спроса на ипотеку на пятую часть [3].\n"
)


def two_versions(
    owner: User, before: str = BEFORE, after: str = AFTER, sources: list[dict] = SOURCES_AFTER
) -> tuple[Topic, Topic]:
    first = completed(owner, before, SOURCES_BEFORE)
    second = completed(owner, after, sources, series=first.pk, previous_version=first)
    report = second.report
    report.changes = versions.compare(first.report, report, embed=words_only)
    report.save(update_fields=["changes"])
    return first, Topic.objects.get(pk=second.pk)


def test_the_markdown_and_docx_of_a_later_version_say_what_changed(alice: User) -> None:
    first, second = two_versions(alice)
    markdown = export.report_markdown(second)
    summary, report = markdown.split("\n---\n", 1)
    assert "## Since " in summary and "1 new source, 1 dropped; " in summary
    assert (
        "- A new study links the rate to mortgage demand falling by a fifth. <https://d.example/study>"
        in summary
    )
    assert "~~Analysts expected no cut before spring.~~" in summary
    assert "[New study](https://d.example/study)" in summary and "~~Old news~~" in summary
    assert "A new study links" in report
    # A first version has nothing to compare with: no summary.
    assert "Since " not in export.report_markdown(first)
    from docx import Document

    text = "\n".join(p.text for p in Document(io.BytesIO(export.report_docx(second))).paragraphs)
    assert "Since " in text and "Analysts expected no cut before spring." in text


def test_the_pdf_of_a_later_version_says_what_changed(alice: User) -> None:
    first, second = two_versions(alice)
    html = export.report_pdf_html(second)
    assert 'class="changes"' in html and "1 new source" in html
    assert "<del>Analysts expected no cut before spring.</del>" in html
    assert 'class="changes"' not in export.report_pdf_html(first)


def test_a_version_with_nothing_new_says_so_in_its_files(alice: User) -> None:
    _first, second = two_versions(alice, BEFORE, BEFORE, SOURCES_BEFORE)
    assert "**Nothing has changed since " in export.report_markdown(second)
    assert "Nothing has changed since " in export.report_pdf_html(second)


def test_the_summary_is_in_the_reports_language(alice: User) -> None:
    _first, second = two_versions(alice, RU_BEFORE, RU_AFTER)
    markdown = export.report_markdown(second)
    assert "## С " in markdown
    assert "Since " not in markdown and "1 новый источник" in markdown
    assert "Новое исследование связывает" in markdown.split("\n---\n", 1)[0]
    assert "1 новый источник" in export.report_pdf_html(second)


def test_summary_text_is_written_as_literal_markdown(alice: User) -> None:
    _first, second = two_versions(alice)
    changes = second.report.changes
    changes["claims"]["removed"][0]["text"] = (
        "An <img src=x onerror=alert(1)> *claim* [x](javascript:alert(1))"
    )
    changes["sources"]["added"][0]["url"] = "javascript:alert(1)"
    Report.objects.filter(pk=second.report.pk).update(changes=changes)
    second = Topic.objects.get(pk=second.pk)
    markdown = export.report_markdown(second)
    assert "\\*claim\\*" in markdown and "[x](javascript:" not in markdown
    assert "](javascript:alert(1))\n" not in markdown  # the added source's address is not linked
    from research.rendering import render_markdown

    html = str(render_markdown(markdown))
    assert "<img" not in html and 'href="javascript' not in html
