"""The research workspace: my topics, one topic (plan review, live progress, report), sharing
and export. Every lookup starts from the signed-in user; another user's ids are a 404."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from mindsearch.querysets import AnyUser
from mindsearch.requests import HtmxHttpRequest, signed_in
from mindsearch.status import checks_for
from research import bibliography, export, fragments, versions, views_outline, workflow
from research.forms import SITE_FIELDS, ShareLinkForm, SubQueryForm, TopicForm
from research.models import ShareLink, SiteDefaults, Topic, TopicImage
from research.presenters import panel_context, report_without_rendering, topic_context, topic_page_context
from research.views_schedules import versions_context

PAGE_SIZE = 25


@require_GET
def topic_list(request: HtmxHttpRequest) -> HttpResponse:
    topics = Topic.objects.for_user(request.user)
    has_any = topics.exists()
    query, status = request.GET.get("q", "").strip(), request.GET.get("status", "")
    if query:
        topics = topics.matching(query)
    if status in Topic.Status.values:
        topics = topics.filter(status=status)
    topics = topics.only(*ROW_FIELDS).annotate(row_version=fragments.row_version(Topic))
    topics = topics.order_by("-created_at", "-id")
    page = Paginator(topics, PAGE_SIZE).get_page(request.GET.get("page"))
    context: dict[str, Any] = {"page": page, "query": query, "status": status}
    context["statuses"] = Topic.Status.choices
    rows = topic_rows(context)
    if request.htmx and request.htmx.target == "topic-rows":
        return HttpResponse(rows)
    context.update(rows=rows, form_fields=blank_form_fields(request.user), has_any=has_any)
    context["checks"] = [] if has_any else checks_for(request.user)
    return render(request, "research/topic_list.html", context)


HISTORY_SIZE = 12


@require_GET
def topic_history(request: HttpRequest) -> HttpResponse:
    """The header's history menu (every page, loaded by htmx when it is opened): the newest
    topics with their status, or those matching what was typed in its search box."""
    topics = Topic.objects.for_user(request.user)
    query = request.GET.get("q", "").strip()
    if query:
        topics = topics.matching(query)
    topics = topics.only(*ROW_FIELDS).order_by("-created_at", "-id")[:HISTORY_SIZE]
    return render(request, "research/_history.html", {"topics": topics, "query": query})


# What a row of the topic list shows (the only columns read).
ROW_FIELDS = ("id", "question", "mode", "status", "stage", "sources", "created_at", "archive_bytes")


def topic_rows(context: dict[str, Any]) -> SafeString:
    """The rows of one page of the list (what an htmx search swaps in), from the fragment cache:
    versioned by the listed rows, named by what else they show (page, search, status filter)."""
    page = context["page"]
    shown = repr((page.number, page.paginator.num_pages, context["query"], context["status"]))
    name = f"topic-rows:{hashlib.sha256(shown.encode()).hexdigest()}"
    version = fragments.version_of_rows(page.object_list)
    return fragments.fragment(version, name, lambda: render_to_string("research/_topic_rows.html", context))


def blank_form_fields(user: AnyUser | None = None) -> SafeString:
    """The new-topic form's fields before anything was typed: the same for everyone (cached),
    but for a user with saved site lists, whose form starts with them."""
    initial = SiteDefaults.initial_for(user)
    if initial:
        return render_to_string("_form_fields.html", {"form": TopicForm(initial=initial)})
    return fragments.fragment(
        fragments.NO_ROWS, "topic-form", lambda: render_to_string("_form_fields.html", {"form": TopicForm()})
    )


@require_POST
def topic_create(request: HttpRequest) -> HttpResponse:
    if request.FILES.get("image"):
        # The cheap limit first: a picture is decoded only for a topic that may start (the
        # workflow checks again under its lock).
        try:
            workflow.check_can_start(signed_in(request))
        except workflow.OverLimit as over:
            form = TopicForm(request.POST)
            form.is_valid()
            form.add_error(None, over.message)
            return _topic_list_with_form(request, form, status=429)
    form = TopicForm(request.POST, request.FILES)
    if not form.is_valid():
        return _topic_list_with_form(request, form, status=400)
    try:
        image = form.cleaned_data.get("image")
        topic = workflow.start_topic(form.save(commit=False), signed_in(request), image=image)
        if form.cleaned_data.get("remember_sites"):
            SiteDefaults.objects.update_or_create(
                owner=topic.owner, defaults={name: getattr(topic, name) for name in SITE_FIELDS}
            )
    except workflow.OverLimit as over:
        form.add_error(None, over.message)
        return _topic_list_with_form(request, form, status=429)
    return redirect("topic_detail", topic_id=topic.pk)


def _topic_list_with_form(request: HttpRequest, form: TopicForm, status: int) -> HttpResponse:
    topics = Topic.objects.for_user(request.user)
    listed = topics.only(*ROW_FIELDS).annotate(row_version=fragments.row_version(Topic))
    page = Paginator(listed.order_by("-created_at", "-id"), PAGE_SIZE).get_page(1)
    context = {"form": form, "page": page, "query": "", "status": "", "has_any": topics.exists()}
    context.update(statuses=Topic.Status.choices, checks=[], rows=topic_rows(context))
    return render(request, "research/topic_list.html", context, status=status)


def _topic(request: HttpRequest, topic_id: int) -> Topic:
    return get_object_or_404(Topic.objects.for_user(request.user), pk=topic_id)


@require_GET
def topic_detail(request: HttpRequest, topic_id: int) -> HttpResponse:
    topic = _topic(request, topic_id)
    # A new share link's token is shown once, right after it was made, and never again.
    new_share_url = request.session.pop("new_share_url", None)
    context = topic_page_context(topic, new_share_url=new_share_url)
    context.update(versions_context(topic, request.user))
    return render(request, "research/topic_detail.html", context)


# --- Plan review ---------------------------------------------------------------------------------


def _plan_response(
    request: HtmxHttpRequest,
    topic: Topic,
    *,
    typed: list[TypedSubQuery] | None = None,
    form: SubQueryForm | None = None,
    error: str = "",
    keep_new: bool = True,
) -> HttpResponse:
    """The plan panel (htmx) or the page. With `typed`, `form` or `error`, the plan as it was
    sent back with its errors beside the fields, answered 400 and nothing of it lost."""
    failed = error or (form is not None and form.errors) or any(sq.errors for sq in typed or [])
    context = {"plan_form": form or SubQueryForm(), "plan_error": error}
    # What was typed into *Add* and not added yet stays in its field whatever was clicked.
    context["new_text"] = request.POST.get("text", "") if keep_new or failed else ""
    if request.htmx:
        context.update(panel_context(topic, {"plan"}))
        if typed is not None:
            context["subqueries"] = typed
        return render(request, "research/_plan.html", context, status=400 if failed else 200)
    if not failed:
        return redirect(reverse("topic_detail", args=[topic.pk]) + "#plan")
    context = {**topic_page_context(topic), **context}
    if typed is not None:
        context["subqueries"] = typed
    return render(request, "research/topic_detail.html", context, status=400)


def _reviewable(request: HttpRequest, topic_id: int) -> Topic:
    topic = _topic(request, topic_id)
    if topic.status != Topic.Status.AWAITING_APPROVAL:
        raise Http404("The plan of this topic can no longer be edited.")
    return topic


@dataclass
class TypedSubQuery:
    """A row of the plan form as it was sent: `text` is what was typed, `stored` what is saved,
    `errors` what is wrong with it (the page shows them beside its field)."""

    pk: int
    text: str
    stored: str
    errors: list[str] = field(default_factory=list)


def _typed_plan(request: HttpRequest, topic: Topic, skip: int | None = None) -> list[TypedSubQuery]:
    """The plan in its order with what the page's fields held (`text-<id>`), checked. The field
    of sub-query `skip` (the one being deleted, which may be empty or wrong) is not read."""
    typed = []
    for subquery in topic.subqueries.order_by("round", "position", "id"):
        row = TypedSubQuery(subquery.pk, subquery.text, subquery.text)
        typed.append(row)
        sent = request.POST.get(f"text-{subquery.pk}")
        if sent is None or subquery.pk == skip:  # None: added in another tab after the page loaded
            continue
        form = SubQueryForm({"text": sent})
        if form.is_valid():
            row.text = form.cleaned_data["text"]
        else:
            row.text, row.errors = sent, [str(error) for error in form.errors["text"]]
    return typed


def _save_typed(topic: Topic, typed: list[TypedSubQuery]) -> None:
    """Save every field whose text differs from the stored one (it becomes the user's own)."""
    if any(sq.text != sq.stored for sq in typed):
        workflow.replace_plan(topic, [(sq.pk, sq.text) for sq in typed])


def _with_typed_saved(request: HtmxHttpRequest, topic: Topic, skip: int | None = None) -> HttpResponse | None:
    """First of every plan action: save what was typed. The error answer when it cannot be."""
    typed = _typed_plan(request, topic, skip)
    if any(sq.errors for sq in typed):
        form = SubQueryForm(request.POST) if request.POST.get("text", "").strip() else None
        if form is not None:
            form.is_valid()
        return _plan_response(request, topic, typed=typed, form=form)
    try:
        _save_typed(topic, typed)
    except workflow.Refused as refused:  # approved meanwhile, in another tab
        raise Http404(refused.message) from None
    return None


@require_POST
def subquery_add(request: HtmxHttpRequest, topic_id: int) -> HttpResponse:
    topic = _reviewable(request, topic_id)
    if (failed := _with_typed_saved(request, topic)) is not None:
        return failed
    form = SubQueryForm(request.POST)
    if not form.is_valid():
        return _plan_response(request, topic, form=form)
    try:
        workflow.add_subquery(topic, form.cleaned_data["text"])
    except workflow.OverLimit as over:
        form.add_error("text", over.message)
        return _plan_response(request, topic, form=form)
    except workflow.Refused as refused:  # approved meanwhile, in another tab
        raise Http404(refused.message) from None
    return _plan_response(request, topic, keep_new=False)


@require_POST
def subquery_update(request: HtmxHttpRequest, topic_id: int, subquery_id: int) -> HttpResponse:
    """Save: every field of the plan form is saved, this one included. A lone `text` field (an
    older page, a script) still edits this sub-query."""
    topic = _reviewable(request, topic_id)
    subquery = get_object_or_404(topic.subqueries, pk=subquery_id)
    if f"text-{subquery.pk}" in request.POST:
        return _with_typed_saved(request, topic) or _plan_response(request, topic)
    form = SubQueryForm(request.POST)
    if not form.is_valid():
        return _plan_response(request, topic, form=form)
    _refused_as_404(workflow.update_subquery, topic, subquery.pk, form.cleaned_data["text"])
    return _plan_response(request, topic, keep_new=False)


@require_POST
def subquery_delete(request: HtmxHttpRequest, topic_id: int, subquery_id: int) -> HttpResponse:
    topic = _reviewable(request, topic_id)
    subquery = get_object_or_404(topic.subqueries, pk=subquery_id)
    # The row being deleted may be empty or wrong: its field is not checked.
    if (failed := _with_typed_saved(request, topic, skip=subquery.pk)) is not None:
        return failed
    _refused_as_404(workflow.delete_subquery, topic, subquery.pk)
    return _plan_response(request, topic)


@require_POST
def subquery_move(request: HtmxHttpRequest, topic_id: int, subquery_id: int) -> HttpResponse:
    """Swap a sub-query with its neighbour above or below."""
    topic = _reviewable(request, topic_id)
    if (failed := _with_typed_saved(request, topic)) is not None:
        return failed
    up = request.POST.get("direction") == "up"
    _refused_as_404(workflow.move_subquery, topic, subquery_id, up=up)
    return _plan_response(request, topic)


def _refused_as_404(step: Callable[..., object], *args: Any, **kwargs: Any) -> None:
    """A plan step on a plan that was approved meanwhile (another tab), or on a sub-query that
    is not in it, answers 404 like the page's other plan actions."""
    try:
        step(*args, **kwargs)
    except workflow.Refused as refused:
        raise Http404(refused.message) from None


@require_POST
def plan_approve(request: HtmxHttpRequest, topic_id: int) -> HttpResponse:
    """Approve exactly what the page shows — typed edits and a typed, not yet added sub-query
    too — in one workflow step; a plan changed elsewhere since the page showed it is refused."""
    topic = _reviewable(request, topic_id)
    typed = _typed_plan(request, topic)
    form = SubQueryForm(request.POST) if request.POST.get("text", "").strip() else None
    if any(sq.errors for sq in typed) or (form is not None and not form.is_valid()):
        return _plan_response(request, topic, typed=typed, form=form)
    items: list[tuple[int | None, str]] = [(sq.pk, sq.text) for sq in typed]
    if form is not None:
        items.append((None, form.cleaned_data["text"]))
    shown = workflow.ShownPlan(
        version=request.POST.get("plan_version") or None,
        items=items,
        token_cap=request.POST.get("token_cap"),
        **views_outline.typed_outline(request),  # the report's sections and length (issue 30)
    )
    try:
        workflow.approve_plan(topic, shown)
    except workflow.Refused as refused:  # changed or approved elsewhere, empty, too big, too many running
        if isinstance(refused, workflow.BadOutline):
            request.outline_typed = shown.outline  # type: ignore[attr-defined]  # shown again, not lost
        return _plan_response(request, topic, error=refused.message)
    return redirect("topic_detail", topic_id=topic.pk)


# --- Running ---------------------------------------------------------------------------------------


@require_POST
def topic_cancel(request: HttpRequest, topic_id: int) -> HttpResponse:
    topic = _topic(request, topic_id)
    if workflow.cancel_topic(topic):
        messages.info(request, _("The topic was cancelled; what was found so far is kept."))
    return redirect("topic_detail", topic_id=topic.pk)


@require_POST
def topic_rerun(request: HttpRequest, topic_id: int) -> HttpResponse:
    topic = _topic(request, topic_id)
    try:
        topic = workflow.rerun_topic(topic)
    except workflow.OverLimit as over:
        messages.error(request, over.message)
    except workflow.Refused:  # still running: the page shows it as it is
        pass
    return redirect("topic_detail", topic_id=topic.pk)


@require_POST
def topic_delete(request: HttpRequest, topic_id: int) -> HttpResponse:
    workflow.delete_topic(_topic(request, topic_id))  # a running worker stops at its next step
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
    link, token = ShareLink.issue(topic, timedelta(days=days) if days else None)
    if form.cleaned_data["pinned"]:
        link.pinned = True
        link.save(update_fields=["pinned"])
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


@require_GET
def report_docx(request: HttpRequest, topic_id: int) -> HttpResponse:
    return export.docx_response(_reported(_topic(request, topic_id)))


@require_GET
def report_bibtex(request: HttpRequest, topic_id: int) -> HttpResponse:
    """The report's sources as BibTeX (research/bibliography.py)."""
    return bibliography.bibtex_response(_reported(_topic(request, topic_id)))


@require_GET
def report_ris(request: HttpRequest, topic_id: int) -> HttpResponse:
    """The report's sources as RIS (research/bibliography.py)."""
    return bibliography.ris_response(_reported(_topic(request, topic_id)))


def _reported(topic: Topic) -> Topic:
    if report_without_rendering(topic) is None:
        raise Http404("This topic has no report yet.")
    return topic


class ShareGone(Exception):
    """A share link that is unknown, revoked or expired (or whose report is gone)."""


def _shared(token: str) -> Topic:
    link = ShareLink.objects.find(token)
    if link is None:
        raise ShareGone
    topic = link.topic if link.pinned else versions.newest_reported(link.topic)
    if report_without_rendering(topic) is None:
        raise ShareGone
    return topic


def shared(view: Callable[[HttpRequest, Topic, str], HttpResponse]) -> Callable[..., HttpResponse]:
    """A page behind a share token: anyone may open it; a dead link gets the styled 404 page
    that says so (also with DEBUG on, which would otherwise list the site's URLs)."""

    @wraps(view)
    def wrapper(request: HttpRequest, token: str) -> HttpResponse:
        try:
            topic = _shared(token)
        except ShareGone:
            return render(request, "research/share_gone.html", status=404)
        return view(request, topic, token)

    return login_not_required(require_GET(wrapper))


@shared
def shared_report(request: HttpRequest, topic: Topic, token: str) -> HttpResponse:
    return render(request, "research/shared_report.html", topic_context(topic, shared_token=token))


@shared
def shared_topic_image(request: HttpRequest, topic: Topic, token: str) -> HttpResponse:
    response = image_response(topic)
    response["Cache-Control"] = "no-store"  # a revoked link must stop showing it at once
    return response


@require_GET
def topic_image(request: HttpRequest, topic_id: int) -> HttpResponse:
    """The question's picture, for its owner only (another user's topic is a 404)."""
    return image_response(_topic(request, topic_id))


def image_response(topic: Topic) -> HttpResponse:
    image = TopicImage.objects.filter(topic=topic).first()
    if image is None:
        raise Http404("This topic has no picture.")
    response = HttpResponse(bytes(image.data), content_type=image.content_type)
    response["Content-Disposition"] = (
        f'inline; filename="topic-{topic.pk}.{image.content_type.split("/")[-1]}"'
    )
    response["Cache-Control"] = "private, max-age=3600"
    response["X-Content-Type-Options"] = "nosniff"
    return response


@shared
def shared_report_markdown(request: HttpRequest, topic: Topic, token: str) -> HttpResponse:
    return export.markdown_response(topic)


@shared
def shared_report_pdf(request: HttpRequest, topic: Topic, token: str) -> HttpResponse:
    return export.pdf_response(request, topic)


@shared
def shared_report_docx(request: HttpRequest, topic: Topic, token: str) -> HttpResponse:
    return export.docx_response(topic)


@shared
def shared_report_bibtex(request: HttpRequest, topic: Topic, token: str) -> HttpResponse:
    return bibliography.bibtex_response(topic)


@shared
def shared_report_ris(request: HttpRequest, topic: Topic, token: str) -> HttpResponse:
    return bibliography.ris_response(topic)
