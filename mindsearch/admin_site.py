"""The admin site MindSearch installs as `admin.site` (`MindSearchAdminConfig.default_site`): its
sign-in shares the sign-in page's guard (mindsearch/throttle.py)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache

from mindsearch.forms import ThrottledAdminAuthenticationForm


class GuardedAdminSite(admin.AdminSite):
    login_form = ThrottledAdminAuthenticationForm

    @method_decorator(never_cache)
    @login_not_required
    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        from mindsearch.views import admin_login

        return admin_login(request, extra_context)
