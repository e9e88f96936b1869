"""A note on the passage a citation of one's report rests on, added from the citation's card
(retrieval/notes.py keeps, lists and finds notes)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from mindsearch.requests import signed_in
from research.models import Topic
from research.views import _reported, _topic
from research.views_citations import _report, card
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
