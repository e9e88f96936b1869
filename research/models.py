"""Research data: a topic and every row its run produces, plus the shared cache.

The rows are the hand-off between pipeline stages (docs/ARCHITECTURE.md, "The life of a topic"): each stage
reads the rows of the one before and writes its own, so a re-queued run resumes from them.
"""

from __future__ import annotations

import hashlib
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, models
from django.db.models import Q
from django.utils import timezone, translation
from django.utils.translation import gettext_lazy as _

from mindsearch.models import HashedTokenQuerySet, RevocableToken
from mindsearch.querysets import AnyUser, OwnedQuerySet
from research import event_text


class TopicQuerySet(OwnedQuerySet):
    def active(self) -> TopicQuerySet:
        return self.filter(status__in=Topic.ACTIVE_STATUSES)

    def matching(self, words: str) -> TopicQuerySet:
        """Topics whose question or one of whose sub-queries contains these words."""
        return self.filter(Q(question__icontains=words) | Q(subqueries__text__icontains=words)).distinct()


class Topic(models.Model):
    class Status(models.TextChoices):
        PLANNING = "planning", _("Planning")
        AWAITING_APPROVAL = "awaiting_approval", _("Waiting for plan approval")
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        COMPLETED = "completed", _("Completed")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")

    class Mode(models.TextChoices):
        QUICK = "quick", _("Quick")
        DEEP = "deep", _("Deep")

    class Sources(models.TextChoices):
        WEB = "web", _("Web")
        DOCS = "docs", _("My documents")
        BOTH = "both", _("Web and my documents")
        PAPERS = "papers", _("Papers")

    class Papers(models.TextChoices):
        """Whether scholarly indexes are searched too (research/pipeline/papers.py); a "Papers"
        topic searches nothing else."""

        AUTO = "auto", _("When the question is scholarly")
        ALWAYS = "always", _("Always")
        NEVER = "never", _("Never")

    class TimeRange(models.TextChoices):
        ANY = "", _("Any time")
        DAY = "day", _("Past day")
        WEEK = "week", _("Past week")
        MONTH = "month", _("Past month")
        YEAR = "year", _("Past year")

    class Domain(models.TextChoices):
        """Seven domains of questions: they choose query hints and SearXNG categories."""

        WEATHER = "weather", _("Weather")
        TRANSPORTATION = "transportation", _("Transportation")
        FINANCE = "finance", _("Finance")
        SPORTS = "sports", _("Sports")
        TEMPORAL_CHANGE = "temporal_change", _("Change over time")
        LOCATION = "location", _("Places")
        GENERAL = "general", _("General")

    class Route(models.TextChoices):
        """What the route stage decided (research/pipeline/stages/route.py); the run loop dispatches on it."""

        SEARCH = "search", _("Search")
        DIRECT = "direct", _("Direct answer")
        DOCUMENTS = "documents", _("Answer from your documents")

    ACTIVE_STATUSES = (Status.PLANNING, Status.QUEUED, Status.RUNNING)

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="topics")
    question = models.TextField(_("question"))
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PLANNING)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.QUICK)
    sources = models.CharField(max_length=10, choices=Sources.choices, default=Sources.WEB)
    time_range = models.CharField(max_length=10, choices=TimeRange.choices, blank=True, default="")
    papers = models.CharField(
        max_length=10,
        choices=Papers.choices,
        default=Papers.AUTO,
        help_text=_("Search scholarly papers (OpenAlex, arXiv, PubMed, Crossref) too."),
    )
    language = models.CharField(max_length=10, default="ru")
    domain = models.CharField(
        max_length=20, choices=Domain.choices, blank=True, default="", help_text=_("Empty until routed.")
    )
    period_start = models.DateField(
        null=True,
        blank=True,
        help_text=_("The dates the question asks about: the filter for private documents."),
    )
    period_end = models.DateField(null=True, blank=True)
    # Empty until routed; a branch that cannot answer stores the next one (documents → direct → search).
    route = models.CharField(max_length=10, choices=Route.choices, blank=True, default="")
    # The per-year search (research/pipeline/stages/years.py) has looked at the first search's hits.
    years_checked = models.BooleanField(default=False)
    # The picture was looked at (research/pipeline/stages/vision.py): described, or said why not.
    vision_checked = models.BooleanField(default=False)
    # The domain's live data was asked for (research/pipeline/stages/domain.py): a document, or said why not.
    domain_data_checked = models.BooleanField(default=False)
    auto_approve = models.BooleanField(default=False, help_text=_("Skip plan review."))
    # Sites the web search may use (research/pipeline/sites.py): host names, each with its subdomains.
    sites_only = models.JSONField(default=list, blank=True, help_text=_("Only these sites (empty: any)."))
    sites_prefer = models.JSONField(default=list, blank=True, help_text=_("Read and cite these sites first."))
    sites_avoid = models.JSONField(default=list, blank=True, help_text=_("Never these sites."))
    token_cap = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=_("Past this many tokens the run stops gathering and writes its report from what it has."),
    )
    # The report's shape (research/pipeline/outline.py, issue 30): its kind, its sections in order
    # (empty: written in one pass) and its target length ("", short, standard, long or a number of words).
    report_kind = models.CharField(max_length=12, blank=True, default="", help_text=_("The kind of report."))
    outline = models.JSONField(default=list, blank=True, help_text=_("The report's sections, in order."))
    report_length = models.CharField(
        max_length=12, blank=True, default="", help_text=_("short, standard, long, or a number of words.")
    )
    stage = models.CharField(max_length=30, blank=True, default="")
    error = models.TextField(blank=True, default="")
    llm_model = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text=_("Empty when the topic was researched without an LLM."),
    )
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    last_event_seq = models.PositiveIntegerField(default=0)
    archive_bytes = models.PositiveBigIntegerField(
        default=0,
        help_text=_(
            "What the archive this topic was imported from unpacked to (0: researched here);"
            " it counts against the owner's storage, and its rows stay out of the service figures."
        ),
    )
    # Versions (research/versions.py): *Research again* or a schedule makes a new version, a
    # copy that runs the same plan; the versions share the first one's id as their series.
    series = models.PositiveIntegerField(
        null=True, blank=True, db_index=True, help_text=_("The first version's id; empty on a first version.")
    )
    previous_version = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="later_versions",
        help_text=_("The version this one was researched again from."),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TopicQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"])]

    def __str__(self) -> str:
        return self.question[:80]

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.COMPLETED, self.Status.FAILED, self.Status.CANCELLED)

    @property
    def is_imported(self) -> bool:
        """Unpacked from an archive (research/archive/), not researched here."""
        return self.archive_bytes > 0

    @property
    def exportable(self) -> bool:
        """Whether *Export archive* is offered: a finished run that found something (a report or
        search results); a plan under review or a run stopped before its first search has
        nothing an archive would keep besides the question."""
        if not self.is_finished:
            return False
        relation = Topic.report.related  # the reverse one-to-one: a page may have read it already
        has_report = (
            relation.get_cached_value(self) is not None
            if relation.is_cached(self)
            else Report.objects.filter(topic=self).exists()
        )
        return has_report or self.hits.exists()

    @property
    def web_fresh_since(self) -> datetime | None:
        """A later version searches and reads the web as of its own run: cached search results
        and pages older than it are not used (what the model made of the same input still is)."""
        return self.created_at if self.previous_version_id else None

    @property
    def period(self) -> tuple[date | None, date | None] | None:
        """The dates the topic is about — those the question names, else the window the user
        chose (the route stage stores them) — the filter for the owner's documents; None when
        there are none."""
        if self.period_start is None and self.period_end is None:
            return None
        return self.period_start, self.period_end

    @property
    def domain_documents(self) -> models.QuerySet[Document]:
        """The domain data the domain stage saved (a provider's document), in the order it saved
        them: the pre-context the report must prefer."""
        return self.documents.filter(fetched_via=Document.FetchedVia.DOMAIN).order_by("id")

    @property
    def error_text(self) -> str:
        """`error` in the reader's language: the failing event's line when the run recorded it as
        a msgid (`StageError` with args), else as stored."""
        if not self.error:
            return ""
        event = self.events.filter(level=RunEvent.Level.ERROR, message=self.error).order_by("-seq").first()
        return event.display_message if event else self.error

    def fail(self, error: str) -> None:
        self.status = self.Status.FAILED
        self.error = error
        self.finished_at = timezone.now()
        self.save(update_fields=["status", "error", "finished_at", "updated_at"])

    def plan_version(self) -> str:
        """A short fingerprint of the plan as stored (its sub-queries' ids, order and texts): a page,
        a script or the console sends back the one it was shown, to approve that plan and no other."""
        digest = hashlib.sha256()
        for pk, text in self.subqueries.order_by("round", "position", "id").values_list("pk", "text"):
            digest.update(f"{pk}\x1f{text}\x1e".encode())
        if self.outline:  # the sections shown are part of the plan approved (issue 30)
            digest.update(("\x1d" + "\x1e".join(self.outline)).encode())
        return digest.hexdigest()[:16]

    def set_status(self, status: str, **fields: Any) -> None:
        self.status = status
        for name, value in fields.items():
            setattr(self, name, value)
        self.save(update_fields=["status", *fields, "updated_at"])

    def next_event_seq(self) -> int:
        """Reserve the next event number; the row lock keeps concurrent writers in order.

        One statement (UPDATE … RETURNING), not a transaction of an update and a read: a run
        writes an event for nearly every step, and four round trips each were a good part of a
        cached re-run's time."""
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE research_topic SET last_event_seq = last_event_seq + 1, heartbeat_at = %s "
                "WHERE id = %s RETURNING last_event_seq",
                [timezone.now(), self.pk],
            )
            row = cursor.fetchone()
        if row is None:
            raise Topic.DoesNotExist(f"topic {self.pk} is gone")
        self.last_event_seq = row[0]
        return row[0]


class TopicImage(models.Model):
    """The picture a question was asked with (research/pipeline/stages/vision.py), stored privately.

    Only re-encoded pixels are kept (`research/images.py`): no EXIF, GPS or other metadata of
    the upload survives. The vision model's description of it is saved here once it is made.
    """

    class Analysis(models.TextChoices):
        PENDING = "pending", _("Not described yet")
        DONE = "done", _("Described by the vision model")
        NO_VISION = "no_vision", _("No vision model is configured")
        FAILED = "failed", _("The vision model failed")

    topic = models.OneToOneField(Topic, on_delete=models.CASCADE, related_name="image")
    data = models.BinaryField(help_text=_("The re-encoded image, without metadata."))
    content_type = models.CharField(max_length=30)
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)
    original_bytes = models.PositiveIntegerField(default=0)
    analysis = models.CharField(max_length=10, choices=Analysis.choices, default=Analysis.PENDING)
    labels = models.JSONField(default=list, blank=True)
    entities = models.JSONField(default=list, blank=True)
    text = models.TextField(blank=True, default="", help_text=_("Text the vision model read in the picture."))
    description = models.TextField(blank=True, default="")
    vision_model = models.CharField(max_length=200, blank=True, default="")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Image of {self.topic}"

    @property
    def size_bytes(self) -> int:
        return len(self.data or b"")

    @property
    def image_context(self) -> str:
        """The bridge for a text-only model: what the vision model saw, as plain lines."""
        if self.analysis != self.Analysis.DONE:
            return ""
        lines = [f"Описание: {self.description}"] if self.description else []
        if self.labels:
            lines.append("Метки: " + ", ".join(self.labels))
        if self.entities:
            lines.append("Объекты и имена: " + ", ".join(self.entities))
        if self.text:
            lines.append(f"Текст на изображении: {self.text}")
        return "\n".join(lines)


class SubQuery(models.Model):
    class Origin(models.TextChoices):
        LLM = "llm", _("Planned by the LLM")
        FALLBACK = "fallback", _("Planned without an LLM")
        USER = "user", _("Written by the user")
        DEEP = "deep", _("From what an earlier round found")
        PERIOD = "period", _("One year of the period asked about")
        FOLLOWUP = "followup", _("Searched for a follow-up question")

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="subqueries")
    position = models.PositiveIntegerField(default=0)
    text = models.TextField()
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.LLM)
    round = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["round", "position", "id"]
        verbose_name_plural = "sub-queries"

    def __str__(self) -> str:
        return self.text[:80]


class RoundQuerySet(OwnedQuerySet):
    owner_field = "topic__owner"


class Round(models.Model):
    """One finished round of a deep topic and the information growth it measured
    (research/pipeline/stages/deep.py).

    Growth = relevant documents new in this round / relevant documents known before it; the
    topic stops searching when it falls under the threshold or at the last allowed round.
    """

    class Stop(models.TextChoices):
        CONTINUED = "", _("Went on to another round")
        GROWTH = "growth", _("Little new was found")
        MAX_ROUNDS = "max_rounds", _("The last allowed round")
        NO_QUERIES = "no_queries", _("No new sub-query was left to ask")
        CAP = "cap", _("The topic reached its token cap")

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="rounds")
    number = models.PositiveIntegerField()
    subqueries = models.PositiveIntegerField(default=0)
    documents = models.PositiveIntegerField(default=0, help_text=_("Documents read in this round."))
    new_documents = models.PositiveIntegerField(
        default=0, help_text=_("Relevant documents new in this round.")
    )
    known_documents = models.PositiveIntegerField(
        default=0, help_text=_("Relevant documents known before this round.")
    )
    growth_rate = models.FloatField()
    stop_reason = models.CharField(max_length=20, choices=Stop.choices, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = RoundQuerySet.as_manager()

    class Meta:
        ordering = ["topic", "number"]
        constraints = [models.UniqueConstraint(fields=["topic", "number"], name="round_unique_number")]

    def __str__(self) -> str:
        return f"Round {self.number} of {self.topic}: growth {self.growth_rate:.2f}"


class SearchQuery(models.Model):
    class Language(models.TextChoices):
        RU = "ru", _("Russian")
        EN = "en", _("English")

    subquery = models.ForeignKey(SubQuery, on_delete=models.CASCADE, related_name="search_queries")
    language = models.CharField(max_length=2, choices=Language.choices)
    position = models.PositiveIntegerField(default=0)
    text = models.TextField()
    result_count = models.PositiveIntegerField(null=True, blank=True)
    unresponsive_engines = models.JSONField(default=list, blank=True)
    dropped = models.JSONField(
        default=list,
        blank=True,
        help_text=_("Results the topic's site rules dropped: [{url, title, reason}]."),
    )
    searched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["subquery", "language", "position"]
        verbose_name_plural = "search queries"

    def __str__(self) -> str:
        return self.text[:80]


class Hit(models.Model):
    class Source(models.TextChoices):
        WEB = "web", _("Web")
        PRIVATE = "private", _("My documents")

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="hits")
    subquery = models.ForeignKey(SubQuery, on_delete=models.CASCADE, related_name="hits")
    search_query = models.ForeignKey(
        SearchQuery, on_delete=models.SET_NULL, null=True, blank=True, related_name="hits"
    )
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.WEB)
    url = models.URLField(max_length=2000)
    normalized_url = models.CharField(max_length=2000)
    title = models.TextField(blank=True, default="")
    snippet = models.TextField(blank=True, default="")
    engine = models.CharField(max_length=100, blank=True, default="")
    position = models.PositiveIntegerField(default=0)
    published_at = models.DateTimeField(null=True, blank=True)
    # A scholarly index's hit (research/pipeline/papers.py): doi, authors, year, venue, abstract…
    paper = models.JSONField(default=dict, blank=True)
    chunk = models.ForeignKey(
        "retrieval.Chunk", on_delete=models.SET_NULL, null=True, blank=True, related_name="hits"
    )
    rerank_rank = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Place among its sub-query's web hits by the reranker, from 0.")
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["subquery", "position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["topic", "normalized_url"], name="hit_unique_url_per_topic")
        ]

    def __str__(self) -> str:
        return self.title or self.url


class Scores(models.Model):
    """Five 0–10 criteria (`CRITERIA`, asked for by prompts/score.txt); the total is their mean."""

    class Origin(models.TextChoices):
        LLM = "llm", _("LLM")
        FALLBACK = "fallback", _("Fallback")

    relevance_to_question = models.FloatField()
    relevance_to_direction = models.FloatField()
    completeness = models.FloatField()
    accuracy = models.FloatField()
    structure = models.FloatField()
    total = models.FloatField(db_index=True)
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.LLM)
    created_at = models.DateTimeField(auto_now_add=True)

    CRITERIA = (
        "relevance_to_question",
        "relevance_to_direction",
        "completeness",
        "accuracy",
        "structure",
    )

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        values = [getattr(self, name) for name in self.CRITERIA]
        self.total = round(sum(values) / len(values), 1)
        super().save(*args, **kwargs)


class HitScore(Scores):
    hit = models.OneToOneField(Hit, on_delete=models.CASCADE, related_name="score")

    def __str__(self) -> str:
        return f"{self.total} — {self.hit}"


class Document(models.Model):
    class FetchedVia(models.TextChoices):
        READER = "reader", _("Reader")
        DIRECT = "direct", _("Direct fetch")
        PRIVATE = "private", _("My documents")
        DOMAIN = "domain", _("Domain data")
        PAPER = "paper", _("Paper (PDF)")
        ABSTRACT = "abstract", _("Abstract (scholarly index)")

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="documents")
    hit = models.OneToOneField(Hit, on_delete=models.SET_NULL, null=True, blank=True, related_name="document")
    uploaded_document = models.ForeignKey(
        "retrieval.UploadedDocument",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="research_documents",
    )
    title = models.TextField(blank=True, default="")
    url = models.URLField(max_length=2000, blank=True, default="")
    text = models.TextField(help_text=_("Markdown"))
    fetched_via = models.CharField(max_length=10, choices=FetchedVia.choices)
    pages = models.JSONField(default=list, blank=True, help_text=_("Page numbers of private passages"))
    round = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["topic", "id"]

    def __str__(self) -> str:
        return self.title or self.url


class Summary(models.Model):
    document = models.OneToOneField(Document, on_delete=models.CASCADE, related_name="summary")
    text = models.TextField()
    origin = models.CharField(max_length=10, choices=Scores.Origin.choices, default=Scores.Origin.LLM)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "summaries"

    def __str__(self) -> str:
        return self.text[:80]


class SummaryScore(Scores):
    summary = models.OneToOneField(Summary, on_delete=models.CASCADE, related_name="score")

    def __str__(self) -> str:
        return f"{self.total} — {self.summary.document}"


class Report(models.Model):
    class Mark(models.TextChoices):
        """What the checks of the whole report found wrong with it (`report_writer.marks_of`)."""

        TRUNCATED = "truncated", _("Cut off: the model's answer hit its token limit")
        UNCITED = "uncited", _("Cites none of its sources")
        WRONG_LANGUAGE = "wrong_language", _("Written in another language than the question's")
        UNSUPPORTED = "unsupported", _("Most of its citations are not supported by their sources")
        CAPPED = "capped", _("Written from what was gathered when the topic reached its token cap")

    topic = models.OneToOneField(Topic, on_delete=models.CASCADE, related_name="report")
    markdown = models.TextField()
    sources = models.JSONField(default=list, help_text=_("[{n, title, url, document_id}]"))
    model = models.CharField(max_length=200, blank=True, default="")
    marks = models.JSONField(
        default=list,
        blank=True,
        help_text=_("What the checks of the whole report found (Report.Mark values)."),
    )
    without_model = models.JSONField(
        default=list,
        blank=True,
        help_text=_("Stages that ran without the configured model: [{stage, count, total}]."),
    )
    # Derived from the markdown when the report is saved (`presenters.report_rendering`), so a
    # page view never parses the report (issue 26); never exported, rebuilt on import.
    rendering = models.JSONField(
        null=True,
        blank=True,
        default=None,
        editable=False,
        help_text=_("The report rendered once: {html, token, places} (see presenters.report_rendering)."),
    )
    changes = models.JSONField(
        null=True,
        blank=True,
        default=None,
        help_text=_(
            "What changed since the previous version (research/versions.py); empty on a first version."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Report on {self.topic}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Saving the text (or the sources it cites) renders it again, once, here."""
        from research.presenters import report_rendering

        update_fields = kwargs.get("update_fields")
        if update_fields is None or {"markdown", "sources"} & set(update_fields):
            self.rendering = report_rendering(self.markdown, len(self.sources))
            if update_fields is not None:
                kwargs["update_fields"] = {*update_fields, "rendering"}
        super().save(*args, **kwargs)


class ReportDraft(models.Model):
    """The report's text so far while the LLM writes it (streamed), for pages opened mid-stream.

    Deleted when the finished report is saved (or the LLM fails and another engine writes it);
    a draft is never shown as a report: the page shows it only while the topic is running.
    """

    topic = models.OneToOneField(Topic, on_delete=models.CASCADE, related_name="report_draft")
    text = models.TextField(blank=True, default="")
    version = models.PositiveIntegerField(default=0, help_text=_("Raised on every save of the text."))
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"Report draft on {self.topic}"


class FollowUpQuerySet(OwnedQuerySet):
    owner_field = "topic__owner"

    def pending(self) -> FollowUpQuerySet:
        return self.filter(status__in=FollowUp.PENDING_STATUSES)


class FollowUp(models.Model):
    """A question asked about a finished topic, answered in its thread (research/pipeline/followup.py).

    It is answered from the topic's sources first; when they do not cover it, one sub-query is
    searched, read and scored as in a run, and the pages it brings are numbered after the
    topic's sources so far (`sources` holds only those new ones). *Expand this section* is a
    follow-up of kind `expand` naming a heading of the report.
    """

    class Kind(models.TextChoices):
        QUESTION = "question", _("Follow-up question")
        EXPAND = "expand", _("Expand a section")

    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Being answered")
        COMPLETED = "completed", _("Answered")
        FAILED = "failed", _("Failed")

    PENDING_STATUSES = (Status.QUEUED, Status.RUNNING)

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="followups")
    position = models.PositiveIntegerField(help_text=_("Its place in the thread, from 1."))
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.QUESTION)
    question = models.TextField(_("question"))
    section = models.TextField(blank=True, default="", help_text=_("The report heading to expand."))
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    searched = models.BooleanField(
        default=False, help_text=_("A new search was made because the topic's sources did not cover it.")
    )
    subquery = models.ForeignKey(
        SubQuery, on_delete=models.SET_NULL, null=True, blank=True, related_name="followups"
    )
    answer = models.TextField(blank=True, default="", help_text=_("Markdown, citing the topic's numbers."))
    sources = models.JSONField(
        default=list, blank=True, help_text=_("Sources new in this answer, numbered after the topic's.")
    )
    citations = models.JSONField(default=list, blank=True, help_text=_("The citation check of the answer."))
    # The answer rendered and marked once, for the source numbering it was rendered with
    # (`presenters.followup_html`, issue 26); never exported, rebuilt on import.
    rendering = models.JSONField(
        null=True,
        blank=True,
        default=None,
        editable=False,
        help_text=_("The answer rendered once: {html, token, places, digest, marked}."),
    )
    model = models.CharField(max_length=200, blank=True, default="")
    error = models.TextField(blank=True, default="")
    draft = models.TextField(blank=True, default="", help_text=_("The answer so far while it is written."))
    draft_version = models.PositiveIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = FollowUpQuerySet.as_manager()

    class Meta:
        ordering = ["topic", "position"]
        constraints = [models.UniqueConstraint(fields=["topic", "position"], name="followup_unique_position")]

    def __str__(self) -> str:
        return f"#{self.position} {self.question[:70]}"

    @property
    def error_text(self) -> str:
        """`error` in the reader's language: the worker's own failures are msgids (followup.py),
        a text from elsewhere is shown as stored."""
        return translation.gettext(self.error) if self.error else ""

    @property
    def is_pending(self) -> bool:
        return self.status in self.PENDING_STATUSES


class CitationQuerySet(OwnedQuerySet):
    owner_field = "report__topic__owner"


class Citation(models.Model):
    """One sentence of a report checked against one source it cites (research/pipeline/citecheck.py)."""

    class Verdict(models.TextChoices):
        SUPPORTED = "supported", _("Supported")
        WEAK = "weak", _("Weakly supported")
        UNSUPPORTED = "unsupported", _("Not supported")

    class Method(models.TextChoices):
        LOCAL = "local", _("Words and embeddings")
        LEXICAL = "lexical", _("Words only")
        LLM = "llm", _("LLM")

    report = models.ForeignKey(Report, on_delete=models.CASCADE, related_name="citations")
    sentence_index = models.PositiveIntegerField(help_text=_("The sentence's place in the report, from 0."))
    sentence = models.TextField(help_text=_("The sentence as plain text, without its citations."))
    n = models.PositiveIntegerField(help_text=_("The number of the source it cites."))
    verdict = models.CharField(max_length=12, choices=Verdict.choices)
    local_verdict = models.CharField(
        max_length=12, choices=Verdict.choices, help_text=_("What words, numbers and embeddings said.")
    )
    method = models.CharField(max_length=10, choices=Method.choices)
    score = models.FloatField(help_text=_("The local score of the best passage, 0–1."))
    coverage = models.FloatField(default=0.0, help_text=_("Share of the sentence's words in that passage."))
    similarity = models.FloatField(
        null=True,
        blank=True,
        help_text=_("Embedding similarity with that passage, 0 (unrelated) to 1 (restated)."),
    )
    passage = models.TextField(
        blank=True, default="", help_text=_("The source's passage most like the sentence.")
    )
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = CitationQuerySet.as_manager()

    class Meta:
        ordering = ["report", "sentence_index", "n"]
        constraints = [
            models.UniqueConstraint(
                fields=["report", "sentence_index", "n"], name="citation_unique_per_sentence"
            )
        ]

    def __str__(self) -> str:
        return f"[{self.n}] {self.verdict}: {self.sentence[:60]}"


class ShareLinkQuerySet(OwnedQuerySet, HashedTokenQuerySet):  # type: ignore[override]  # see ApiTokenQuerySet
    owner_field = "topic__owner"
    find_related = ("topic",)


class ShareLink(RevocableToken):
    """A read-only link to a topic's report for people without an account."""

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="share_links")
    pinned = models.BooleanField(
        default=False, help_text=_("Show this version even when the topic has a newer one.")
    )

    objects = ShareLinkQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Share link for {self.topic}"

    @classmethod
    def issue(cls, topic: Topic, expires_in: timedelta | None = None) -> tuple[ShareLink, str]:
        """Create a link; the plain token is returned once and never stored."""
        token, stored = cls.new_secret(expires_in)
        return cls.objects.create(topic=topic, **stored), token


class RunEventQuerySet(OwnedQuerySet):
    owner_field = "topic__owner"

    def since(self, seq: int) -> RunEventQuerySet:
        return self.filter(seq__gt=seq).order_by("seq")


class RunEvent(models.Model):
    """One line of a topic's durable progress log; the websocket replays these on connect."""

    class Level(models.TextChoices):
        INFO = "info", _("Info")
        WARNING = "warning", _("Warning")
        ERROR = "error", _("Error")

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    stage = models.CharField(max_length=30)
    level = models.CharField(max_length=10, choices=Level.choices, default=Level.INFO)
    message = models.TextField()
    done = models.PositiveIntegerField(null=True, blank=True)
    total = models.PositiveIntegerField(null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = RunEventQuerySet.as_manager()

    class Meta:
        ordering = ["topic", "seq"]
        constraints = [models.UniqueConstraint(fields=["topic", "seq"], name="run_event_unique_seq")]

    def __str__(self) -> str:
        return f"#{self.seq} {self.stage}: {self.message[:60]}"

    @property
    def display_message(self) -> str:
        """The line in the active language; `message` stays the English record."""
        return event_text.translated(self.data, self.message)

    @property
    def progress(self) -> float | None:
        if not self.total:
            return None
        return min(1.0, (self.done or 0) / self.total)


class LLMCallQuerySet(OwnedQuerySet):
    owner_field = "user"


class LLMCall(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="llm_calls"
    )
    topic = models.ForeignKey(
        Topic, on_delete=models.SET_NULL, null=True, blank=True, related_name="llm_calls"
    )
    stage = models.CharField(max_length=30)
    model = models.CharField(max_length=200)
    prompt_version = models.CharField(max_length=40, blank=True, default="")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    reasoning_tokens = models.PositiveIntegerField(
        default=0, help_text=_("Of the completion tokens, those the model spent reasoning.")
    )
    latency_ms = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=1)
    cache_hit = models.BooleanField(default=False)
    cache_kind = models.CharField(
        max_length=20,
        blank=True,
        default="",
        help_text=_("The cache kind this call's answer is stored under."),
    )
    error = models.TextField(blank=True, default="")
    imported = models.BooleanField(
        default=False,
        help_text=_("Copied from an imported topic's archive: a record of its cost, not new spending."),
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = LLMCallQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "LLM call"

    def __str__(self) -> str:
        return f"{self.stage} · {self.model}"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class CacheEntryQuerySet(models.QuerySet["CacheEntry"]):
    def live(self) -> CacheEntryQuerySet:
        return self.filter(expires_at__gt=timezone.now())

    def expired(self) -> CacheEntryQuerySet:
        return self.filter(expires_at__lte=timezone.now())

    def visible_to(self, user: AnyUser) -> CacheEntryQuerySet:
        """Shared web data plus what was derived from this user's private documents."""
        owner_id = getattr(user, "pk", None) if getattr(user, "is_authenticated", False) else None
        return self.filter(Q(owner__isnull=True) | Q(owner_id=owner_id))


class CacheEntry(models.Model):
    """The cache of LLM answers, searches and pages as rows: one payload per kind and input hash."""

    class Kind(models.TextChoices):
        SEARCH_QUERIES = "search_queries", _("Search queries")
        SEARCH_RESULTS = "search_results", _("Search results")
        DOCS = "docs", _("Documents")
        RANKED_RESULTS = "ranked_results", _("Ranked results")
        SUMMARIES = "summaries", _("Summaries")
        RANKED_SUMMARIES = "ranked_summaries", _("Ranked summaries")
        ANSWERS = "answers", _("Answers")
        CITATION_CHECKS = "citation_checks", _("Citation checks")
        RERANK = "rerank", _("Reranked orders")
        VISION = "vision", _("Image descriptions")
        DOMAIN_DATA = "domain_data", _("Domain data")
        OPENALEX = "openalex", _("OpenAlex results")
        ARXIV = "arxiv", _("arXiv results")
        PUBMED = "pubmed", _("PubMed results")
        CROSSREF = "crossref", _("Crossref results")

    kind = models.CharField(max_length=20, choices=Kind.choices)
    key_hash = models.CharField(max_length=64)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="cache_entries",
        help_text=_("Set when the payload derives from the owner's private documents."),
    )
    description = models.CharField(max_length=300, blank=True, default="")
    payload = models.JSONField()
    size_bytes = models.PositiveIntegerField(default=0)
    hit_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    last_hit_at = models.DateTimeField(null=True, blank=True)

    objects = CacheEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "cache entries"
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "key_hash", "owner"], name="cache_entry_unique_key", nulls_distinct=False
            )
        ]
        indexes = [models.Index(fields=["kind", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.kind}:{self.key_hash[:12]}"

    @property
    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()


class CacheCounter(models.Model):
    """Lookups per cache kind and day: hits are also counted per entry, misses only here.

    One row per kind and day keeps a lookup at one UPDATE while still answering "what did the
    cache do this week".
    """

    kind = models.CharField(max_length=20, choices=CacheEntry.Kind.choices)
    day = models.DateField(default=timezone.localdate)
    hits = models.PositiveBigIntegerField(default=0)
    misses = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "day"], name="cache_counter_unique_day")]

    def __str__(self) -> str:
        return f"{self.kind} {self.day}: {self.hits} hits, {self.misses} misses"


class TopicScheduleQuerySet(OwnedQuerySet):
    def due(self, now: Any) -> TopicScheduleQuerySet:
        return self.filter(paused=False, next_run_at__lte=now)


class TopicSchedule(models.Model):
    """A topic researched again on its own (research/schedules.py): its newest version is run
    again every day, week or month, and what changed is delivered by e-mail and/or webhook."""

    class Every(models.TextChoices):
        DAY = "day", _("Every day")
        WEEK = "week", _("Every week")
        MONTH = "month", _("Every month")

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="schedules")
    series = models.PositiveIntegerField(unique=True, help_text=_("The first version's id of the topic."))
    every = models.CharField(max_length=10, choices=Every.choices, default=Every.WEEK)
    cron = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text=_("A cron line (minute hour day month weekday, UTC) used instead; set by staff only."),
    )
    next_run_at = models.DateTimeField(db_index=True)
    paused = models.BooleanField(default=False)
    email = models.BooleanField(
        default=True, help_text=_("Send what changed to the owner's verified e-mail.")
    )
    webhook_url = models.URLField(max_length=2000, blank=True, default="")
    webhook_secret = models.CharField(max_length=64, blank=True, default="", editable=False)
    deliver_unchanged = models.BooleanField(
        default=False, help_text=_("Deliver also when nothing changed since the previous version.")
    )
    failures = models.PositiveIntegerField(default=0, help_text=_("Scheduled runs failed in a row."))
    failure_notified = models.BooleanField(
        default=False, help_text=_("The owner was told of the current run of failures (once).")
    )
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_topic = models.ForeignKey(
        Topic,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="started_by_schedules",
        help_text=_("The version the schedule started last."),
    )
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TopicScheduleQuerySet.as_manager()

    class Meta:
        ordering = ["next_run_at"]

    def __str__(self) -> str:
        return f"{self.get_every_display()}: topic {self.series}"


class Delivery(models.Model):
    """One delivery of a version's news: to the owner's e-mail or to the schedule's webhook,
    tried again with backoff until it goes through or is given up (research/delivery.py)."""

    class Channel(models.TextChoices):
        EMAIL = "email", _("E-mail")
        WEBHOOK = "webhook", _("Webhook")

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        SENT = "sent", _("Sent")
        GIVEN_UP = "given_up", _("Given up")

    schedule = models.ForeignKey(TopicSchedule, on_delete=models.CASCADE, related_name="deliveries")
    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=10, choices=Channel.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_try_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = _("deliveries")
        constraints = [
            models.UniqueConstraint(fields=["topic", "channel"], name="delivery_once_per_version_and_channel")
        ]

    def __str__(self) -> str:
        return f"{self.channel} of topic {self.topic_id}: {self.status}"


class SiteDefaults(models.Model):
    """A user's site lists, offered on their next topics' form (research/pipeline/sites.py)."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="site_defaults"
    )
    sites_only = models.JSONField(default=list, blank=True)
    sites_prefer = models.JSONField(default=list, blank=True)
    sites_avoid = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"Site lists of {self.owner}"

    @classmethod
    def initial_for(cls, user: AnyUser | None) -> dict[str, str | bool]:
        """The form's initial text for the three lists (empty without saved defaults)."""
        found = cls.objects.filter(owner_id=getattr(user, "pk", None)).first()
        if found is None:
            return {}
        names = ("sites_only", "sites_prefer", "sites_avoid")
        return {name: ", ".join(getattr(found, name)) for name in names} | {"remember_sites": True}
