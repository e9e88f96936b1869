"""A note on the passage a citation of one's report (or of a follow-up's answer) rests on, added
from the citation's card (retrieval/notes.py keeps, lists and finds notes)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from mindsearch.requests import signed_in
from research.models import FollowUp, Topic
from research.views import _reported, _topic
from research.views_citations import _report, card, followup_card
from retrieval import notes
from retrieval.models import PassageNote
from retrieval.views_notes import back


@require_POST
def citation_note(request: HttpRequest, topic_id: int, index: int) -> HttpResponse:
    topic = _reported(_topic(request, topic_id))
    citation = card(_report(topic), index, link_private=True).get("citation")
    if citation is None:
        raise Http404("This citation has no checked passage to note.")
    try:
        notes.add_to_citation(signed_in(request), citation, request.POST.get("text"))
    except notes.NoteRejected as rejected:
        messages.error(request, rejected.message)
    else:
        messages.success(request, _("Note saved. Document search finds it by its words."))
    if not request.POST.get("next"):
        return back_to_source(topic.pk, citation.n)
    return back(request, "topic_detail", topic.pk)


@require_POST
def followup_citation_note(request: HttpRequest, topic_id: int, followup_id: int, index: int) -> HttpResponse:
    """A note on the passage the `index`-th citation of a follow-up's answer rests on (its
    citations are the follow-up's `citations`, not Citation rows); back to the answer."""
    topic = _reported(_topic(request, topic_id))
    followup = get_object_or_404(topic.followups, pk=followup_id, status=FollowUp.Status.COMPLETED)
    row = _followup_row(followup, followup_card(followup, index, link_private=True))
    try:
        notes.add_to_followup(signed_in(request), followup, row, request.POST.get("text"))
    except notes.NoteRejected as rejected:
        messages.error(request, rejected.message)
    else:
        messages.success(request, _("Note saved. Document search finds it by its words."))
    if not request.POST.get("next"):
        return HttpResponseRedirect(reverse("topic_detail", args=[topic.pk]) + f"#followup-{followup.pk}")
    return back(request, "topic_detail", topic.pk)


def _followup_row(followup: FollowUp, context: dict[str, Any]) -> dict[str, Any]:
    """The follow-up's `citations` item the card shows; 404 when the citation was not checked."""
    citation = context.get("citation")
    if citation is None:
        raise Http404("This citation has no checked passage to note.")
    for row in followup.citations:
        if (row.get("sentence_index"), row.get("n")) == (citation.sentence_index, citation.n):
            return dict(row)
    raise Http404("This citation has no checked passage to note.")


def followup_card_notes(
    request: HttpRequest, followup: FollowUp, index: int, context: dict[str, Any]
) -> dict[str, Any]:
    """The owner's notes on a follow-up card's checked passage and where to add one."""
    citation = context.get("citation")
    if citation is None:
        return {}
    found = notes.on_followup(signed_in(request), followup, citation.sentence_index, citation.n)
    return {
        "notes": found,
        "note_url": reverse("followup_citation_note", args=[followup.topic_id, followup.pk, index]),
        "note_max_chars": notes.MAX_NOTE_CHARS,
    }


def back_to_source(topic_id: int, n: int) -> HttpResponse:
    return HttpResponseRedirect(reverse("topic_detail", args=[topic_id]) + f"#source-{n}")


def card_notes(request: HttpRequest, topic: Topic, index: int, context: dict[str, Any]) -> dict[str, Any]:
    """The owner's notes on a card's checked passage and where to add one; nothing without one."""
    citation = context.get("citation")
    if citation is None:
        return {}
    return {
        "notes": list(PassageNote.objects.filter(owner=signed_in(request), citation=citation)),
        "note_url": reverse("citation_note", args=[topic.pk, index]),
        "note_max_chars": notes.MAX_NOTE_CHARS,
    }
