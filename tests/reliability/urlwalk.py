"""Every URL the project defines, read from Django's resolver, ninja's schema and the websocket
routing at test time, so a URL added tomorrow is walked (or named as missing) tomorrow."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from django.urls import URLPattern, URLResolver, get_resolver

ALL_METHODS = ("GET", "POST")
_PARAM = re.compile(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>[^)]*\)")


@dataclass(frozen=True)
class Route:
    key: str  # "topic_detail", "admin:auth_user_change", "api:edit_plan", "ws:…"; the route when unnamed
    route: str  # as the project wrote it: "topics/<int:topic_id>/", "admin/(?P<url>.*)$"
    methods: tuple[str, ...] = ALL_METHODS
    operation: bool = False  # an operation of the API's schema

    @property
    def namespace(self) -> str:
        return self.key.split(":", 1)[0] if ":" in self.key else ""

    @property
    def params(self) -> list[str]:
        return [m.group(1) or m.group(2) for m in _PARAM.finditer(self.route)]

    def url(self, values: dict[str, object]) -> str:
        missing = [name for name in self.params if name not in values]
        if missing:
            raise LookupError(f"{self.key}: give {missing} a value in Estate.params() (conftest.py)")
        path = _PARAM.sub(lambda m: str(values[m.group(1) or m.group(2)]), self.route)
        return "/" + path.replace("^", "").replace("$", "")


def http_routes() -> list[Route]:
    """Each URL pattern; each API operation once per HTTP method it answers."""
    methods = _api_methods()
    routes = []
    for route, name in _walk(get_resolver().url_patterns):
        key = name or route
        if key in methods:
            routes.append(Route(key, route, methods[key], operation=True))
        else:
            routes.append(Route(key, route))
    return routes


def websocket_routes() -> list[Route]:
    from research.routing import websocket_urlpatterns

    return [
        Route(f"ws:{pattern.pattern}", str(pattern.pattern), ("WS",)) for pattern in websocket_urlpatterns
    ]


def _walk(patterns: list, prefix: str = "", namespace: str = "") -> Iterator[tuple[str, str | None]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = ":".join(filter(None, [namespace, pattern.namespace or ""]))
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif isinstance(pattern, URLPattern):
            name = f"{namespace}:{pattern.name}" if namespace and pattern.name else pattern.name
            yield prefix + str(pattern.pattern), name


def _api_methods() -> dict[str, tuple[str, ...]]:
    """api:<operation id> → the HTTP methods it answers, from the API's own schema."""
    from mindsearch.api import api

    found: dict[str, list[str]] = {}
    for operations in api.get_openapi_schema()["paths"].values():
        for method, operation in operations.items():
            found.setdefault(f"api:{operation['operationId']}", []).append(method.upper())
    return {key: tuple(value) for key, value in found.items()}
