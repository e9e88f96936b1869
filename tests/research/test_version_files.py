"""A later version's files and archive carry its versions and what changed (issue 31)."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research import archive, export, versions
from research.archive import checks as archive_checks
from research.archive import series
from research.archive.checks import ArchiveError
from research.models import Report, Topic
from tests.research.archive.test_archive import import_as, zipped

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
    assert changes is not None
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


# --- Archives -------------------------------------------------------------------------------------


def archived(topic: Topic) -> dict[str, Any]:
    content = archive.export_topic(topic)
    with zipfile.ZipFile(io.BytesIO(content)) as zf:
        return json.loads(zf.read("topic.json"))


def test_an_archive_carries_the_series_and_imports_it_as_one(
    alice: User, bob: User, bob_client: Client
) -> None:
    first, second = two_versions(alice)
    data = archived(second)
    assert [body["report"]["markdown"] for body in data["versions"]] == [BEFORE]
    assert data["report"]["changes"]["claims"]["removed"][0]["text"]
    assert data["versions"][0]["report"]["changes"] is None
    # The first version's archive has no versions before it.
    assert archived(first)["versions"] == []
    import_as(bob_client, archive.export_topic(second))
    imported = list(Topic.objects.filter(owner=bob).order_by("created_at", "pk"))
    assert len(imported) == 2
    old, new = imported
    assert (old.series, old.previous_version_id) == (None, None)
    assert (new.series, new.previous_version_id) == (old.pk, old.pk)
    assert old.is_imported and new.is_imported  # data, not history
    assert [v["id"] for v in versions.version_list(new)] == [old.pk, new.pk]
    assert old.report.markdown == BEFORE and old.report.changes is None
    changes, exported = new.report.changes, second.report.changes
    assert changes is not None and exported is not None
    assert changes["previous_topic"] == old.pk
    assert changes["sources"] == exported["sources"]
    assert changes["claims"] == exported["claims"]
    page = bob_client.get(reverse("topic_detail", args=[new.pk])).content.decode()
    assert "1 new source" in page and "<del>Analysts expected no cut before spring.</del>" in page
    # The imported newest version's files say what changed, like the exporter's.
    assert "~~Analysts expected no cut before spring.~~" in export.report_markdown(new)


def _archive_with(data: dict[str, Any], **changes: Any) -> bytes:
    return zipped({"topic.json": json.dumps({**data, **changes})})


@pytest.mark.parametrize(
    "spoil, reason",
    [
        (
            lambda d: d["report"]["changes"]["sources"]["added"][0].update(url="javascript:alert(1)"),
            "changed",
        ),
        (lambda d: d["report"]["changes"].update(since="yesterday"), "changed"),
        (lambda d: d["report"]["changes"]["claims"].update(added="all"), "changed"),
        (lambda d: d["report"]["changes"]["claims"]["added"].append({"text": 5}), "changed"),
        (lambda d: d["versions"][0].update(versions=[]), "versions"),
        (lambda d: d["versions"][0]["topic"].update(status="running"), "still being researched"),
        (lambda d: d.update(versions=[d["versions"][0]] * (series.MAX_VERSIONS + 1)), "rows of versions"),
        (lambda d: d.update(versions={"a": 1}), "not a list"),
    ],
)
def test_a_hostile_series_is_refused_and_nothing_saved(
    alice: User, bob: User, bob_client: Client, spoil: Any, reason: str
) -> None:
    _first, second = two_versions(alice)
    data = archived(second)
    spoil(data)
    response = import_as(bob_client, _archive_with(data))
    assert response.status_code == 302 and response["Location"] == reverse("home")
    page = bob_client.get(reverse("home")).content.decode()
    assert "Nothing was imported" in page and reason in page
    assert not Topic.objects.filter(owner=bob).exists()


def test_the_shape_count_bounds_the_versions_before_parsing(alice: User) -> None:
    _first, second = two_versions(alice)
    data = archived(second)
    data["versions"] = [data["versions"][0]] * (series.MAX_VERSIONS + 1)
    content = _archive_with(data)
    with pytest.raises(ArchiveError, match="rows of versions"):
        archive.read_archive(io.BytesIO(content))


def test_an_export_keeps_only_the_newest_versions_that_fit(alice: User) -> None:
    _first, second = two_versions(alice)
    body = archived(second)
    own = series.row_count(body)
    bodies: list[dict[str, Any]] = [{"citations": [{}] * 10}, {"citations": [{}] * 20}]
    assert series.trim(bodies, own) == bodies
    assert series.trim(bodies, archive_checks.MAX_ROWS - 25) == [bodies[1]]
    assert series.trim(bodies, archive_checks.MAX_ROWS) == []
