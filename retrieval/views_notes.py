"""Notes on passages (retrieval/notes.py): the list of one's notes, a note added to a passage of
one's document, edited, deleted. A note on a report's cited passage is added from the citation's
card (research/views_notes.py)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from mindsearch.requests import signed_in
from retrieval import notes
from retrieval.models import Chunk, PassageNote, UploadedDocument


@require_GET
def note_list(request: HttpRequest) -> HttpResponse:
    owner = signed_in(request)
    listed = [(note, notes.where(note)) for note in notes.notes_of(owner)[: notes.MAX_NOTES]]
    return render(request, "retrieval/note_list.html", {"notes": listed, "max_chars": notes.MAX_NOTE_CHARS})


@require_POST
def note_add(request: HttpRequest, document_id: int) -> HttpResponse:
    """A note on a passage (`chunk`) of the user's document; back where it was written."""
    owner = signed_in(request)
    document = get_object_or_404(UploadedDocument.objects.for_user(owner), pk=document_id)
    chunk_id = request.POST.get("chunk", "")
    chunk = Chunk.objects.filter(document=document, pk=int(chunk_id) if chunk_id.isdigit() else 0).first()
    if chunk is None:
        messages.error(request, _("That passage is no longer in the document: it was indexed again."))
        return back(request, "document_detail", document.pk)
    try:
        notes.add_to_chunk(owner, chunk, request.POST.get("text"))
    except notes.NoteRejected as rejected:
        messages.error(request, rejected.message)
    else:
        messages.success(request, _("Note saved. Document search finds it by its words."))
    return back(request, "document_detail", document.pk)


@require_POST
def note_edit(request: HttpRequest, note_id: int) -> HttpResponse:
    note = get_object_or_404(PassageNote, owner=signed_in(request), pk=note_id)
    try:
        notes.update(note, request.POST.get("text"))
    except notes.NoteRejected as rejected:
        messages.error(request, rejected.message)
    else:
        messages.success(request, _("Note saved."))
    return back(request, "note_list")


@require_POST
def note_delete(request: HttpRequest, note_id: int) -> HttpResponse:
    get_object_or_404(PassageNote, owner=signed_in(request), pk=note_id).delete()
    messages.success(request, _("Note deleted."))
    return back(request, "note_list")


def back(request: HttpRequest, name: str, *args: object) -> HttpResponseRedirect:
    """To the page the form was on (`next`, a path of this site), else to `name`."""
    target = request.POST.get("next", "")
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return HttpResponseRedirect(target)
    return redirect(name, *args)
