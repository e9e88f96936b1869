"""A topic as a file: the owner downloads it as a zip archive, and any user uploads one to get
their own copy. Another user's topic id is a 404, like everywhere in the workspace."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from research import archive
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
    if upload.size > archive.MAX_ARCHIVE_BYTES:
        limit = archive.MAX_ARCHIVE_BYTES // 2**20
        messages.error(request, _("The archive is larger than %(mb)d MB.") % {"mb": limit})
        return redirect("home")
    try:
        topic = archive.import_archive(upload, request.user)
    except archive.ArchiveError as exc:
        messages.error(request, _("Nothing was imported: %(reason)s") % {"reason": exc})
        return redirect("home")
    messages.success(request, _("The topic was imported into your account."))
    return redirect("topic_detail", topic_id=topic.pk)
