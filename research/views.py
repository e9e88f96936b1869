"""The research workspace: my topics, one topic (plan review, live progress, report), sharing
and export. Every lookup starts from the signed-in user; another user's ids are a 404."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Max, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from mindsearch.status import run_checks
from research import export, tasks
from research.forms import ShareLinkForm, SubQueryForm, TopicForm
from research.models import ShareLink, SubQuery, Topic
from research.pipeline.parsing import is_russian
from research.presenters import topic_context

PAGE_SIZE = 25


@require_GET
def topic_list(request: HttpRequest) -> HttpResponse:
    topics = Topic.objects.for_user(request.user)
    has_any = topics.exists()
    query, status = request.GET.get("q", "").strip(), request.GET.get("status", "")
    if query:
        topics = topics.filter(Q(question__icontains=query) | Q(subqueries__text__icontains=query)).distinct()
    if status in Topic.Status.values:
        topics = topics.filter(status=status)
    # The aggregate adds a GROUP BY, and Django drops Meta.ordering from grouped queries.
    topics = topics.annotate(last_event=Max("events__seq")).order_by("-created_at", "-id")
    page = Paginator(topics, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {"page": page, "query": query, "status": status, "statuses": Topic.Status.choices}
    if request.htmx and request.htmx.target == "topic-rows":
        return render(request, "research/_topic_rows.html", context)
    context.update(form=TopicForm(), has_any=has_any, checks=[] if has_any else run_checks())
    return render(request, "research/topic_list.html", context)


@require_POST
def topic_create(request: HttpRequest) -> HttpResponse:
    form = TopicForm(request.POST)
    if not form.is_valid():
        topics = Topic.objects.for_user(request.user)
        context = {"form": form, "page": Paginator(topics, PAGE_SIZE).get_page(1), "has_any": topics.exists()}
        context.update(statuses=Topic.Status.choices, checks=[])
        return render(request, "research/topic_list.html", context, status=400)
    topic = form.save(commit=False)
    topic.owner = request.user
    topic.language = "ru" if is_russian(topic.question) else "en"
    with transaction.atomic():
        topic.save()
        tasks.enqueue_plan(topic)
    return redirect("topic_detail", topic_id=topic.pk)


def _topic(request: HttpRequest, topic_id: int) -> Topic:
    return get_object_or_404(Topic.objects.for_user(request.user), pk=topic_id)


@require_GET
def topic_detail(request: HttpRequest, topic_id: int) -> HttpResponse:
    topic = _topic(request, topic_id)
    # A new share link's token is shown once, right after it was made, and never again.
    new_share_url = request.session.pop("new_share_url", None)
    context = topic_context(topic, new_share_url=new_share_url)
    return render(request, "research/topic_detail.html", context)


# --- Plan review ---------------------------------------------------------------------------------


def _plan_response(request: HttpRequest, topic: Topic, form: SubQueryForm | None = None) -> HttpResponse:
    if request.htmx:
        context = topic_context(topic, plan_form=form or SubQueryForm())
        return render(request, "research/_plan.html", context, status=400 if form and form.errors else 200)
    if form and form.errors:
        messages.error(request, " ".join(form.errors.get("text", [])))
    return redirect(reverse("topic_detail", args=[topic.pk]) + "#plan")


def _reviewable(request: HttpRequest, topic_id: int) -> Topic:
    topic = _topic(request, topic_id)
    if topic.status != Topic.Status.AWAITING_APPROVAL:
        raise Http404("The plan of this topic can no longer be edited.")
    return topic


@require_POST
def subquery_add(request: HttpRequest, topic_id: int) -> HttpResponse:
    topic = _reviewable(request, topic_id)
    form = SubQueryForm(request.POST)
    if not form.is_valid():
        return _plan_response(request, topic, form)
    position = (topic.subqueries.aggregate(Max("position"))["position__max"] or 0) + 1
    SubQuery.objects.create(
        topic=topic, text=form.cleaned_data["text"], position=position, origin=SubQuery.Origin.USER
    )
    return _plan_response(request, topic)


@require_POST
def subquery_update(request: HttpRequest, topic_id: int, subquery_id: int) -> HttpResponse:
    topic = _reviewable(request, topic_id)
    subquery = get_object_or_404(topic.subqueries, pk=subquery_id)
    form = SubQueryForm(request.POST, instance=subquery)
    if not form.is_valid():
        return _plan_response(request, topic, form)
    subquery = form.save(commit=False)
    subquery.origin = SubQuery.Origin.USER
    subquery.save(update_fields=["text", "origin"])
    return _plan_response(request, topic)


@require_POST
def subquery_delete(request: HttpRequest, topic_id: int, subquery_id: int) -> HttpResponse:
    topic = _reviewable(request, topic_id)
    get_object_or_404(topic.subqueries, pk=subquery_id).delete()
    return _plan_response(request, topic)


@require_POST
def subquery_move(request: HttpRequest, topic_id: int, subquery_id: int) -> HttpResponse:
    """Swap a sub-query with its neighbour above or below, then renumber 0…n."""
    topic = _reviewable(request, topic_id)
    ordered = list(topic.subqueries.order_by("position", "id"))
    index = next((i for i, sq in enumerate(ordered) if sq.pk == subquery_id), None)
    if index is None:
        raise Http404
    other = index - 1 if request.POST.get("direction") == "up" else index + 1
    if 0 <= other < len(ordered):
        ordered[index], ordered[other] = ordered[other], ordered[index]
    for position, subquery in enumerate(ordered):
        SubQuery.objects.filter(pk=subquery.pk).update(position=position)
    return _plan_response(request, topic)


@require_POST
def plan_approve(request: HttpRequest, topic_id: int) -> HttpResponse:
    topic = _reviewable(request, topic_id)
    if not topic.subqueries.exists():
        messages.error(request, _("Add at least one sub-query before approving the plan."))
        return redirect(reverse("topic_detail", args=[topic.pk]) + "#plan")
    with transaction.atomic():
        topic.set_status(Topic.Status.QUEUED)
        tasks.enqueue_run(topic)
    return redirect("topic_detail", topic_id=topic.pk)


# --- Running ---------------------------------------------------------------------------------------


@require_POST
def topic_cancel(request: HttpRequest, topic_id: int) -> HttpResponse:
    topic = _topic(request, topic_id)
    if not topic.is_finished:
        topic.set_status(Topic.Status.CANCELLED, finished_at=timezone.now())
        messages.info(request, _("The topic was cancelled; what was found so far is kept."))
    return redirect("topic_detail", topic_id=topic.pk)


@require_POST
def topic_rerun(request: HttpRequest, topic_id: int) -> HttpResponse:
    """A failed or cancelled topic resumes where it stopped; a completed one is researched anew
    with the same approved plan (unchanged inputs are answered from the cache)."""
    topic = _topic(request, topic_id)
    if not topic.is_finished:
        return redirect("topic_detail", topic_id=topic.pk)
    with transaction.atomic():
        if topic.status == Topic.Status.COMPLETED:
            topic = _copy_with_plan(topic)
        else:
            _resume(topic)
    return redirect("topic_detail", topic_id=topic.pk)


def _resume(topic: Topic) -> None:
    if topic.subqueries.exists():
        topic.set_status(Topic.Status.QUEUED, error="", finished_at=None)
        tasks.enqueue_run(topic)
    else:
        topic.set_status(Topic.Status.PLANNING, error="", finished_at=None)
        tasks.enqueue_plan(topic)


def _copy_with_plan(topic: Topic) -> Topic:
    fields = ("question", "mode", "sources", "time_range", "language")
    copy = Topic.objects.create(
        owner=topic.owner, status=Topic.Status.QUEUED, **{name: getattr(topic, name) for name in fields}
    )
    SubQuery.objects.bulk_create(
        SubQuery(topic=copy, position=sq.position, text=sq.text, origin=sq.origin)
        for sq in topic.subqueries.filter(round=1)
    )
    tasks.enqueue_run(copy)
    return copy


@require_POST
def topic_delete(request: HttpRequest, topic_id: int) -> HttpResponse:
    _topic(request, topic_id).delete()  # a running worker stops at its next step
    messages.success(request, _("The topic was deleted."))
    return redirect("home")


# --- Sharing and export --------------------------------------------------------------------------


@require_POST
def share_create(request: HttpRequest, topic_id: int) -> HttpResponse:
    topic = _topic(request, topic_id)
    form = ShareLinkForm(request.POST)
    if not hasattr(topic, "report") or not form.is_valid():
        messages.error(request, _("Only a finished report can be shared."))
        return redirect("topic_detail", topic_id=topic.pk)
    days = form.cleaned_data["expires_in_days"]
    _link, token = ShareLink.issue(topic, timedelta(days=days) if days else None)
    url = request.build_absolute_uri(reverse("shared_report", args=[token]))
    # The token is stored hashed: this is the only time it can be shown.
    request.session["new_share_url"] = url
    return redirect(reverse("topic_detail", args=[topic.pk]) + "#sharing")


@require_POST
def share_revoke(request: HttpRequest, topic_id: int, link_id: int) -> HttpResponse:
    topic = _topic(request, topic_id)
    get_object_or_404(topic.share_links, pk=link_id).revoke()
    messages.success(request, _("The share link was revoked; it now answers 404."))
    return redirect(reverse("topic_detail", args=[topic.pk]) + "#sharing")


@require_GET
def report_markdown(request: HttpRequest, topic_id: int) -> HttpResponse:
    return export.markdown_response(_reported(_topic(request, topic_id)))


@require_GET
def report_pdf(request: HttpRequest, topic_id: int) -> HttpResponse:
    return export.pdf_response(request, _reported(_topic(request, topic_id)))


def _reported(topic: Topic) -> Topic:
    if not hasattr(topic, "report"):
        raise Http404("This topic has no report yet.")
    return topic


def _shared(token: str) -> Topic:
    link = ShareLink.objects.find(token)
    if link is None or not hasattr(link.topic, "report"):
        raise Http404
    return link.topic


@login_not_required
@require_GET
def shared_report(request: HttpRequest, token: str) -> HttpResponse:
    topic = _shared(token)
    return render(request, "research/shared_report.html", topic_context(topic, shared_token=token))


@login_not_required
@require_GET
def shared_report_markdown(request: HttpRequest, token: str) -> HttpResponse:
    return export.markdown_response(_shared(token))


@login_not_required
@require_GET
def shared_report_pdf(request: HttpRequest, token: str) -> HttpResponse:
    return export.pdf_response(request, _shared(token))
