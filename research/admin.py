from __future__ import annotations

from django.contrib import admin

from research.models import (
    CacheEntry,
    Document,
    Hit,
    HitScore,
    LLMCall,
    Report,
    RunEvent,
    SearchQuery,
    ShareLink,
    SubQuery,
    Summary,
    SummaryScore,
    Topic,
)

SCORE_FIELDS = (
    "total",
    "relevance_to_question",
    "relevance_to_direction",
    "completeness",
    "accuracy",
    "structure",
)


class SubQueryInline(admin.TabularInline):
    model = SubQuery
    extra = 0
    fields = ("position", "round", "text", "origin")


@admin.register(Topic)
class TopicAdmin(admin.ModelAdmin):
    list_display = ("question", "owner", "status", "mode", "sources", "created_at")
    list_filter = ("status", "mode", "sources")
    search_fields = ("question", "owner__username")
    raw_id_fields = ("owner",)
    readonly_fields = (
        "last_event_seq",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
    )
    inlines = [SubQueryInline]


@admin.register(SubQuery)
class SubQueryAdmin(admin.ModelAdmin):
    list_display = ("text", "topic", "round", "position", "origin")
    list_filter = ("origin",)
    raw_id_fields = ("topic",)


@admin.register(SearchQuery)
class SearchQueryAdmin(admin.ModelAdmin):
    list_display = ("text", "language", "subquery", "result_count", "searched_at")
    list_filter = ("language",)
    raw_id_fields = ("subquery",)


@admin.register(Hit)
class HitAdmin(admin.ModelAdmin):
    list_display = ("title", "url", "source", "engine", "topic")
    list_filter = ("source", "engine")
    search_fields = ("title", "url")
    raw_id_fields = ("topic", "subquery", "search_query", "chunk")


@admin.register(HitScore)
class HitScoreAdmin(admin.ModelAdmin):
    list_display = ("hit", *SCORE_FIELDS, "origin")
    list_filter = ("origin",)
    raw_id_fields = ("hit",)


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ("title", "url", "fetched_via", "topic", "round", "created_at")
    list_filter = ("fetched_via",)
    search_fields = ("title", "url")
    raw_id_fields = ("topic", "hit", "uploaded_document")


@admin.register(Summary)
class SummaryAdmin(admin.ModelAdmin):
    list_display = ("document", "origin", "created_at")
    raw_id_fields = ("document",)


@admin.register(SummaryScore)
class SummaryScoreAdmin(admin.ModelAdmin):
    list_display = ("summary", *SCORE_FIELDS, "origin")
    raw_id_fields = ("summary",)


@admin.register(Report)
class ReportAdmin(admin.ModelAdmin):
    list_display = ("topic", "model", "created_at")
    raw_id_fields = ("topic",)


@admin.register(ShareLink)
class ShareLinkAdmin(admin.ModelAdmin):
    list_display = ("topic", "created_at", "expires_at", "revoked_at")
    raw_id_fields = ("topic",)
    readonly_fields = ("token_hash",)


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = (
        "topic",
        "seq",
        "stage",
        "level",
        "message",
        "done",
        "total",
        "created_at",
    )
    list_filter = ("stage", "level")
    raw_id_fields = ("topic",)


@admin.register(LLMCall)
class LLMCallAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "user",
        "topic",
        "stage",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "latency_ms",
        "cache_hit",
        "error",
    )
    list_filter = ("stage", "model", "cache_hit")
    search_fields = ("user__username", "model", "error")
    raw_id_fields = ("user", "topic")
    date_hierarchy = "created_at"


@admin.register(CacheEntry)
class CacheEntryAdmin(admin.ModelAdmin):
    list_display = (
        "kind",
        "key_hash",
        "owner",
        "size_bytes",
        "hit_count",
        "created_at",
        "expires_at",
    )
    list_filter = ("kind",)
    search_fields = ("key_hash", "description")
    raw_id_fields = ("owner",)
    date_hierarchy = "created_at"
