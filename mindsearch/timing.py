"""A `Server-Timing` header on every page: how long the application itself took to answer.

The middleware is synchronous only, on purpose, and comes last: Django then runs the whole
middleware chain and the view in one worker thread per request. With an async-capable
middleware closest to the view, every `MiddlewareMixin` above it would hop between the event
loop and a thread on each request, which costs more than most pages take to render.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase


class ServerTimingMiddleware:
    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed_ms = (time.perf_counter() - started) * 1000
        response.headers.setdefault("Server-Timing", f"app;dur={elapsed_ms:.1f}")
        return response
