"""Content-Security-Policy: scripts, styles and connections only from this site.

Django 5.2 has no CSP support of its own, so this middleware adds the header. The pages keep to
it: no inline scripts, event-handler attributes or style attributes (templates put behaviour
in static/js and looks in static/css; a test reads every template for them). Markdown from the
LLM and the web is sanitised before display; this policy is the second line behind that.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse

POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "font-src": "'self'",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def policy_for(request: HttpRequest) -> str:
    directives = dict(POLICY)
    # 'self' covers this host's websockets in CSP 3 browsers; older ones need them named.
    try:
        host = request.get_host()
    except DisallowedHost:  # answered 400 already; the header must not turn that into an error
        host = ""
    if host:
        directives["connect-src"] += f" ws://{host} wss://{host}"
    return "; ".join(f"{name} {value}" for name, value in directives.items())


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # Django's DEBUG error pages (the yellow 404 and 500) style themselves inline; with DEBUG
        # off, error pages are plain and get the policy like every other page.
        if not (settings.DEBUG and response.status_code in (404, 500)):
            response.headers.setdefault("Content-Security-Policy", policy_for(request))
        return response
