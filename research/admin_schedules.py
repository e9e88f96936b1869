"""The operator's view of scheduled research: every schedule, pausable, and its deliveries."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from research.models import Delivery, TopicSchedule


class DeliveryInline(admin.TabularInline):
    model = Delivery
    extra = 0
    can_delete = False
    fields = ("topic", "channel", "status", "attempts", "next_try_at", "sent_at", "last_error")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(TopicSchedule)
class TopicScheduleAdmin(admin.ModelAdmin):
    # The newest version's question says which topic a schedule keeps current (series is an id).
    list_display = (
        "series",
        "last_topic",
        "owner",
        "every",
        "cron",
        "next_run_at",
        "paused",
        "failures",
        "last_run_at",
    )
    list_select_related = ("owner", "last_topic")
    list_filter = ("paused", "every")
    search_fields = ("owner__username",)
    readonly_fields = (
        "owner",
        "series",
        "webhook_secret",
        "last_topic",
        "last_run_at",
        "failures",
        "created_at",
    )
    actions = ("pause", "resume")
    inlines = (DeliveryInline,)

    @admin.action(description=_("Pause the selected schedules"))
    def pause(self, request: HttpRequest, queryset: QuerySet[TopicSchedule]) -> None:
        count = queryset.update(paused=True)
        messages.success(request, ngettext("%d schedule paused.", "%d schedules paused.", count) % count)

    @admin.action(description=_("Resume the selected schedules"))
    def resume(self, request: HttpRequest, queryset: QuerySet[TopicSchedule]) -> None:
        count = queryset.update(paused=False)
        messages.success(request, ngettext("%d schedule resumed.", "%d schedules resumed.", count) % count)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made on the topic's page, by its owner


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ("topic", "channel", "status", "attempts", "created_at", "sent_at")
    list_filter = ("status", "channel")
    readonly_fields = (
        "schedule",
        "topic",
        "channel",
        "status",
        "attempts",
        "next_try_at",
        "last_error",
        "created_at",
        "sent_at",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
