"""What a view may rely on about its request, typed: the signed-in user of a workspace page and
django-htmx's details."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request as django-htmx's middleware leaves it."""

    htmx: HtmxDetails


def signed_in(request: HttpRequest) -> User:
    """The user of a workspace page (LoginRequiredMiddleware lets no one else reach it)."""
    if not isinstance(request.user, User):
        raise PermissionDenied
    return request.user
