"""Personal API tokens for staff: who has which, when each was last used, and revoking a
leaked one. Only hashes are stored, so there is no token to show or edit."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from mindsearch.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "created_at", "last_used_at", "expires_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter), "created_at")
    search_fields = ("name", "owner__username")
    list_select_related = ("owner",)
    fields = ("name", "owner", "created_at", "last_used_at", "expires_at", "revoked_at")
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a token is shown once, to its owner, on the settings page

    @admin.action(description=_("Revoke the selected tokens"))
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            token.revoke()
        self.message_user(request, _("%d tokens revoked.") % queryset.count(), messages.SUCCESS)
