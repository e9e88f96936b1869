"""Personal API tokens for staff: who has which, when each was last used, and revoking a
leaked one. Only hashes are stored, so there is no token to show or edit. Invite links for
SIGNUP=invite. The admin's sign-in behind the login guard is mindsearch/admin_site.py."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from mindsearch.models import ApiToken, Invite
from mindsearch.requests import signed_in


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


@admin.register(Invite)
class InviteAdmin(admin.ModelAdmin):
    """Invite links for SIGNUP=invite: add one, copy its link from the message (shown once; only
    its hash is kept), send it to the person; it signs up one account."""

    list_display = ("__str__", "created_by", "created_at", "expires_at", "used_at", "used_by")
    list_filter = (("used_at", admin.EmptyFieldListFilter), "created_at")
    search_fields = ("note", "used_by__username")
    fields = ("note", "expires_at", "created_by", "created_at", "used_at", "used_by")
    readonly_fields = ("created_by", "created_at", "used_at", "used_by")

    def save_model(self, request: HttpRequest, obj: Invite, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token, stored = Invite.new_secret()
        obj.token_hash = stored["token_hash"]
        obj.created_by = signed_in(request)  # the admin lets only signed-in staff this far
        super().save_model(request, obj, form, change)
        link = request.build_absolute_uri(f"{reverse('signup')}?invite={token}")
        self.message_user(
            request,
            _("The invite link, shown this once: %(link)s") % {"link": link},
            messages.WARNING if settings.SIGNUP != "invite" else messages.SUCCESS,
        )
        if settings.SIGNUP != "invite":
            self.message_user(
                request,
                _("Sign-up is %(mode)s, so the link is only needed with SIGNUP=invite.")
                % {"mode": settings.SIGNUP},
                messages.WARNING,
            )
