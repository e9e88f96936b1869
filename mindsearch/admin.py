"""Personal API tokens for staff: who has which, when each was last used, and revoking a
leaked one. Only hashes are stored, so there is no token to show or edit."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.auth.decorators import login_not_required
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy as _

from mindsearch.forms import ThrottledAdminAuthenticationForm
from mindsearch.models import ApiToken

# The admin's door shares the sign-in page's guard (mindsearch/throttle.py).
admin.site.login_form = ThrottledAdminAuthenticationForm


@login_not_required
def _guarded_login(request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
    from mindsearch.views import admin_login

    return admin_login(request, extra_context)


admin.site.login = _guarded_login


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
