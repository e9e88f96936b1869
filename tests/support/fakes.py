"""Loopback HTTP servers that stand in for the outside world in tests and benchmarks.

Each speaks the real protocol over a real socket on 127.0.0.1, so the code under test runs
its genuine HTTP client path. Routes are plain functions; every request is recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Response:
    status: int = 200
    body: bytes | str | dict | list = b""
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, (dict, list)):
            return json.dumps(self.body).encode(), "application/json"
        if isinstance(self.body, str):
            return self.body.encode(), "text/plain; charset=utf-8"
        return self.body, "application/octet-stream"


Route = Callable[[Request], Response]


class FakeService:
    """A threaded HTTP server on a free loopback port; use as a context manager."""

    def __init__(self, routes: dict[tuple[str, str], Route] | None = None) -> None:
        self.routes: dict[tuple[str, str], Route] = dict(routes or {})
        self.requests: list[Request] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/"

    def __enter__(self) -> FakeService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(
                    method=self.command,
                    path=parts.path,
                    query=parse_qs(parts.query),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length) if length else b"",
                )
                service.requests.append(request)
                route = service.routes.get((self.command, parts.path))
                response = route(request) if route else Response(404, {"error": "not found"})
                body, content_type = response.encoded()
                self.send_response(response.status)
                headers = {"Content-Type": content_type, **response.headers}
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        return Handler


def openai_models(*model_ids: str) -> Route:
    """GET /v1/models as an OpenAI-compatible server answers it."""

    def route(request: Request) -> Response:
        if request.headers.get("authorization") != "Bearer test-key":
            return Response(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
        return Response(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in model_ids]})

    return route


def searxng_config(*engine_names: str) -> Route:
    """GET /config as SearXNG answers it (only the fields MindSearch reads, plus a few)."""

    def route(request: Request) -> Response:
        engines = [{"name": name, "enabled": True, "categories": ["general"]} for name in engine_names]
        return Response(200, {"engines": engines, "categories": ["general"], "instance_name": "SearXNG"})

    return route
