"""Citation previews: hover or focus on `[n]` in a report shows a card with the source's title and
site, the passage the cited sentence rests on with the sentence's words marked, and the
citation check's verdict when there is one (static/js/citations.js asks for it).

A citation is named by its place among the report's citations in reading order — the order in
which `rendering.render_markdown` links them and `citecheck.citation_occurrences` finds them (for
a report, stored with it: `presenters.report_rendering`) — so
two citations of one source in different sentences show different passages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_not_required
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.text import Truncator
from django.utils.translation import gettext
from django.views.decorators.http import require_GET

from research.models import Citation, Document, FollowUp, Report, Topic
from research.pipeline import citecheck
from research.pipeline.followup import sources_by_number
from research.pipeline.stages.answer import diversity
from research.pipeline.stages.answer.report_writer import CITATION, SOURCES_HEADING
from research.presenters import (
    NotStored,
    digest,
    followup_citations,
    place_in_rendering,
    report_without_rendering,
    stored_place,
)
from research.views import ShareGone, _reported, _shared, _topic
from retrieval.highlight import highlight_all
from retrieval.models import Chunk

# Enough of a passage to recognise the claim in it; the sources list links to the whole page.
PASSAGE_CHARS = 700
# How much of a cited passage is looked for in the uploaded document's chunks.
LOCATE_CHARS = 80


@require_GET
def citation_card(request: HttpRequest, topic_id: int, index: int) -> HttpResponse:
    from research.views_notes import card_notes

    topic = _reported(_topic(request, topic_id))
    context = card(_report(topic), index, link_private=True)
    context.update(card_notes(request, topic, index, context))  # the owner's notes on the passage
    return render(request, "research/_citation_card.html", context)


@login_not_required
@require_GET
def shared_citation_card(request: HttpRequest, token: str, index: int) -> HttpResponse:
    try:
        topic = _shared(token)
    except ShareGone:
        return render(request, "research/share_gone.html", status=404)
    # Whoever holds the link sees the report, not the owner's document pages.
    return render(request, "research/_citation_card.html", card(_report(topic), index, link_private=False))


def _report(topic: Topic) -> Report:
    report = report_without_rendering(topic)
    if report is None:
        raise Http404("This topic has no report yet.")
    return report


@require_GET
def followup_citation_card(request: HttpRequest, topic_id: int, followup_id: int, index: int) -> HttpResponse:
    from research.views_notes import followup_card_notes

    topic = _reported(_topic(request, topic_id))
    followup = get_object_or_404(_answered(topic), pk=followup_id)
    context = followup_card(followup, index, link_private=True)
    context.update(followup_card_notes(request, followup, index, context))  # the owner's notes
    return render(request, "research/_citation_card.html", context)


@login_not_required
@require_GET
def shared_followup_citation_card(
    request: HttpRequest, token: str, followup_id: int, index: int
) -> HttpResponse:
    try:
        topic = _shared(token)
    except ShareGone:
        return render(request, "research/share_gone.html", status=404)
    followup = get_object_or_404(_answered(topic), pk=followup_id)
    return render(request, "research/_citation_card.html", followup_card(followup, index, link_private=False))


def _answered(topic: Topic) -> QuerySet[FollowUp]:
    """The topic's answered follow-ups without their stored rendering (every language's HTML and
    every citation's place: megabytes for thousands of markers); a card reads the one place."""
    return topic.followups.filter(status=FollowUp.Status.COMPLETED).defer("rendering")


def card(report: Report, index: int, *, link_private: bool) -> dict[str, Any]:
    """What the card for the report's `index`-th citation (from 0, reading order) shows."""
    body = SOURCES_HEADING.split(report.markdown)[0]
    sources = {s.get("n"): s for s in report.sources}

    def checked(sentence_index: int, n: int) -> Citation | None:
        return Citation.objects.filter(report=report, sentence_index=sentence_index, n=n).first()

    place = stored_place(report, index)  # the one citation, not every place of the report
    occurrences = [] if place is None else [place]
    return _card(report.topic, body, occurrences, sources, checked, 0, link_private=link_private)


def followup_card(followup: FollowUp, index: int, *, link_private: bool) -> dict[str, Any]:
    """The card for the `index`-th citation of a follow-up's answer: its numbers are the thread's
    (the report's sources, then those each answer up to this one added)."""
    sources = sources_by_number(followup.topic, upto=followup)
    source_count = max(sources, default=0)
    checked_rows = followup.citations if isinstance(followup.citations, list) else []

    def checked(sentence_index: int, n: int) -> Citation | None:
        for row in checked_rows:  # the one row built, not every row of the check
            if isinstance(row, dict) and (row.get("sentence_index"), row.get("n")) == (sentence_index, n):
                return followup_citations(followup, [row])[0]
        return None

    # The one citation's place, from the rendering stored when the answer was saved (its text
    # and numbering unchanged), else found in the answer now.
    place = place_in_rendering(FollowUp, followup.pk, digest(followup.answer, source_count), index)
    if isinstance(place, NotStored):
        occurrences = citecheck.citation_occurrences(followup.answer, source_count)
    else:
        occurrences, index = ([] if place is None else [place]), 0
    return _card(
        followup.topic, followup.answer, occurrences, sources, checked, index, link_private=link_private
    )


def _card(
    topic: Topic,
    body: str,
    occurrences: list[tuple[int, int]],
    sources: dict[Any, dict[str, Any]],
    checked: Callable[[int, int], Citation | None],
    index: int,
    *,
    link_private: bool,
) -> dict[str, Any]:
    if not 0 <= index < len(occurrences):
        raise Http404("The report has no such citation.")
    sentence_index, n = occurrences[index]
    source = sources.get(n)
    if source is None:
        raise Http404("The report has no such source.")
    citation = checked(sentence_index, n)
    document_id = source.get("document_id")
    # Only this topic's documents (an imported topic's sources name its own rows).
    document = Document.objects.filter(pk=document_id, topic=topic).first() if document_id else None
    sentence = citation.sentence if citation else _sentence(body, sentence_index)
    raw = _passage(citation, source, document)
    passage = Truncator(" ".join(raw.split())).chars(PASSAGE_CHARS)
    marked = highlight_all(sentence, [passage])[0] if passage else ""
    return {
        "n": n,
        "title": source.get("title") or source.get("url") or "",
        "url": source.get("url") or "",
        "site": diversity.site_of_url(source["url"]) if source.get("url") else "",
        "private": not source.get("url"),
        "pages_label": _pages_label(source.get("pages")),
        "passage": marked,
        "citation": citation,
        "open_url": _document_url(document, raw) if link_private and not source.get("url") else "",
    }


def _pages_label(pages: Any) -> str:
    if not pages or not isinstance(pages, list):
        return ""
    if len(pages) == 1:
        return gettext("page %(page)s") % {"page": pages[0]}
    return gettext("pages %(first)s–%(last)s") % {"first": pages[0], "last": pages[-1]}


def _sentence(body: str, sentence_index: int) -> str:
    spans = citecheck.sentence_spans(body)
    if not 0 <= sentence_index < len(spans):
        return ""
    start, end = spans[sentence_index]
    return CITATION.sub("", body[start:end]).strip()


def _passage(citation: Citation | None, source: dict[str, Any], document: Document | None) -> str:
    """The closest passage the check found; else the first passage the writer was given; else the
    opening of the document (a short one was given whole)."""
    if citation and citation.passage:
        return citation.passage
    if document is None:
        return ""
    # The span the writer was given (an archive's sources may hold anything here: checked).
    cited = source.get("passages")
    first = cited[0] if isinstance(cited, list) and cited and isinstance(cited[0], dict) else {}
    start, end = first.get("start"), first.get("end")
    if isinstance(start, int) and isinstance(end, int):
        return document.text[start:end]
    return document.text[: PASSAGE_CHARS * 2]


def _document_url(document: Document | None, passage: str) -> str:
    """The owner's document page opened at the chunk the passage comes from (its page, for a
    PDF), or at the passage the search found first."""
    if document is None or document.uploaded_document_id is None:
        return ""
    chunks = Chunk.objects.filter(document_id=document.uploaded_document_id)
    lines = [line.strip() for line in passage.splitlines() if len(line.strip()) >= 20]
    snippet = lines[0][:LOCATE_CHARS] if lines else ""
    chunk = chunks.filter(text__contains=snippet).order_by("position").first() if snippet else None
    if chunk is None and document.hit_id is not None:
        chunk = chunks.filter(hits__id=document.hit_id).first()
    url = reverse("document_detail", args=[document.uploaded_document_id])
    if chunk is None:
        return url
    return f"{url}?{urlencode({'from': chunk.position})}#passage-{chunk.position}"
