"""Research over the API: topics, their plan, run events, report and share links, and the
cache statistics for staff. Operations are thin: the same workflow, forms and export as the
pages. Every lookup starts from the authenticated user; another user's ids are a 404."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from mindsearch.api_common import (
    Limit,
    Offset,
    Page,
    Text,
    choices_enum,
    errors,
    form_invalid,
    invalid,
    needs,
    page_of,
)
from mindsearch.models import TokenScope
from research import bibliography, export, images, keep, versions, workflow
from research.forms import SITE_FIELDS, SubQueryForm, TopicForm
from research.models import Citation, Document, FollowUp, Report, RunEvent, ShareLink, Topic, TopicImage
from research.pipeline import cache, outline
from research.presenters import followup_item, report_of, thread_context
from research.views import image_response
from retrieval.api import DocumentOut
from retrieval.uploads import UploadRejected

router = Router()

MAX_EVENTS = 1000
# Event numbers are 32-bit in PostgreSQL.
MAX_INT = 2**31 - 1


# --- Schemas ---------------------------------------------------------------------------------------

TopicStatus = choices_enum("TopicStatus", Topic.Status)
TopicSources = choices_enum("TopicSources", Topic.Sources)
TopicMode = choices_enum("TopicMode", Topic.Mode)
TopicTimeRange = choices_enum("TopicTimeRange", Topic.TimeRange)
TopicPapers = choices_enum("TopicPapers", Topic.Papers)
CitationVerdict = choices_enum("CitationVerdict", Citation.Verdict)
CitationMethod = choices_enum("CitationMethod", Citation.Method)


class TopicIn(Schema):
    question: Text = Field(description="The question to research, as you would ask an expert.")
    sources: TopicSources = Field(
        TopicSources.WEB, description="Search the web, your documents, both, or scholarly papers only."
    )
    papers: TopicPapers = Field(
        TopicPapers.AUTO,
        description="Search papers (OpenAlex, arXiv, PubMed, Crossref) beside the web: auto (when the "
        "question is a scholarly one), always or never.",
    )
    mode: TopicMode = Field(TopicMode.QUICK, description="Deep mode searches in rounds.")
    time_range: TopicTimeRange = Field(TopicTimeRange.NONE, description="Only results from this period.")
    auto_approve: bool = Field(False, description="Run the plan without waiting for review.")
    sites_only: list[str] = Field(
        [], description="Only web results on these sites (host names; each covers its subdomains)."
    )
    sites_prefer: list[str] = Field([], description="Read and cite pages of these sites first.")
    sites_avoid: list[str] = Field([], description="Never web results on these sites.")
    token_cap: int | None = Field(
        None,
        ge=1,
        description="Past this many tokens the run stops gathering and writes its report from what it has.",
    )
    # The report's shape (issue 30, research/pipeline/outline.py).
    report_kind: str = Field(
        "",
        description="'' (one pass), brief, detailed, review or comparison; "
        "the last three are planned in sections.",
    )
    outline: list[str] = Field(
        [], description="The report's sections in order (empty: proposed by the plan for the kind)."
    )
    report_length: str = Field("", description="short, standard, long or a number of words (100–20000).")
    image: str | None = Field(
        None,
        description="A picture the question is about, base64 or a data URL (JPEG, PNG, GIF or WebP, "
        "at most TOPIC_IMAGE_MAX_BYTES). Stored privately without its metadata; a vision model "
        "(VISION_MODEL) describes it and its labels join the question.",
    )


class TopicImageOut(Schema):
    url: str = Field(description="Where the owner downloads the stored (re-encoded) picture.")
    content_type: str
    width: int
    height: int
    analysis: str = Field(description="pending, done, no_vision (no VISION_MODEL) or failed.")
    labels: list[str]
    entities: list[str]
    text: str = Field(description="Text the vision model read in the picture.")
    description: str
    vision_model: str
    error: str


class TopicOut(Schema):
    id: int
    question: str
    status: TopicStatus
    stage: str
    mode: TopicMode
    sources: TopicSources
    papers: TopicPapers
    time_range: TopicTimeRange
    language: str
    auto_approve: bool
    error: str
    llm_model: str = Field(description="Empty when the topic was researched without an LLM.")
    last_event_seq: int
    has_report: bool
    sites_only: list[str]
    sites_prefer: list[str]
    sites_avoid: list[str]
    token_cap: int | None
    report_kind: str
    outline: list[str]
    report_length: str
    series: int = Field(description="The first version's id: every version of the topic shares it.")
    previous_version: int | None = Field(description="The version this one was researched again from.")
    image: TopicImageOut | None = Field(None, description="The picture the question came with, if any.")
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @staticmethod
    def resolve_series(topic: Topic) -> int:
        return topic.series or topic.pk

    @staticmethod
    def resolve_previous_version(topic: Topic) -> int | None:
        return topic.previous_version_id

    @staticmethod
    def resolve_image(topic: Topic) -> dict[str, Any] | None:
        image = TopicImage.objects.defer("data").filter(topic=topic).first()
        if image is None:
            return None
        fields = ("content_type", "width", "height", "analysis", "labels", "entities", "text")
        return {
            "url": reverse("api:get_topic_image", args=[topic.pk]),
            **{name: getattr(image, name) for name in fields},
            "description": image.description,
            "vision_model": image.vision_model,
            "error": image.error,
        }

    @staticmethod
    def resolve_has_report(topic: Topic) -> bool:
        annotated = getattr(topic, "report_exists", None)
        return annotated if annotated is not None else hasattr(topic, "report")


class TopicPage(Page):
    items: list[TopicOut]


class SubQueryOut(Schema):
    id: int
    position: int
    text: str
    origin: str
    round: int


class PlanOut(Schema):
    topic_id: int
    status: TopicStatus
    editable: bool = Field(description="True while the plan waits for review.")
    version: str = Field(
        description="The plan's fingerprint: pass it when approving to approve this plan and no other."
    )
    subqueries: list[SubQueryOut]
    outline: list[str] = Field(description="The report's sections in order (empty: written in one pass).")
    report_length: str = Field(description="short, standard, long, a number of words, or '' (standard).")


PlanVersion = Annotated[
    str,
    Query(
        "",
        max_length=64,
        description="The plan `version` you reviewed (GET …/plan): one changed since is refused (409).",
    ),
]


class PlanItemIn(Schema):
    id: int | None = Field(None, description="An existing sub-query's id; leave out for a new one.")
    text: Text


class PlanIn(Schema):
    subqueries: list[PlanItemIn] = Field(
        max_length=settings.RESEARCH_MAX_SUBQUERIES,  # the workflow's cap, as the server was started
        description="The whole plan in order: listed ids are kept (and edited), new items added, "
        "sub-queries left out deleted.",
    )
    outline: list[str] | None = Field(
        None, description="The report's sections in order ([]: one pass); leave out to keep them."
    )
    report_length: str | None = Field(
        None, description="short, standard, long or words; leave out to keep it."
    )


class EventOut(Schema):
    seq: int
    stage: str
    level: str
    message: str
    done: int | None
    total: int | None
    data: dict[str, Any]
    created_at: datetime


class EventsOut(Schema):
    topic_id: int
    status: TopicStatus
    last_seq: int = Field(description="Pass this as `since` to get only newer events.")
    has_more: bool
    events: list[EventOut]


class SourceOut(Schema):
    n: int
    title: str
    url: str = ""
    document_id: int | None = None
    fetched_via: str = ""
    score: float | None = None
    # A paper's (research/pipeline/papers.py); absent for web pages and documents.
    doi: str = Field("", description="A paper's DOI, bare (10.1234/abc); empty for other sources.")
    authors: list[str] = Field([], description="A paper's authors.")
    year: int | None = Field(None, description="A paper's year of publication.")
    venue: str = Field("", description="A paper's journal, conference or archive.")


class CitationOut(Schema):
    id: int | None = Field(
        None,
        description="The citation's id (`POST /api/notes` notes its passage by it); none in a "
        "follow-up (noted by `followup_id` and its place in `citations`).",
    )
    sentence_index: int = Field(description="The sentence's place among the report's sentences, from 0.")
    sentence: str = Field(description="The sentence as plain text, without its citations.")
    n: int = Field(description="The number of the source it cites.")
    verdict: CitationVerdict = Field(description="Whether the source's text supports the sentence.")
    local_verdict: CitationVerdict = Field(description="What words, numbers and embeddings alone said.")
    method: CitationMethod = Field(description="What decided the verdict.")
    score: float = Field(description="The local score of the best passage, 0–1.")
    coverage: float = Field(description="Share of the sentence's content words found in that passage.")
    similarity: float | None = Field(
        description="Embedding cosine with that passage; null without embeddings."
    )
    passage: str = Field(description="The passage of the source most like the sentence.")
    note: str = Field(description="Why: numbers the source lacks, or the LLM's reason.")


class CitationCountsOut(Schema):
    total: int
    supported: int
    weak: int
    unsupported: int


ReportMark = choices_enum("ReportMark", Report.Mark)


class WithoutModelOut(Schema):
    stage: str = Field(description="The stage (as the run events name it).")
    count: int | None = Field(
        description="How many of its rows were made without the model; null: not counted."
    )
    total: int | None = Field(description="How many rows it made in all; null: not counted.")


class ReportOut(Schema):
    topic_id: int
    markdown: str = Field(description="The report as written, with its numbered sources list.")
    html: str = Field(description="The report's body as sanitised HTML, without the sources list.")
    sources: list[SourceOut]
    model: str = Field(description="The LLM that wrote it; empty for the extractive engine.")
    created_at: datetime
    citations: list[CitationOut] = Field(
        description="Each cited sentence checked against each source it cites, in reading order; "
        "empty for reports written before the check existed."
    )
    citation_counts: CitationCountsOut | None = Field(
        description="How many citations each verdict got; null when nothing was checked."
    )
    marks: list[ReportMark] = Field(  # type: ignore[valid-type]
        description="What the checks of the whole report found: truncated (cut off at the model's token "
        "limit), uncited (cites none of its sources), wrong_language (not in the question's language), "
        "unsupported (most citations not supported); empty when none."
    )
    without_model: list[WithoutModelOut] = Field(
        description="The stages that ran without the configured model (its answers could not be read, "
        "or it was given up on); empty when it did all, or when no model was configured."
    )
    changes: dict[str, Any] | None = Field(
        description="What changed since the previous version: sources added and dropped, claims added, "
        "removed and changed (each with its sources and closest passage), `since` and `empty`; "
        "null for a first version."
    )


class VersionOut(Schema):
    number: int = Field(description="1 for the first version.")
    id: int
    status: TopicStatus
    created_at: datetime
    finished_at: datetime | None
    current: bool = Field(description="True for the topic asked about.")


FollowUpKind = choices_enum("FollowUpKind", FollowUp.Kind)
FollowUpStatus = choices_enum("FollowUpStatus", FollowUp.Status)


class FollowUpIn(Schema):
    question: Text = Field("", description="A question about the topic, answered from its sources first.")
    section: Text = Field(
        "", description="Instead of a question: a heading of the report to expand (as the report writes it)."
    )


class FollowUpOut(Schema):
    id: int
    position: int = Field(description="Its place in the topic's thread, from 1.")
    kind: FollowUpKind
    question: str
    section: str = Field(description="The heading expanded, for an expand follow-up.")
    status: FollowUpStatus
    searched: bool = Field(description="A new search was made: the topic's sources did not cover it.")
    answer: str = Field(description="Markdown; [n] are the topic's source numbers, extended by `sources`.")
    html: str = Field(description="The answer as sanitised HTML, citations linked to #source-n.")
    sources: list[SourceOut] = Field(description="Sources this answer added, numbered after the topic's.")
    citations: list[CitationOut] = Field(description="The answer's citations checked against their sources.")
    model: str = Field(description="The LLM that wrote it; empty for the extractive engine.")
    error: str = Field(description="Why it failed, for a failed follow-up.")
    created_at: datetime
    finished_at: datetime | None


class ShareLinkIn(Schema):
    expires_in_days: int | None = Field(
        None, ge=1, le=365, description="Leave out for a link that never expires."
    )


class ShareLinkOut(Schema):
    id: int
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    usable: bool

    @staticmethod
    def resolve_usable(link: ShareLink) -> bool:
        return link.is_usable


class NewShareLinkOut(ShareLinkOut):
    token: str = Field(description="Shown this once: only its hash is stored.")
    url: str


class CacheKindOut(Schema):
    kind: str
    entries: int
    bytes: int
    hits: int
    misses: int
    hit_rate: float


class CacheStatsOut(Schema):
    kinds: list[CacheKindOut]


# --- Lookups ---------------------------------------------------------------------------------------


def _topics(request: HttpRequest) -> Any:
    return Topic.objects.for_user(request.auth).annotate(
        report_exists=Exists(Report.objects.filter(topic=OuterRef("pk")))
    )


def _topic(request: HttpRequest, topic_id: int) -> Topic:
    topic = _topics(request).filter(pk=topic_id).first()
    if topic is None:
        raise Http404(f"Topic {topic_id} not found.")
    return topic


def _reported(topic: Topic) -> Topic:
    if not topic.report_exists:
        raise Http404(f"Topic {topic.pk} has no report yet.")
    return topic


# --- Topics ----------------------------------------------------------------------------------------


@router.post("/topics", response={201: TopicOut, **errors()}, tags=["topics"])
@needs(TokenScope.RESEARCH)
def create_topic(request: HttpRequest, payload: TopicIn) -> Status:
    """Start researching a question; its plan is written next (poll the topic or its events)."""
    fields = payload.model_dump(mode="json", exclude={"image"})
    fields.update({name: ", ".join(fields[name]) for name in SITE_FIELDS})
    fields["outline"] = "\n".join(fields["outline"])
    form = TopicForm(data=fields)
    if not form.is_valid():
        raise form_invalid(form)
    image = None
    if payload.image:
        workflow.check_can_start(request.auth)  # before the picture is decoded; again under the lock
        try:
            image = images.prepare(images.decode_base64(payload.image))
        except images.ImageRejected as rejected:
            raise invalid(("body", "image"), [rejected.message]) from None
    topic = workflow.start_topic(form.save(commit=False), request.auth, image=image)
    topic.report_exists = False
    return Status(201, topic)


@router.get(
    "/topics/{topic_id}/image",
    response={200: None, **errors(404)},
    tags=["topics"],
    openapi_extra={"responses": {200: {"description": "The picture (image/jpeg or image/png)."}}},
)
def get_topic_image(request: HttpRequest, topic_id: int) -> HttpResponse:
    """The question's picture as stored: re-encoded, without metadata."""
    return image_response(_topic(request, topic_id))


@router.get("/topics", response={200: TopicPage, **errors()}, tags=["topics"])
def list_topics(
    request: HttpRequest,
    q: Annotated[Text, Query("", max_length=500, description="Words in the question or a sub-query.")] = "",
    status: TopicStatus | None = None,
    limit: Limit = 25,
    offset: Offset = 0,
) -> dict[str, Any]:
    """My topics, newest first."""
    topics = _topics(request)
    if q.strip():
        topics = topics.matching(q.strip())
    if status:
        topics = topics.filter(status=status.value)
    return page_of(topics.order_by("-created_at", "-id"), limit=limit, offset=offset)


@router.get("/topics/{topic_id}", response={200: TopicOut, **errors(404)}, tags=["topics"])
def get_topic(request: HttpRequest, topic_id: int) -> Topic:
    return _topic(request, topic_id)


@router.delete("/topics/{topic_id}", response={204: None, **errors(404)}, tags=["topics"])
@needs(TokenScope.RESEARCH)
def delete_topic(request: HttpRequest, topic_id: int) -> Status:
    """Delete the topic and everything its run produced; a running worker stops at its next step."""
    workflow.delete_topic(_topic(request, topic_id))
    return Status(204, None)


@router.post("/topics/{topic_id}/cancel", response={200: TopicOut, **errors(404, 409)}, tags=["topics"])
@needs(TokenScope.RESEARCH)
def cancel_topic(request: HttpRequest, topic_id: int) -> Topic:
    """Stop the topic where it is; what was found so far is kept."""
    topic = _topic(request, topic_id)
    if not workflow.cancel_topic(topic):
        raise HttpError(409, f"Topic {topic.pk} has already finished ({topic.status}).")
    return topic


@router.post(
    "/topics/{topic_id}/rerun", response={201: TopicOut, 200: TopicOut, **errors(404, 409)}, tags=["topics"]
)
@needs(TokenScope.RESEARCH)
def rerun_topic(request: HttpRequest, topic_id: int) -> Status:
    """Research a finished topic again. A failed or cancelled one resumes in place (200); a
    completed one is copied with the same plan into a new topic (201), whose id is returned."""
    topic = _topic(request, topic_id)
    try:
        running = workflow.rerun_topic(topic)
    except workflow.Refused as refused:
        raise HttpError(409, refused.message) from None
    if running.pk == topic.pk:
        return Status(200, _topic(request, topic.pk))
    running.report_exists = False
    return Status(201, running)


# --- Plan ------------------------------------------------------------------------------------------


def _plan(topic: Topic) -> dict[str, Any]:
    return {
        "topic_id": topic.pk,
        "status": topic.status,
        "editable": topic.status == Topic.Status.AWAITING_APPROVAL,
        "version": topic.plan_version(),
        "subqueries": list(topic.subqueries.order_by("round", "position", "id")),
        "outline": topic.outline,
        "report_length": topic.report_length,
    }


@router.get("/topics/{topic_id}/plan", response={200: PlanOut, **errors(404)}, tags=["plan"])
def get_plan(request: HttpRequest, topic_id: int) -> dict[str, Any]:
    return _plan(_topic(request, topic_id))


@router.put("/topics/{topic_id}/plan", response={200: PlanOut, **errors(404, 409)}, tags=["plan"])
@needs(TokenScope.RESEARCH)
def edit_plan(request: HttpRequest, topic_id: int, payload: PlanIn) -> dict[str, Any]:
    """Replace the plan while it waits for review (409 after that)."""
    topic = _topic(request, topic_id)
    items, seen = [], set()
    for number, item in enumerate(payload.subqueries):
        form = SubQueryForm(data={"text": item.text})
        if not form.is_valid():
            raise form_invalid(form, ("body", "subqueries", number))
        if item.id is not None and item.id in seen:
            raise invalid(("body", "subqueries", number, "id"), [f"Sub-query {item.id} is listed twice."])
        seen.add(item.id)
        items.append((item.id, form.cleaned_data["text"]))
    _check_outline(payload)  # before anything is saved
    try:
        workflow.replace_plan(topic, items)
        if payload.outline is not None or payload.report_length is not None:
            workflow.set_outline(topic, payload.outline, payload.report_length)
    except workflow.NotInPlan as missing:  # another user's sub-query is a 404 like a missing one
        raise Http404(missing.message) from None
    except workflow.Refused as refused:
        raise HttpError(409, refused.message) from None
    return _plan(topic)


def _check_outline(payload: PlanIn) -> None:
    """The plan's outline and length as sent, or 422 with what is wrong (research/pipeline/outline.py)."""
    try:
        if payload.outline is not None:
            outline.read_outline(payload.outline)
    except outline.OutlineError as error:
        raise invalid(("body", "outline"), [str(error)]) from None
    try:
        if payload.report_length is not None:
            outline.read_length(payload.report_length)
    except outline.OutlineError as error:
        raise invalid(("body", "report_length"), [str(error)]) from None


@router.post("/topics/{topic_id}/plan/approve", response={200: TopicOut, **errors(404, 409)}, tags=["plan"])
@needs(TokenScope.RESEARCH)
def approve_plan(request: HttpRequest, topic_id: int, version: PlanVersion = "") -> Topic:
    """Run exactly the reviewed plan. With `version` (from the plan's GET), a plan changed
    since then is refused (409) and nothing is approved."""
    topic = _topic(request, topic_id)
    try:
        workflow.approve_plan(topic, workflow.ShownPlan(version=version or None))
    except workflow.Refused as refused:
        raise HttpError(409, refused.message) from None
    return topic


# --- Run events and report -------------------------------------------------------------------------


@router.get("/topics/{topic_id}/events", response={200: EventsOut, **errors(404)}, tags=["run"])
def list_events(
    request: HttpRequest,
    topic_id: int,
    since: Annotated[int, Query(ge=0, le=MAX_INT, description="Only events after this sequence number.")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_EVENTS)] = 200,
) -> dict[str, Any]:
    """The run's progress log after `since`, oldest first; poll with the returned `last_seq`
    until the topic's status is completed, failed or cancelled."""
    topic = _topic(request, topic_id)
    events = list(RunEvent.objects.filter(topic=topic).since(since)[: limit + 1])
    page = events[:limit]
    return {
        "topic_id": topic.pk,
        "status": topic.status,
        "last_seq": page[-1].seq if page else since,
        "has_more": len(events) > limit,
        "events": page,
    }


@router.get("/topics/{topic_id}/report", response={200: ReportOut, **errors(404)}, tags=["report"])
def get_report(request: HttpRequest, topic_id: int) -> dict[str, Any]:
    topic = _reported(_topic(request, topic_id))
    shown = report_of(topic)
    report = shown["report"]
    return {
        "topic_id": topic.pk,
        "markdown": report.markdown,
        "html": str(shown["html"]),
        "sources": report.sources,
        "model": report.model,
        "created_at": report.created_at,
        "citations": shown["citations"],
        "citation_counts": shown["citation_counts"],
        "marks": [mark["mark"] for mark in shown["marks"]],
        "without_model": shown["without_model"],
        "changes": report.changes,
    }


@router.post(
    "/topics/{topic_id}/sources/{document_id}/keep",
    response={201: DocumentOut, 200: DocumentOut, **errors(404)},
    tags=["documents"],
)
@needs(TokenScope.RESEARCH)
def keep_source(request: HttpRequest, topic_id: int, document_id: int) -> Status:
    """Add a web page the topic read (a `documents` id of its sources) to my documents: the PDF it
    is or names, else the page as the reader got it, with its address and date, and indexed;
    200 when already there."""
    document = Document.objects.filter(topic=_topic(request, topic_id), pk=document_id).first()
    if document is None:
        raise Http404(f"Page {document_id} of topic {topic_id} not found.")
    try:
        upload, created = keep.keep(request.auth, document)
    except UploadRejected as rejected:
        raise invalid(("path", "document_id"), [rejected.message]) from None
    return Status(201 if created else 200, upload)


@router.get("/topics/{topic_id}/versions", response={200: list[VersionOut], **errors(404)}, tags=["topics"])
def list_versions(request: HttpRequest, topic_id: int) -> list[dict[str, Any]]:
    """Every version of the topic, oldest first: *Research again* and schedules make new ones."""
    return versions.version_list(_topic(request, topic_id))


# --- Follow-up thread ------------------------------------------------------------------------------


def _followup_out(followup: FollowUp, html: str = "") -> dict[str, Any]:
    """The follow-up as FollowUpOut shows it: its own columns, and the answer's HTML."""
    columns = (name for name in FollowUpOut.model_fields if name != "html")
    return {**{name: getattr(followup, name) for name in columns}, "html": html}


@router.get(
    "/topics/{topic_id}/followups", response={200: list[FollowUpOut], **errors(404)}, tags=["followups"]
)
def list_followups(request: HttpRequest, topic_id: int) -> list[dict[str, Any]]:
    """The topic's follow-up thread, in order (answered, failed, and the one being answered)."""
    topic = _topic(request, topic_id)
    return [
        _followup_out(item["followup"], str(item.get("html", ""))) for item in thread_context(topic)["thread"]
    ]


@router.post(
    "/topics/{topic_id}/followups", response={201: FollowUpOut, **errors(404, 409)}, tags=["followups"]
)
@needs(TokenScope.RESEARCH)
def ask_followup(request: HttpRequest, topic_id: int, payload: FollowUpIn) -> Status:
    """Ask a follow-up on a completed topic (or expand one of its report's sections). It is queued
    and answered by the worker; poll the thread (or the topic's events) for the answer. 409 while
    the topic is not completed or another follow-up of it is being answered; 429 past a limit."""
    topic = _topic(request, topic_id)
    try:
        followup = workflow.ask_followup(topic, question=payload.question, section=payload.section)
    except workflow.BadQuestion as bad:
        raise invalid(("body", "section" if payload.section.strip() else "question"), [bad.message]) from None
    except workflow.OverLimit:
        raise
    except workflow.Refused as refused:
        raise HttpError(409, refused.message) from None
    return Status(201, _followup_out(followup, str(followup_item(followup, 0).get("html", ""))))


# Keyed by the int, as ninja keys its own responses: "200" would be a second, duplicate key.
MARKDOWN_RESPONSE = {
    "responses": {
        200: {
            "description": "The report as a Markdown file.",
            "content": {"text/markdown": {"schema": {"type": "string"}}},
        }
    }
}


@router.get(
    "/topics/{topic_id}/report.md",
    response={200: None, **errors(404)},
    tags=["report"],
    openapi_extra=MARKDOWN_RESPONSE,
)
def get_report_markdown(request: HttpRequest, topic_id: int) -> HttpResponse:
    """The report as a Markdown file, headed by its sub-queries (the same as the page's download)."""
    return export.markdown_response(_reported(_topic(request, topic_id)))


@router.get(
    "/topics/{topic_id}/sources.bib",
    response={200: None, **errors(404)},
    tags=["report"],
    openapi_extra={
        "responses": {
            200: {
                "description": "The report's sources as BibTeX, in the report's numbering.",
                "content": {"application/x-bibtex": {"schema": {"type": "string"}}},
            }
        }
    },
)
def get_report_bibtex(request: HttpRequest, topic_id: int) -> HttpResponse:
    """The report's sources as BibTeX: papers with their DOI, authors, year and venue."""
    return bibliography.bibtex_response(_reported(_topic(request, topic_id)))


@router.get(
    "/topics/{topic_id}/sources.ris",
    response={200: None, **errors(404)},
    tags=["report"],
    openapi_extra={
        "responses": {
            200: {
                "description": "The report's sources as RIS, in the report's numbering.",
                "content": {"application/x-research-info-systems": {"schema": {"type": "string"}}},
            }
        }
    },
)
def get_report_ris(request: HttpRequest, topic_id: int) -> HttpResponse:
    """The report's sources as RIS (Zotero, EndNote, Mendeley)."""
    return bibliography.ris_response(_reported(_topic(request, topic_id)))


# --- Share links -----------------------------------------------------------------------------------


@router.get(
    "/topics/{topic_id}/share-links", response={200: list[ShareLinkOut], **errors(404)}, tags=["sharing"]
)
def list_share_links(request: HttpRequest, topic_id: int) -> list[ShareLink]:
    return list(_topic(request, topic_id).share_links.all())


@router.post(
    "/topics/{topic_id}/share-links", response={201: NewShareLinkOut, **errors(404, 409)}, tags=["sharing"]
)
@needs(TokenScope.SHARE)
def create_share_link(request: HttpRequest, topic_id: int, payload: ShareLinkIn) -> Status:
    """A read-only link to the report for anyone who has it; the token is shown only here."""
    topic = _topic(request, topic_id)
    if not topic.report_exists:
        raise HttpError(409, "Only a finished report can be shared.")
    days = payload.expires_in_days
    link, token = ShareLink.issue(topic, timedelta(days=days) if days else None)
    link.token = token
    link.url = request.build_absolute_uri(reverse("shared_report", args=[token]))
    return Status(201, link)


@router.post(
    "/topics/{topic_id}/share-links/{link_id}/revoke",
    response={200: ShareLinkOut, **errors(404)},
    tags=["sharing"],
)
@needs(TokenScope.SHARE)
def revoke_share_link(request: HttpRequest, topic_id: int, link_id: int) -> ShareLink:
    """The link answers 404 from now on."""
    topic = _topic(request, topic_id)
    link = topic.share_links.filter(pk=link_id).first()
    if link is None:
        raise Http404(f"Share link {link_id} not found.")
    link.revoke()
    return link


# --- Cache (staff) ---------------------------------------------------------------------------------


@router.get("/cache/stats", response={200: CacheStatsOut, **errors()}, tags=["cache"])
def get_cache_stats(request: HttpRequest) -> dict[str, Any]:
    """Per cache kind: live entries, their bytes, and lookups that hit or missed. Staff only."""
    if not request.auth.is_staff:
        raise HttpError(403, "Only staff can see the cache statistics.")
    return {"kinds": [{"kind": kind, **row} for kind, row in cache.stats().items()]}
