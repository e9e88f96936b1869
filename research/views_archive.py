"""A topic as a file: the owner downloads it as a zip archive, and any user uploads one to get
their own copy — imported by the worker, with a page that follows the job (research/imports.py).
Another user's topic or job id is a 404, like everywhere in the workspace."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from mindsearch.requests import signed_in
from research import archive, imports
from research.models import Topic


@require_GET
def topic_export(request: HttpRequest, topic_id: int) -> HttpResponse:
    topic = get_object_or_404(Topic.objects.for_user(request.user), pk=topic_id)
    try:
        content = archive.export_topic(topic)
    except archive.ArchiveError as exc:
        messages.error(request, str(exc))
        return redirect("topic_detail", topic_id=topic.pk)
    response = HttpResponse(content, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{archive.filename(topic)}"'
    return response


@require_POST
def topic_import(request: HttpRequest) -> HttpResponse:
    upload = request.FILES.get("archive")
    if upload is None:
        messages.error(request, _("Choose a topic archive (.zip) to import."))
        return redirect("home")
    if (upload.size or 0) > archive.MAX_ARCHIVE_BYTES:
        limit = archive.MAX_ARCHIVE_BYTES // 2**20
        messages.error(request, _("The archive is larger than %(mb)d MB.") % {"mb": limit})
        return redirect("home")
    try:
        job_id = imports.start(upload, signed_in(request))
    except archive.ArchiveError as refused:
        messages.error(request, _("Nothing was imported: %(reason)s") % {"reason": refused})
        return redirect("home")
    return redirect("topic_import_status", job_id=job_id)


@require_GET
def topic_import_status(request: HttpRequest, job_id: str) -> HttpResponse:
    """The import job: its progress while the worker has it, then the topic or the reason."""
    job = imports.status(job_id, signed_in(request))
    if job is None:
        raise Http404("No such import.")
    if job["state"] == imports.DONE:
        messages.success(request, _("The topic was imported into your account."))
        return _leave(request, reverse("topic_detail", args=[job["topic"]]))
    if job["state"] == imports.FAILED:
        messages.error(request, _("Nothing was imported: %(reason)s") % {"reason": job["error"]})
        return _leave(request, reverse("home"))
    return render(request, "research/import_status.html", {"job": job})


def _leave(request: HttpRequest, url: str) -> HttpResponse:
    """The page polls with htmx (no meta refresh under the CSP); htmx follows HX-Redirect."""
    if request.headers.get("HX-Request"):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)
