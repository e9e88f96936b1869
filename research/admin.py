"""The admin as a cache and cost audit desk: what the cache holds and saved, what every LLM call
cost, and each user's spending over a period; plus every research row, read-only where it is a
record. django-q2 registers its own task, failure, schedule and queue pages."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import flatten
from django.core.exceptions import PermissionDenied
from django.db.models import Avg, Count, Max, Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import filesizeformat
from django.template.response import SimpleTemplateResponse, TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.functional import Promise as StrPromise
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from research import admin_schedules, usage, workflow  # noqa: F401  (admin_schedules registers)
from research.models import (
    CacheEntry,
    Citation,
    Document,
    FollowUp,
    Hit,
    HitScore,
    LLMCall,
    Report,
    Round,
    RunEvent,
    SearchQuery,
    ShareLink,
    SubQuery,
    Summary,
    SummaryScore,
    Topic,
)
from research.pipeline import cache

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

# An option's label: translated lazily.
Label = str | StrPromise


class CitationCounts(TypedDict):
    """What ReportAdmin's list annotates each report with."""

    checked: int
    supported: int


SCORE_FIELDS = (
    "total",
    "relevance_to_question",
    "relevance_to_direction",
    "completeness",
    "accuracy",
    "structure",
)
# The period choices of the statistics and usage pages: days back from today (0 = all time).
PERIODS = ((1, _("Today")), (7, _("Last 7 days")), (30, _("Last 30 days")), (0, _("All time")))
DEFAULT_PERIOD = 7


def period_days(request: HttpRequest) -> int:
    """?days=N from the period links; anything else falls back to the default week."""
    try:
        days = int(request.GET.get("days", DEFAULT_PERIOD))
    except ValueError:
        return DEFAULT_PERIOD
    return days if 0 <= days <= 3660 else DEFAULT_PERIOD


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records of what happened: viewable and deletable, never written by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --- Cache entries --------------------------------------------------------------------------------


class OptionFilter(admin.SimpleListFilter):
    """A list filter of named options, each a label and the condition it filters by."""

    def options(self) -> dict[str, tuple[Label, Q]]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, Any]]:
        return [(value, label) for value, (label, _where) in self.options().items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        options, value = self.options(), self.value()
        return queryset.filter(options[value][1]) if value in options else queryset


class ExpiryFilter(OptionFilter):
    title = _("expiry")
    parameter_name = "expiry"

    def options(self) -> dict[str, tuple[Label, Q]]:
        now, day, week = timezone.now(), timedelta(days=1), timedelta(days=7)
        return {
            "expired": (_("Expired (awaiting purge)"), Q(expires_at__lte=now)),
            "day": (_("Expires within a day"), Q(expires_at__gt=now, expires_at__lte=now + day)),
            "week": (_("Expires within 7 days"), Q(expires_at__gt=now, expires_at__lte=now + week)),
            "later": (_("Expires later"), Q(expires_at__gt=now + week)),
        }


class SizeFilter(OptionFilter):
    title = _("size")
    parameter_name = "size"

    def options(self) -> dict[str, tuple[Label, Q]]:
        return {
            "small": (_("Under 10 kB"), Q(size_bytes__lt=10_000)),
            "medium": (_("10–100 kB"), Q(size_bytes__gte=10_000, size_bytes__lt=100_000)),
            "large": (_("100 kB – 1 MB"), Q(size_bytes__gte=100_000, size_bytes__lt=1_000_000)),
            "huge": (_("Over 1 MB"), Q(size_bytes__gte=1_000_000)),
        }


class HitCountFilter(OptionFilter):
    title = _("hit count")
    parameter_name = "hits"

    def options(self) -> dict[str, tuple[Label, Q]]:
        return {
            "0": (_("Never hit"), Q(hit_count=0)),
            "1-9": (_("1–9 hits"), Q(hit_count__range=(1, 9))),
            "10+": (_("10 hits or more"), Q(hit_count__gte=10)),
        }


class SharingFilter(OptionFilter):
    title = _("shared or private")
    parameter_name = "sharing"

    def options(self) -> dict[str, tuple[Label, Q]]:
        return {
            "shared": (_("Shared web data"), Q(owner__isnull=True)),
            "private": (_("From one user's documents"), Q(owner__isnull=False)),
        }


@admin.register(CacheEntry)
class CacheEntryAdmin(ReadOnlyAdmin):
    list_display = (
        "kind",
        "short_description",
        "owner",
        "size",
        "hit_count",
        "last_hit_at",
        "created_at",
        "expires_at",
        "live",
    )
    list_filter = (
        "kind",
        ExpiryFilter,
        ("created_at", admin.DateFieldListFilter),
        SizeFilter,
        HitCountFilter,
        SharingFilter,
    )
    search_fields = ("key_hash", "description")
    list_select_related = ("owner",)
    date_hierarchy = "created_at"
    fields = (
        "kind",
        "key_hash",
        "owner",
        "description",
        "size",
        "hit_count",
        "created_at",
        "expires_at",
        "last_hit_at",
        "payload_json",
    )
    actions = ["purge_selected"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        # A page of 100 rows would otherwise load up to 100 whole pages of Markdown.
        match = request.resolver_match
        changelist = match is not None and (match.url_name or "").endswith("changelist")
        return queryset.defer("payload") if changelist else queryset

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # purge_selected does the same without a detour
        return actions

    @admin.display(description=_("description"), ordering="description")
    def short_description(self, entry: CacheEntry) -> str:
        return entry.description[:80]

    @admin.display(description=_("size"), ordering="size_bytes")
    def size(self, entry: CacheEntry) -> str:
        return filesizeformat(entry.size_bytes)

    @admin.display(description=_("live"), boolean=True)
    def live(self, entry: CacheEntry) -> bool:
        return not entry.is_expired

    @admin.display(description=_("payload"))
    def payload_json(self, entry: CacheEntry) -> str:
        text = json.dumps(entry.payload, indent=2, ensure_ascii=False, sort_keys=True)
        return format_html('<pre class="payload">{}</pre>', text)

    @admin.action(description=_("Purge the selected cache entries"), permissions=["delete"])
    def purge_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """Asks first, like Django's own delete action: a page saying how many entries (live ones
        among them, whose next use costs a new LLM call or search) and how much would go."""
        if request.POST.get("confirm") != "yes":
            totals = queryset.aggregate(size=Sum("size_bytes"))
            context = {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": _("Purge cache entries?"),
                "entries": queryset.count(),
                "live": queryset.exclude(expires_at__lte=timezone.now()).count(),
                "size": totals["size"] or 0,
                "selected": [str(pk) for pk in queryset.values_list("pk", flat=True)],
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            }
            return TemplateResponse(request, "admin/research/cacheentry/purge_confirmation.html", context)
        deleted, _by_model = queryset.delete()
        self.message_user(request, _purged(deleted), messages.SUCCESS)
        return None

    def get_urls(self) -> list[URLPattern]:
        return [
            path("stats/", self.admin_site.admin_view(self.stats_view), name="research_cacheentry_stats"),
            path(
                "purge-expired/",
                self.admin_site.admin_view(require_POST(self.purge_expired_view)),
                name="research_cacheentry_purge_expired",
            ),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        extra = {
            "expired_count": CacheEntry.objects.expired().count(),
            "can_purge": self.has_delete_permission(request),
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra)

    def stats_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        days = period_days(request)
        since = usage.period_start(days)
        rows, total = usage.cache_report(since)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Cache statistics"),
            "rows": rows,
            "total": total,
            "days": days,
            "since": since,
            "periods": PERIODS,
            "currency": _currency(),
            "priced": usage.prices_configured(),
            "can_purge": self.has_delete_permission(request),
        }
        return TemplateResponse(request, "admin/research/cacheentry/stats.html", context)

    def purge_expired_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_delete_permission(request):
            raise PermissionDenied
        self.message_user(request, _purged(cache.purge_expired()), messages.SUCCESS)
        back = "admin:research_cacheentry_stats" if request.POST.get("back") == "stats" else None
        return HttpResponseRedirect(reverse(back or "admin:research_cacheentry_changelist"))


def _purged(count: int) -> str:
    return ngettext("Purged %(n)d cache entry.", "Purged %(n)d cache entries.", count) % {"n": count}


def _currency() -> str:
    return settings.LLM_PRICE_CURRENCY


# --- LLM calls and usage ------------------------------------------------------------------------------


class ErrorFilter(OptionFilter):
    title = _("outcome")
    parameter_name = "outcome"

    def options(self) -> dict[str, tuple[Label, Q]]:
        return {"error": (_("Failed"), ~Q(error="")), "ok": (_("Answered"), Q(error=""))}


@admin.register(LLMCall)
class LLMCallAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "user",
        "topic_link",
        "stage",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "cost",
        "latency_ms",
        "attempts",
        "cache_hit",
        "failed",
        "imported",
    )
    list_filter = (
        "stage",
        "model",
        "cache_hit",
        ErrorFilter,
        "cache_kind",
        "imported",
        ("user", admin.RelatedOnlyFieldListFilter),
    )
    search_fields = ("user__username", "topic__question", "model", "error")
    list_select_related = ("user", "topic")
    raw_id_fields = ("user", "topic")
    date_hierarchy = "created_at"

    @admin.display(description=_("topic"), ordering="topic")
    def topic_link(self, call: LLMCall) -> str:
        if call.topic is None:
            return "—"
        url = reverse("admin:research_topic_change", args=[call.topic_id])
        return format_html('<a href="{}">{}</a>', url, call.topic.question[:60])

    @admin.display(description=_("estimated cost"))
    def cost(self, call: LLMCall) -> str:
        if call.cache_hit:
            return "0"
        return f"{usage.price_for(call.model).of(call.prompt_tokens, call.completion_tokens):.4f}"

    @admin.display(description=_("failed"), boolean=True)
    def failed(self, call: LLMCall) -> bool:
        return bool(call.error)

    def get_urls(self) -> list[URLPattern]:
        usage_view = self.admin_site.admin_view(self.usage_view)
        return [path("usage/", usage_view, name="research_llmcall_usage"), *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        # A page (not the redirect after an action) carries the change list in its context.
        context = response.context_data if isinstance(response, SimpleTemplateResponse) else None
        changelist = (context or {}).get("cl")
        if context is not None and changelist is not None:
            context["totals"] = _totals(changelist.queryset)
        return response

    def usage_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        days = period_days(request)
        since = usage.period_start(days)
        username = request.GET.get("q", "").strip()[:150]
        users = usage.spend_by_user(since, username)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("LLM usage and estimated cost"),
            "users": [(spender, _calls_url(since, spent_only=True, user=spender.key)) for spender in users],
            "topics": usage.spend_by_topic(since) if not username else [],
            "total": usage.summarise(usage.spent_calls(since)),
            "days": days,
            "since": since,
            "query": username,
            "periods": PERIODS,
            "currency": _currency(),
            "priced": usage.prices_configured(),
        }
        return TemplateResponse(request, "admin/research/llmcall/usage.html", context)


def _totals(calls: QuerySet) -> dict[str, Any]:
    """What the filtered change list adds up to: two queries, whatever its length."""
    spent = usage.summarise(calls)
    latency = calls.aggregate(average=Avg("latency_ms"), slowest=Max("latency_ms"))
    return {"usage": spent, "latency": latency, "currency": _currency(), "priced": usage.prices_configured()}


def _calls_url(since: Any, *, spent_only: bool, **filters: Any) -> str:
    """The LLM call list filtered the way a usage figure was counted."""
    params: dict[str, Any] = {}
    for name, value in filters.items():
        if value is None:  # the calls of a deleted user
            params[f"{name}__isnull"] = "True"
        else:
            params[f"{name}__id__exact"] = value
    if since is not None:
        params["created_at__gte"] = since.isoformat()
    if spent_only:
        params["imported__exact"] = "0"
    return f"{reverse('admin:research_llmcall_changelist')}?{urlencode(params)}"


# --- Topics and their rows ------------------------------------------------------------------------------


class ReadOnlyInline(admin.TabularInline):
    """Rows a run wrote, shown with their parent: no row is added or edited here, each links to
    its own page. A subclass names its `fields`."""

    extra = 0
    show_change_link = True

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return flatten(self.fields) if self.fields else []

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SubQueryInline(ReadOnlyInline):
    """The topic's plan, as approved and as the rounds grew it. Shown, never edited or deleted
    here: a plan changes only through `research/workflow.py` (the page, the API, the console)."""

    model = SubQuery
    fields = ("position", "round", "text", "origin")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class FollowUpInline(ReadOnlyInline):
    """The topic's follow-up thread (asked on the topic page; read-only here)."""

    model = FollowUp
    fields = ("position", "kind", "question", "status", "searched", "model", "error", "created_at")


@admin.register(FollowUp)
class FollowUpAdmin(ReadOnlyAdmin):
    list_display = ("question", "topic", "position", "kind", "status", "searched", "model", "created_at")
    list_filter = ("status", "kind", "searched")
    search_fields = ("question", "topic__question", "topic__owner__username")
    list_select_related = ("topic",)
    raw_id_fields = ("topic", "subquery")
    date_hierarchy = "created_at"


@admin.register(Topic)
class TopicAdmin(ReadOnlyAdmin):
    """An audit view of a topic's run: nothing of it is written here. Its question, settings,
    state and plan belong to the workflow and the run (a change here would skip the row lock and
    the owner's limits, or move a topic under the worker running it); a topic is started on the
    page, the API or the console, and one deleted here goes through `workflow.delete_topic`."""

    list_display = ("question", "owner", "status", "mode", "sources", "domain", "created_at")
    list_filter = ("status", "mode", "sources", "domain")
    search_fields = ("question", "owner__username")
    list_select_related = ("owner",)
    raw_id_fields = ("owner",)
    date_hierarchy = "created_at"
    readonly_fields = ("usage_summary", "created_at", "updated_at")
    inlines = [SubQueryInline, FollowUpInline]

    def delete_model(self, request: HttpRequest, obj: Topic) -> None:
        workflow.delete_topic(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Topic]) -> None:
        for topic in queryset:
            workflow.delete_topic(topic)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, Any, Any]:
        """Sub-queries go with their topic, though none may be deleted alone here."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        perms_needed.discard(str(SubQuery._meta.verbose_name))  # equal to the lazy name it holds
        return deleted, counts, perms_needed, protected

    @admin.display(description=_("LLM usage"))
    def usage_summary(self, topic: Topic) -> str:
        if topic.pk is None:
            return "—"
        spent = usage.topic_usage(topic)
        cost = f"{spent.cost:.4f} {_currency()}" if usage.prices_configured() else _("no prices configured")
        text = _(
            "{calls} calls ({cached} from the cache, {failed} failed), {prompt} prompt + {completion}"
            ' completion tokens, estimated cost {cost}. <a href="{url}">The calls</a>'
        )
        return format_html(
            str(text),
            calls=spent.calls,
            cached=spent.cached_calls,
            failed=spent.failed_calls,
            prompt=spent.prompt_tokens,
            completion=spent.completion_tokens,
            cost=cost,
            url=_calls_url(None, spent_only=False, topic=topic.pk),
        )


@admin.register(SubQuery)
class SubQueryAdmin(ReadOnlyAdmin):
    """Sub-queries are a topic's plan: changed only through the workflow, deleted with their topic."""

    list_display = ("text", "topic", "round", "position", "origin")
    list_filter = ("origin",)
    raw_id_fields = ("topic",)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(SearchQuery)
class SearchQueryAdmin(ReadOnlyAdmin):
    list_display = ("text", "language", "subquery", "result_count", "searched_at")
    list_filter = ("language",)
    raw_id_fields = ("subquery",)


@admin.register(Hit)
class HitAdmin(ReadOnlyAdmin):
    list_display = ("title", "url", "source", "engine", "topic")
    list_filter = ("source", "engine")
    search_fields = ("title", "url")
    raw_id_fields = ("topic", "subquery", "search_query", "chunk")


@admin.register(HitScore)
class HitScoreAdmin(ReadOnlyAdmin):
    list_display = ("hit", *SCORE_FIELDS, "origin")
    list_filter = ("origin",)
    raw_id_fields = ("hit",)


@admin.register(Document)
class DocumentAdmin(ReadOnlyAdmin):
    list_display = ("title", "url", "fetched_via", "topic", "round", "created_at")
    list_filter = ("fetched_via",)
    search_fields = ("title", "url")
    raw_id_fields = ("topic", "hit", "uploaded_document")


@admin.register(Summary)
class SummaryAdmin(ReadOnlyAdmin):
    list_display = ("document", "origin", "created_at")
    raw_id_fields = ("document",)


@admin.register(SummaryScore)
class SummaryScoreAdmin(ReadOnlyAdmin):
    list_display = ("summary", *SCORE_FIELDS, "origin")
    raw_id_fields = ("summary",)


class CitationInline(ReadOnlyInline):
    """The citation check of the report: read-only, as the run wrote it."""

    model = Citation
    can_delete = False
    fields = ("sentence_index", "n", "verdict", "local_verdict", "method", "score", "sentence", "passage")


@admin.register(Report)
class ReportAdmin(ReadOnlyAdmin):
    list_display = ("topic", "model", "citations_supported", "created_at")
    raw_id_fields = ("topic",)
    inlines = [CitationInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        supported = Count("citations", filter=Q(citations__verdict=Citation.Verdict.SUPPORTED))
        return super().get_queryset(request).annotate(checked=Count("citations"), supported=supported)

    @admin.display(description=_("citations supported"))
    def citations_supported(self, report: WithAnnotations[Report, CitationCounts]) -> str:
        return f"{report.supported} / {report.checked}" if report.checked else "—"


@admin.register(Citation)
class CitationAdmin(ReadOnlyAdmin):
    list_display = (
        "report",
        "sentence_index",
        "n",
        "verdict",
        "local_verdict",
        "method",
        "score",
        "sentence",
    )
    list_filter = ("verdict", "local_verdict", "method")
    search_fields = ("sentence", "passage", "report__topic__question")
    list_select_related = ("report__topic",)
    raw_id_fields = ("report",)


@admin.register(ShareLink)
class ShareLinkAdmin(admin.ModelAdmin):
    list_display = ("topic", "created_at", "expires_at", "revoked_at")
    raw_id_fields = ("topic",)
    readonly_fields = ("token_hash",)


@admin.register(Round)
class RoundAdmin(ReadOnlyAdmin):
    list_display = (
        "topic",
        "number",
        "subqueries",
        "documents",
        "new_documents",
        "growth_rate",
        "stop_reason",
    )
    list_filter = ("stop_reason",)
    list_select_related = ("topic",)
    raw_id_fields = ("topic",)


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "topic", "seq", "stage", "level", "message", "done", "total")
    list_filter = ("stage", "level")
    search_fields = ("message", "topic__question")
    list_select_related = ("topic",)
    raw_id_fields = ("topic",)
    date_hierarchy = "created_at"
