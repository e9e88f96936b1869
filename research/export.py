"""A report as a file: Markdown as written, or a PDF rendered from the same sanitised HTML."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.utils.text import slugify
from django.utils.translation import gettext as _

from research.models import Topic
from research.presenters import topic_context

log = logging.getLogger(__name__)


def filename(topic: Topic, extension: str) -> str:
    return f"mindsearch-{topic.pk}-{slugify(topic.question)[:60] or 'report'}.{extension}"


def report_markdown(topic: Topic) -> str:
    report = topic.report
    engine = report.model or _("the extractive engine (no LLM)")
    header = _("Researched with MindSearch on %(date)s by %(engine)s.") % {
        "date": report.created_at.date().isoformat(),
        "engine": engine,
    }
    subqueries = "\n".join(f"- {sq.text}" for sq in topic.subqueries.order_by("round", "position"))
    heading = _("Sub-queries")
    return f"> {header}\n>\n> {heading}:\n{_quote(subqueries)}\n\n{report.markdown.strip()}\n"


def _quote(lines: str) -> str:
    return "\n".join(f"> {line}" for line in lines.splitlines())


def markdown_response(topic: Topic) -> HttpResponse:
    response = HttpResponse(report_markdown(topic), content_type="text/markdown; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename(topic, "md")}"'
    return response


def report_pdf(topic: Topic) -> bytes:
    # Imported here: WeasyPrint loads the system's pango when imported.
    from weasyprint import HTML

    html = render_to_string("research/report_pdf.html", topic_context(topic))
    # No base_url: the report may not make WeasyPrint fetch anything, local or remote.
    return HTML(string=html, url_fetcher=_refuse_fetch).write_pdf()


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
