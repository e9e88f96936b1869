"""Keeping a topic current: its versions and schedule on the topic page, the unsubscribe link of
e-mails, and *Add to my documents* on a web source (research/keep.py)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from mindsearch.email_address import mail_configured, verified_address
from mindsearch.querysets import AnyUser
from research import delivery, keep, schedules, versions
from research.forms import ScheduleForm
from research.models import Document, Topic, TopicSchedule
from research.presenters import report_without_rendering, topic_page_context
from retrieval.uploads import UploadRejected


def _topic(request: HttpRequest, topic_id: int) -> Topic:
    return get_object_or_404(Topic.objects.for_user(request.user), pk=topic_id)


def _user(request: HttpRequest) -> User:
    """The signed-in user of a workspace page (LoginRequiredMiddleware lets no one else reach it)."""
    if not isinstance(request.user, User):
        raise PermissionDenied
    return request.user


def versions_context(topic: Topic, user: AnyUser, form: ScheduleForm | None = None) -> dict[str, Any]:
    """What the topic page shows of the topic's versions, what changed and its schedule."""
    schedule = schedules.schedule_of(topic)
    if form is None:
        initial = {"every": TopicSchedule.Every.WEEK, "email": True}
        if schedule is not None:
            initial = {
                name: getattr(schedule, name)
                for name in ("every", "cron", "email", "webhook_url", "deliver_unchanged")
            }
        form = ScheduleForm(initial=initial)
    if not getattr(user, "is_staff", False):
        form.fields.pop("cron", None)
    report = report_without_rendering(topic)  # read once per page (the thread read it first)
    changes = report.changes if report is not None else None
    all_versions = versions.version_list(topic)
    return {
        "versions": all_versions if len(all_versions) > 1 else [],
        "latest_version": all_versions[-1] if all_versions else None,
        **versions.changes_context(changes),
        "schedule": schedule,
        "schedule_form": form,
        "mail_configured": mail_configured(),
        "verified_email": verified_address(user),
    }


@require_POST
def schedule_save(request: HttpRequest, topic_id: int) -> HttpResponse:
    topic = _topic(request, topic_id)
    form = ScheduleForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            cron = schedules.check_cron(data.get("cron", "")) if request.user.is_staff else ""
            schedules.save_schedule(
                topic,
                _user(request),
                every=data["every"],
                email=data["email"],
                webhook_url=data["webhook_url"],
                deliver_unchanged=data["deliver_unchanged"],
                cron=cron,
            )
        except ValueError as error:
            form.add_error("cron", str(error))
        except delivery.DeliveryError as error:
            form.add_error("webhook_url", _("Deliveries cannot go there: %(reason)s") % {"reason": error})
        else:
            messages.success(request, _("The topic will be researched again on its schedule."))
            return redirect("topic_detail", topic_id=topic.pk)
    context = topic_page_context(topic)
    context.update(versions_context(topic, request.user, form))
    return render(request, "research/topic_detail.html", context, status=400)


@require_POST
def schedule_pause(request: HttpRequest, topic_id: int) -> HttpResponse:
    schedule = schedules.schedule_of(_topic(request, topic_id))
    if schedule is not None:
        schedules.set_paused(schedule, not schedule.paused)
    return redirect("topic_detail", topic_id=topic_id)


@require_POST
def schedule_delete(request: HttpRequest, topic_id: int) -> HttpResponse:
    schedule = schedules.schedule_of(_topic(request, topic_id))
    if schedule is not None:
        schedule.delete()
        messages.success(request, _("The schedule was removed; the versions made so far are kept."))
    return redirect("topic_detail", topic_id=topic_id)


@csrf_exempt  # the token in the link is the authority; RFC 8058's one-click POST has no CSRF token
@login_not_required
@require_http_methods(["GET", "POST"])
def schedule_unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """GET asks (mail scanners open links); POST stops the schedule's e-mails, signed in or not."""
    if request.method == "GET":
        return render(request, "research/unsubscribe.html", {"token": token, "done": False})
    schedule = delivery.unsubscribe(token)
    status = 200 if schedule is not None else 400
    return render(
        request,
        "research/unsubscribe.html",
        {"done": schedule is not None, "bad": schedule is None},
        status=status,
    )


@require_POST
def source_keep(request: HttpRequest, topic_id: int, document_id: int) -> HttpResponse:
    """Add a page the report was written from to the user's documents (htmx: the button's place
    says what happened; otherwise back to the page with a message)."""
    topic = _topic(request, topic_id)
    document = get_object_or_404(Document, topic=topic, pk=document_id)
    try:
        upload, created = keep.keep(_user(request), document)
    except UploadRejected as rejected:
        message, status, upload = rejected.message, 400, None
    else:
        message = (
            _("Added to your documents; it is being indexed.") if created else _("Already in your documents.")
        )
        status = 200
    if request.headers.get("HX-Request"):
        return render(request, "research/_kept.html", {"message": message, "upload": upload}, status=status)
    (messages.success if status == 200 else messages.error)(request, message)
    return redirect("topic_detail", topic_id=topic.pk)
