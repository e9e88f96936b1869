"""A report as a file: Markdown as written, or a PDF rendered from the same sanitised HTML.

A PDF takes WeasyPrint seconds to a minute to render, and a share link lets anyone ask for it:
each is rendered once per version of what it shows (the hash of its HTML, which holds the
report, its sources and the reader's language), kept under MEDIA_ROOT/pdf/<topic>/, and served
from there; requests for one that is being rendered wait for that render instead of starting
their own. Deleting the topic removes its folder (`forget_pdfs`, called by
`workflow.delete_topic`).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.text import slugify
from django.utils.translation import gettext as _

from research.models import Citation, FollowUp, SubQuery, Topic
from research.presenters import topic_context

log = logging.getLogger(__name__)


def filename(topic: Topic, extension: str) -> str:
    return f"mindsearch-{topic.pk}-{slugify(topic.question)[:60] or 'report'}.{extension}"


def export_language(topic: Topic) -> str:
    """The language of every word a file adds to a report (its frame, headings and notes): the
    report's own, by its words; the question's when the body is too short to tell."""
    from research.pipeline.replies import question_language, report_language
    from research.pipeline.stages.answer.report_writer import SOURCES_HEADING

    body = SOURCES_HEADING.split(topic.report.markdown)[0]
    return report_language(body) or question_language(topic.question)


def report_markdown(topic: Topic) -> str:
    with translation.override(export_language(topic)):
        return _report_markdown(topic)


def _report_markdown(topic: Topic) -> str:
    report = topic.report
    engine = report.model or (
        _("the extractive engine (the model %(model)s was given up on)") % {"model": topic.llm_model}
        if topic.llm_model
        else _("the extractive engine (no LLM)")
    )
    header = _("Researched with MindSearch on %(date)s by %(engine)s.") % {
        "date": report.created_at.date().isoformat(),
        "engine": engine,
    }
    plan = topic.subqueries.exclude(origin=SubQuery.Origin.FOLLOWUP).order_by("round", "position")
    subqueries = "\n".join(f"- {_one_line(sq.text)}" for sq in plan)
    heading = _("Sub-queries")
    check = checked_report(topic)
    thread = thread_markdown(topic, after=len(check.notes))
    lines = [*report_notes(topic), *([check.summary] if check.summary else [])]
    notes = "".join(f">\n> **{line}**\n" for line in lines)
    since = _changes_block(topic)
    return (
        f"> {header}\n{notes}>\n> {heading}:\n>\n{_quote(subqueries)}\n\n{since}"
        f"{check.markdown.strip()}\n{check.notes_markdown}{thread}"
    )


def _changes_block(topic: Topic) -> str:
    """A later version's "since <date>" summary before its report (research/versions.py)."""
    from research.versions import changes_markdown

    summary = changes_markdown(topic.report.changes)
    return f"{summary}\n---\n\n" if summary else ""


@dataclass(frozen=True)
class CheckedReport:
    """A report's Markdown with each unsupported or weakly supported citation marked in the text
    ("[3] **(not supported, note 1)**"), the numbered notes that say why (the sentence, the
    verdict, the closest passage of the source), and the summary line, in the active language."""

    markdown: str
    summary: str
    notes: list[dict[str, Any]]

    @property
    def notes_markdown(self) -> str:
        """The report's notes, a numbered list under their own heading."""
        if not self.notes:
            return ""
        lines = [f"\n## {_('Citations the sources do not fully support')}\n"]
        lines.append(
            _(
                "Each sentence was compared with the text of the source it cites, as it was given to the "
                "writer; the closest passage of the source is quoted."
            )
            + "\n"
        )
        lines += [f"{note['number']}. {_note_line(note)}" for note in self.notes]
        return "\n".join(lines) + "\n"

    @property
    def followup_notes_markdown(self) -> str:
        """A follow-up's notes after its answer: bullets that carry their numbers, which go on
        from the report's (a numbered list would restart at 1 in a DOCX)."""
        if not self.notes:
            return ""
        listed = "\n".join(f"- {note['number']}\\. {_note_line(note)}" for note in self.notes)
        return f"\n{_('Citations the sources do not fully support')}:\n\n{listed}\n"


def _note_line(note: dict[str, Any]) -> str:
    """One note of the check: the verdict, the sentence, why, and the closest passage."""
    from research.pipeline.stages.answer.report_writer import _plain

    text = f"**{note['verdict']}**, \\[{note['n']}\\]: “{_plain(note['sentence'])}”"
    if note["why"]:
        text += f" ({_plain(note['why'])})"
    if note["passage"]:
        text += f". {_('Closest passage of the source')}: “{_plain(note['passage'])}”"
    return text


def checked_report(topic: Topic) -> CheckedReport:
    """The report's check carried into a file (the page shows the same from `presenters.report_of`)."""
    from research.pipeline.stages.answer.report_writer import SOURCES_HEADING

    report = topic.report
    citations = list(report.citations.all())
    if not citations:
        return CheckedReport(report.markdown, "", [])
    body = SOURCES_HEADING.split(report.markdown, maxsplit=1)[0]
    check = checked_text(body, len(report.sources), citations)
    return CheckedReport(check.markdown + report.markdown[len(body) :], check.summary, check.notes)


def checked_text(body: str, source_count: int, citations: list[Citation], *, after: int = 0) -> CheckedReport:
    """`body` (a report's text or a follow-up's answer) with each doubtful citation of its check
    marked, its notes numbered from `after` + 1, and its summary line."""
    from research.pipeline import citecheck
    from research.presenters import _mark, citation_summary, note_text

    if not citations:
        return CheckedReport(body, "", [])
    by_place = {(c.sentence_index, c.n): c for c in citations}
    places = citecheck.citation_occurrences(body, source_count)
    numbers: dict[int, int] = {}  # the citation's place in `citations` → its note's number, in reading order
    index_of = {id(c): i for i, c in enumerate(citations)}
    pieces, last, index = [], 0, 0
    for match in citecheck.CITATION.finditer(body):
        if not 1 <= int(match.group(1)) <= source_count:
            continue
        citation = by_place.get(places[index]) if index < len(places) else None
        index += 1
        if citation is None or citation.verdict == Citation.Verdict.SUPPORTED:
            continue
        number = numbers.setdefault(index_of[id(citation)], after + len(numbers) + 1)
        mark = _mark(citation)
        assert mark is not None
        flag = _("(%(verdict)s, note %(number)s)") % {"verdict": mark.flag, "number": number}
        pieces += [body[last : match.end()], f" **{flag}**"]
        last = match.end()
    pieces.append(body[last:])
    doubtful = [c for c in citations if c.verdict != Citation.Verdict.SUPPORTED]
    for citation in doubtful:  # a doubtful citation the text no longer shows still gets its note
        numbers.setdefault(index_of[id(citation)], after + len(numbers) + 1)
    labels = dict(Citation.Verdict.choices)
    notes = [
        {
            "number": numbers[index_of[id(c)]],
            "n": c.n,
            "verdict": str(labels.get(c.verdict, c.verdict)),
            "kind": c.verdict,
            "sentence": " ".join(c.sentence.split()),
            "passage": " ".join(c.passage.split()),
            "why": "; ".join(
                part for part in (c.get_method_display(), note_text(c.note) if c.note else "") if part
            ),
        }
        for c in sorted(doubtful, key=lambda c: numbers[index_of[id(c)]])
    ]
    return CheckedReport("".join(pieces), citation_summary(citecheck.counts(citations)), notes)


@dataclass(frozen=True)
class CheckedFollowUp:
    """An answered follow-up as a file shows it: its answer with its check carried in, and the
    count of sources numbered when it was answered (the report's and every answer's so far)."""

    followup: FollowUp
    source_count: int
    check: CheckedReport


def checked_thread(topic: Topic, *, after: int) -> list[CheckedFollowUp]:
    """The answered follow-ups, in order, each with its check; the notes are numbered on from
    the report's `after` notes, so every "note n" of the file means one note."""
    from research.presenters import followup_citations

    answered = (
        topic.followups.filter(status=FollowUp.Status.COMPLETED)
        .select_related("subquery")
        .order_by("position")
    )
    numbered = len(topic.report.sources)
    checked = []
    for followup in answered:
        numbered = max([numbered, *(s.get("n", 0) for s in followup.sources)])
        check = checked_text(followup.answer.strip(), numbered, followup_citations(followup), after=after)
        after += len(check.notes)
        checked.append(CheckedFollowUp(followup, numbered, check))
    return checked


def report_notes(topic: Topic) -> list[str]:
    """What the checks of the whole report found, and the stages that ran without the model, as
    lines of text for a file (the page shows the same from `presenters.report_of`)."""
    from research.presenters import marks_of, without_model_of

    report = topic.report
    care = _("Read this report with care: %(mark)s.")
    lines = [care % {"mark": mark["label"]} for mark in marks_of(report)]
    stages = [
        f"{entry['label']} ({entry['count']}/{entry['total']})" if entry.get("total") else entry["label"]
        for entry in without_model_of(report)
    ]
    if stages:
        lines.append(
            _(
                "Ran without the model %(model)s (its answers could not be read, or it was given up on): "
                "%(stages)s."
            )
            % {"model": topic.llm_model, "stages": ", ".join(stages)}
        )
    return lines


def thread_markdown(topic: Topic, *, after: int = 0) -> str:
    """The answered follow-ups after the report, each with the sources it added (numbered after
    the report's, so every [n] of the file means one source), its citation check's summary line,
    marks and notes (numbered on from the report's `after`); "" without any."""
    from research.presenters import demoted_headings

    parts = []
    for item in checked_thread(topic, after=after):
        followup, check = item.followup, item.check
        answer = demoted_headings(check.markdown)
        part = f"### {followup.position}. {_one_line(followup.question)}\n\n"
        if followup.searched and followup.subquery is not None:
            searched = _("Searched for: %(query)s") % {"query": _one_line(followup.subquery.text)}
            part += f"*{searched}*\n\n"
        if check.summary:
            part += f"**{check.summary}**\n\n"
        part += f"{answer}\n{check.followup_notes_markdown}"
        if followup.sources:
            # Bullets that carry their numbers: a numbered list would restart at 1 in a DOCX.
            listed = "\n".join(f"- \\[{s['n']}\\] {_source_line(s)}" for s in followup.sources)
            part += f"\n{_('New sources')}:\n\n{listed}\n"
        parts.append(part)
    if not parts:
        return ""
    return f"\n## {_('Follow-up questions')}\n\n" + "\n".join(parts)


def _source_line(source: dict) -> str:
    from research.pipeline.stages.answer.report_writer import _escape, _plain

    title = source.get("title") or source.get("url") or ""
    return f"[{_escape(title)}]({source['url']})" if source.get("url") else _plain(title)


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("#", "\\#")


def _quote(lines: str) -> str:
    return "\n".join(f"> {line}" for line in lines.splitlines())


def markdown_response(topic: Topic) -> HttpResponse:
    response = HttpResponse(report_markdown(topic), content_type="text/markdown; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename(topic, "md")}"'
    return response


PDF_LOCK_NAMESPACE = 7_302  # first key of pg_advisory_lock(int, int): "PDF of a topic"


def pdf_folder(topic_id: int) -> Path:
    """Where a topic's rendered PDFs are kept."""
    return Path(settings.MEDIA_ROOT) / "pdf" / str(topic_id)


def forget_pdfs_of_deleted(sender: type[Topic], instance: Topic, **kwargs: Any) -> None:
    """post_delete of a topic, however it goes — `workflow.delete_topic`, or with its owner's
    account in the admin (a cascade): its PDFs are removed once the delete is committed."""
    topic_id = instance.pk
    transaction.on_commit(lambda: forget_pdfs(topic_id))


def forget_pdfs(topic_id: int) -> None:
    """Remove a deleted topic's rendered PDFs, after a render under way: that render finds the
    topic gone and keeps nothing."""
    with _render_lock(topic_id):
        shutil.rmtree(pdf_folder(topic_id), ignore_errors=True)


def report_pdf(topic: Topic) -> bytes:
    html = report_pdf_html(topic)
    folder = pdf_folder(topic.pk)
    path = folder / f"{hashlib.sha256(html.encode()).hexdigest()[:32]}.pdf"
    if path.is_file():
        return path.read_bytes()
    with _render_lock(topic.pk):
        if path.is_file():  # rendered by the request this one waited for
            return path.read_bytes()
        pdf = render_pdf(html)
        if not Topic.objects.filter(pk=topic.pk).exists():  # deleted while it rendered
            return pdf
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = path.with_suffix(".partial")
        partial.write_bytes(pdf)
        os.replace(partial, path)
        for older in folder.glob("*.pdf"):  # earlier versions of the report
            if older != path:
                older.unlink(missing_ok=True)
    return pdf


def report_pdf_html(topic: Topic) -> str:
    """The PDF's HTML, in the report's language: the report with its check carried in (the marks
    in the text, the summary line, the notes), its plan and its thread."""
    from research.pipeline.stages.answer.report_writer import SOURCES_HEADING
    from research.presenters import demoted_headings
    from research.rendering import render_markdown

    with translation.override(export_language(topic)):
        check = checked_report(topic)
        body = SOURCES_HEADING.split(check.markdown)[0]
        plan = topic.subqueries.exclude(origin=SubQuery.Origin.FOLLOWUP).order_by("round", "position")
        context = topic_context(
            topic,
            check=check,
            checked_html=render_markdown(body, source_count=len(topic.report.sources)),
            plan=list(plan),
            language=translation.get_language(),
            version_changes=_changes_of(topic),
        )
        answers = {item.followup.pk: item for item in checked_thread(topic, after=len(check.notes))}
        for item in context["thread"]:
            answer = answers.get(item["followup"].pk)
            if answer is not None:  # an answered one: its check carried in as in the report's
                item["check"] = answer.check
                item["checked_html"] = render_markdown(
                    demoted_headings(answer.check.markdown), source_count=answer.source_count
                )
        return render_to_string("research/report_pdf.html", context)


def _changes_of(topic: Topic) -> dict[str, Any] | None:
    """What the PDF shows of a later version's changes (research/_changes.html); None for a first."""
    from research.versions import changes_context

    context = changes_context(topic.report.changes)
    return context if context["since"] is not None else None


def render_pdf(html: str) -> bytes:
    # Imported here: WeasyPrint loads the system's pango when imported.
    from weasyprint import HTML

    # No base_url: the report may not make WeasyPrint fetch anything, local or remote.
    return HTML(string=html, url_fetcher=_refuse_fetch).write_pdf()


@contextmanager
def _render_lock(topic_id: int) -> Iterator[None]:
    """One render of a topic's PDF at a time, across every web process."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s, %s)", [PDF_LOCK_NAMESPACE, topic_id])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [PDF_LOCK_NAMESPACE, topic_id])


def _refuse_fetch(url: str, *args: object, **kwargs: object) -> dict:
    raise ValueError(f"PDF export does not fetch {url}")


def pdf_response(request: HttpRequest, topic: Topic) -> HttpResponse:
    try:
        pdf = report_pdf(topic)
    except OSError as exc:  # pango or its fonts are missing on this machine
        log.error("PDF export is unavailable: %s", exc)
        message = _("PDF export is unavailable on this server: the pango library is missing (%s).") % exc
        return HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")
    response = HttpResponse(pdf, content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{filename(topic, "pdf")}"'
    return response


# --- DOCX ------------------------------------------------------------------------------------------
# Made from the same Markdown as the .md download (its header, sub-queries, report, citations
# and sources list), through the sanitised HTML the page shows, so nothing the page would refuse
# reaches the document either.

DOCX_CONTENT_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
HYPERLINK_RELATION = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/hyperlink"
MONOSPACE = "Courier New"


def report_docx(topic: Topic) -> bytes:
    from docx import Document  # imported here: only this download needs it
    from lxml import html as lxml_html

    from research.rendering import render_markdown

    document = Document()
    document.core_properties.title = topic.question[:250]
    html = str(render_markdown(report_markdown(topic)))
    root = lxml_html.fragment_fromstring(html or "<p></p>", create_parent="div")
    for element in root:
        _docx_block(document, element)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _docx_block(document: Any, element: Any, *, depth: int = 0) -> None:
    tag = element.tag if isinstance(element.tag, str) else ""
    if tag in {"h1", "h2", "h3", "h4", "h5", "h6"}:
        _docx_inline(document.add_heading(level=min(int(tag[1]), 4)), element)
    elif tag in {"ul", "ol"}:
        style = "List Bullet" if tag == "ul" else "List Number"
        if depth:
            style += f" {min(depth + 1, 3)}"
        for item in element:
            if getattr(item, "tag", "") != "li":
                continue
            paragraph = document.add_paragraph(style=style)
            _docx_inline(paragraph, item, skip={"ul", "ol"})
            for child in item:
                if child.tag in {"ul", "ol"}:
                    _docx_block(document, child, depth=depth + 1)
    elif tag == "blockquote":
        for child in element:
            if child.tag == "p":
                _docx_inline(document.add_paragraph(style="Quote"), child)
            else:
                _docx_block(document, child, depth=depth)
    elif tag == "pre":
        paragraph = document.add_paragraph()
        paragraph.add_run(element.text_content()).font.name = MONOSPACE
    elif tag == "table":
        _docx_table(document, element)
    elif tag == "hr":
        document.add_paragraph()
    else:  # p, and anything else as a paragraph of its text
        _docx_inline(document.add_paragraph(), element)


def _docx_inline(
    paragraph: Any, element: Any, *, skip: set[str] | frozenset[str] = frozenset(), **style: bool
) -> None:
    """The text of `element` with bold, italic, code and links, as runs of `paragraph`."""
    if element.text:
        _docx_run(paragraph, element.text, **style)
    for child in element:
        tag = child.tag if isinstance(child.tag, str) else ""
        if tag in skip:
            pass
        elif tag == "br":
            paragraph.add_run().add_break()
        elif tag == "a" and (child.get("href") or "").startswith(("http://", "https://", "mailto:")):
            _docx_link(paragraph, child.get("href"), child.text_content())
        else:
            child_style = dict(style)
            if tag in {"strong", "b"}:
                child_style["bold"] = True
            elif tag in {"em", "i"}:
                child_style["italic"] = True
            elif tag == "code":
                child_style["code"] = True
            _docx_inline(paragraph, child, skip=skip, **child_style)
        if child.tail:
            _docx_run(paragraph, child.tail, **style)


def _docx_run(
    paragraph: Any, text: str, *, bold: bool = False, italic: bool = False, code: bool = False
) -> None:
    run = paragraph.add_run(re.sub(r"\s+", " ", text))  # whitespace as HTML shows it
    run.bold, run.italic = bold or None, italic or None
    if code:
        run.font.name = MONOSPACE


def _docx_link(paragraph: Any, url: str, text: str) -> None:
    """A real hyperlink (python-docx has no API for one: the run is wrapped in w:hyperlink)."""
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    relation = paragraph.part.relate_to(url, HYPERLINK_RELATION, is_external=True)
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), relation)
    run = OxmlElement("w:r")
    properties = OxmlElement("w:rPr")
    style = OxmlElement("w:rStyle")
    style.set(qn("w:val"), "Hyperlink")
    underline = OxmlElement("w:u")
    underline.set(qn("w:val"), "single")
    colour = OxmlElement("w:color")
    colour.set(qn("w:val"), "2C5FD6")
    properties.extend([style, colour, underline])
    run.append(properties)
    content = OxmlElement("w:t")
    content.text = text
    content.set(qn("xml:space"), "preserve")
    run.append(content)
    link.append(run)
    paragraph._p.append(link)


def _docx_table(document: Any, element: Any) -> None:
    rows = [row for row in element.iter("tr")]
    width = max((len([cell for cell in row if cell.tag in {"td", "th"}]) for row in rows), default=0)
    if not rows or not width:
        return
    table = document.add_table(rows=len(rows), cols=width)
    table.style = "Table Grid"
    for r, row in enumerate(rows):
        for c, cell in enumerate(cell for cell in row if cell.tag in {"td", "th"}):
            paragraph = table.cell(r, c).paragraphs[0]
            _docx_inline(paragraph, cell, bold=cell.tag == "th")


def docx_response(topic: Topic) -> HttpResponse:
    response = HttpResponse(report_docx(topic), content_type=DOCX_CONTENT_TYPE)
    response["Content-Disposition"] = f'attachment; filename="{filename(topic, "docx")}"'
    return response
