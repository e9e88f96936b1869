"""Text nobody types: NUL and other control characters in a request's query or form fields are
refused with 400 before any view runs (PostgreSQL cannot even store NUL, so without this they
ended as a server error). Tabs and line breaks are text; file contents are not looked at.

The API answers its own 422s for its JSON bodies and query parameters (mindsearch/api_common.py);
this covers every page and form, the API's query strings included.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from django.core.exceptions import BadRequest, RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.utils.translation import gettext as _

# C0 controls but tab, line feed and carriage return; DEL; C1 controls.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def has_control_characters(request: HttpRequest) -> bool:
    fields = [request.GET]
    if request.method in ("POST", "PUT", "PATCH") and request.content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        fields.append(request.POST)  # an unreadable form body raises here, as in any view
    for data in fields:
        for key, values in data.lists():
            if CONTROL.search(key) or any(CONTROL.search(value) for value in values):
                return True
    return False


class ControlCharacterMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        status = 400
        try:
            refused = has_control_characters(request)
        except RequestDataTooBig:
            refused, status = True, 413
            message = _("The request has more form data than a form of this site takes.")
        except (MultiPartParserError, SuspiciousOperation, BadRequest):
            refused, message = True, _("The request body could not be read as a form.")
        else:
            message = _("The request contains control characters (such as NUL), which no text field accepts.")
        if refused:
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": message}, status=status)
            return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
