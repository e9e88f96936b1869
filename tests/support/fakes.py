"""Loopback HTTP servers that stand in for the outside world in tests and benchmarks.

Each speaks the real protocol over a real socket on 127.0.0.1, so the code under test runs
its genuine HTTP client path. Routes are plain functions; every request is recorded with its
arrival time. Faults (an error status, a Retry-After, a hang) are queued with `inject` and
consumed one per request, before the route answers.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
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
    raw_path: str = ""  # path and query exactly as sent
    arrived: float = field(default_factory=time.monotonic)
    arrived_wall: float = field(default_factory=time.time)

    def json(self) -> Any:
        return json.loads(self.body or b"null")

    def param(self, name: str, default: str = "") -> str:
        return self.query.get(name, [default])[0]


@dataclass
class Response:
    status: int = 200
    body: bytes | str | dict | list = b""
    headers: dict[str, str] = field(default_factory=dict)
    # Without Content-Length the body runs until the connection closes, as some servers send it.
    close_delimited: bool = False
    # A streamed body (server-sent events): written chunk by chunk (HTTP/1.1 chunked), as produced.
    chunks: Iterable[bytes] | None = None
    # How a streamed body ends: "" normally; "drop" closes the connection mid-body (an incomplete
    # chunked read for the client); "end" ends the body cleanly, though the answer had not.
    cut: str = ""

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, (dict, list)):
            return json.dumps(self.body).encode(), "application/json"
        if isinstance(self.body, str):
            return self.body.encode(), "text/plain; charset=utf-8"
        return self.body, "application/octet-stream"


Route = Callable[[Request], Response]


@dataclass
class Fault:
    """What the next request gets instead of (or before) the route's answer.

    `delay` seconds pass first (a hang, when longer than the client's timeout); then `status`
    is answered with `headers` and `body`, or the route answers when `status` is None.
    `path` limits the fault to requests for that path.
    """

    status: int | None = 500
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | str | dict | list = field(default_factory=lambda: {"error": "injected fault"})
    delay: float = 0.0
    path: str | None = None
    # For a streamed answer (status None): only its first `cut_after` chunks are sent, then the
    # stream ends as `cut` says ("drop", "end", or "error": an error event, as OpenRouter sends).
    cut_after: int | None = None
    cut: str = "drop"

    @classmethod
    def cut_stream(cls, after: int, how: str = "drop", path: str | None = None) -> Fault:
        return cls(status=None, path=path, cut_after=after, cut=how)

    @classmethod
    def hang(cls, seconds: float, path: str | None = None) -> Fault:
        return cls(status=None, delay=seconds, path=path)


class FakeService:
    """A threaded HTTP server on a free loopback port; use as a context manager.

    `routes` are keyed by (method, exact path); `fallback` answers every other request (the
    reader fake needs any path). `latency` delays every answer.
    """

    def __init__(
        self,
        routes: dict[tuple[str, str], Route] | None = None,
        *,
        fallback: Route | None = None,
        latency: float = 0.0,
    ) -> None:
        self.routes: dict[tuple[str, str], Route] = dict(routes or {})
        self.fallback = fallback
        self.latency = latency
        self.requests: list[Request] = []
        self.faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True  # a hanging answer must not hold up shutdown
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/"

    def __enter__(self) -> FakeService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def requests_to(self, path: str) -> list[Request]:
        return [request for request in self.requests if request.path == path]

    def answer(self, request: Request) -> Response:
        fault = self._take_fault(request.path)
        pause = self.latency + (fault.delay if fault else 0.0)
        if pause:
            self._closing.wait(pause)
        if fault and fault.status is not None:
            return Response(fault.status, fault.body, dict(fault.headers))
        route = self.routes.get((request.method, request.path)) or self.fallback
        response = route(request) if route else Response(404, {"error": "not found"})
        if fault and fault.cut_after is not None and response.chunks is not None:
            response.chunks = _cut(response.chunks, fault.cut_after, fault.cut)
            response.cut = "end" if fault.cut == "error" else fault.cut
        return response

    def _take_fault(self, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.path in (None, path):
                    self.faults.remove(fault)
                    return fault
        return None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                request = self._read_request()
                service.requests.append(request)
                response = service.answer(request)
                # The client may have given up (a timeout test); there is nobody to answer.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._send(response)

            def _read_request(self) -> Request:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                return Request(
                    method=self.command,
                    path=parts.path,
                    query=parse_qs(parts.query, keep_blank_values=True),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length) if length else b"",
                    raw_path=self.path,
                )

            def _send(self, response: Response) -> None:
                if response.chunks is not None:
                    self._send_chunked(response)
                    return
                body, content_type = response.encoded()
                self.send_response(response.status)
                for name, value in {"Content-Type": content_type, **response.headers}.items():
                    self.send_header(name, value)
                if response.close_delimited:
                    self.close_connection = True
                else:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _send_chunked(self, response: Response) -> None:
                self.protocol_version = "HTTP/1.1"  # chunked bodies need it; closed after
                self.close_connection = True
                self.send_response(response.status)
                headers = {"Content-Type": "text/event-stream; charset=utf-8", **response.headers}
                for name, value in {**headers, "Transfer-Encoding": "chunked", "Connection": "close"}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.flush()
                for chunk in response.chunks or ():
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                if response.cut != "drop":  # "drop": the connection closes with the body unfinished
                    self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        return Handler


def _cut(chunks: Iterable[bytes], after: int, how: str) -> Iterator[bytes]:
    yield from itertools.islice(chunks, after)
    if how == "error":
        error = {"error": {"message": "Upstream provider error", "type": "server_error", "code": 502}}
        yield b"data: " + json.dumps(error).encode() + b"\n\n"


def _openai_error(status: int, message: str, kind: str, code: str | None = None) -> Response:
    return Response(status, {"error": {"message": message, "type": kind, "param": None, "code": code}})


def _bearer_ok(request: Request, key: str | None) -> bool:
    return key is None or request.headers.get("authorization") == f"Bearer {key}"


def openai_models(*model_ids: str) -> Route:
    """GET /v1/models as an OpenAI-compatible server answers it."""

    def route(request: Request) -> Response:
        if not _bearer_ok(request, "test-key"):
            return _openai_error(
                401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
            )
        return Response(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in model_ids]})

    return route


def estimate_tokens(text: str) -> int:
    return len(text) // 4 + 1


def chat_completion(model: str, content: str | None, prompt_tokens: int) -> dict[str, Any]:
    """A chat.completion object exactly as the OpenAI API returns it."""
    completion_tokens = estimate_tokens(content or "")
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "system_fingerprint": "fp_fake",
    }


@dataclass(frozen=True)
class Pace:
    """How fast a model writes: the first token after `first_token` s, then `tokens_per_second`
    (0: the whole answer at once). `tokens` says how long an answer is in tokens (default: its
    text's estimate), so a benchmark can time answers as long as real ones."""

    first_token: float = 0.0
    tokens_per_second: float = 0.0
    tokens: Callable[[list[dict], str], int] | None = None

    def writing_seconds(self, messages: list[dict], text: str) -> float:
        if not self.tokens_per_second:
            return 0.0
        count = self.tokens(messages, text) if self.tokens else estimate_tokens(text)
        return count / self.tokens_per_second


def chat_chunk(
    completion_id: str, model: str, delta: dict[str, Any], finish: str | None, usage: bool
) -> dict[str, Any]:
    """A chat.completion.chunk as the OpenAI API streams it (usage null until the last chunk)."""
    chunk: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage:
        chunk["usage"] = None
    return chunk


def _sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


def stream_frames(
    model: str, content: str, prompt_tokens: int, messages: list[dict], *, usage: bool, pace: Pace
) -> Iterator[bytes]:
    """The server-sent events of a streamed chat completion: a role delta, the content in pieces
    of about a token (paced), a finish reason, the usage chunk when asked for, then [DONE]."""
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    yield _sse(chat_chunk(completion_id, model, {"role": "assistant", "content": ""}, None, usage))
    pieces = [content[i : i + 4] for i in range(0, len(content), 4)]
    time.sleep(pace.first_token)
    gap = pace.writing_seconds(messages, content) / max(1, len(pieces))
    for i, piece in enumerate(pieces):
        if i and gap:
            time.sleep(gap)
        yield _sse(chat_chunk(completion_id, model, {"content": piece}, None, usage))
    yield _sse(chat_chunk(completion_id, model, {}, "stop", usage))
    if usage:
        completion_tokens = estimate_tokens(content)
        totals = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        last = chat_chunk(completion_id, model, {}, None, False)
        yield _sse({**last, "choices": [], "usage": totals})
    yield _sse("[DONE]")


def openai_chat(
    reply: Callable[[list[dict]], str | None],
    *,
    key: str | None = "test-key",
    model_ids: Iterable[str] = ("test-model",),
    pace: Pace | None = None,
) -> Route:
    """POST /v1/chat/completions: `reply` gets the messages and returns the answer text.

    A wrong bearer key gets 401 and an unknown model 404, with OpenAI's error JSON; `key=None`
    accepts any key (a keyless local server). With `"stream": true` the answer comes as
    server-sent `chat.completion.chunk` events; `pace` times the writing in both modes.
    """
    known = set(model_ids)
    pace = pace or Pace()

    def route(request: Request) -> Response:
        if not _bearer_ok(request, key):
            return _openai_error(
                401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
            )
        payload = request.json() or {}
        model, messages = payload.get("model", ""), payload.get("messages", [])
        if model not in known:
            message = f"The model `{model}` does not exist or you do not have access to it."
            return _openai_error(404, message, "invalid_request_error", "model_not_found")
        prompt_tokens = estimate_tokens("".join(str(m.get("content", "")) for m in messages))
        content = reply(messages)
        if payload.get("stream"):
            usage = bool((payload.get("stream_options") or {}).get("include_usage"))
            frames = stream_frames(model, content or "", prompt_tokens, messages, usage=usage, pace=pace)
            return Response(200, b"", {"Content-Type": "text/event-stream; charset=utf-8"}, chunks=frames)
        time.sleep(pace.first_token + pace.writing_seconds(messages, content or ""))
        return Response(200, chat_completion(model, content, prompt_tokens))

    return route


def _basic_auth_ok(request: Request, auth: tuple[str, str] | None) -> bool:
    if auth is None:
        return True
    expected = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    return request.headers.get("authorization") == f"Basic {expected}"


def searxng_result(item: dict[str, Any], position: int) -> dict[str, Any]:
    """One SearXNG result with the fields a real instance fills in."""
    engine = item.get("engine", "duckduckgo")
    return {
        "url": item.get("url", ""),
        "title": item.get("title", ""),
        "content": item.get("content", ""),
        "engine": engine,
        "engines": item.get("engines", [engine]),
        "positions": [position],
        "score": item.get("score", 1.0 / position),
        "category": item.get("category", "general"),
        "parsed_url": [*urlsplit(item.get("url", "")), ""],
        "template": "default.html",
        "publishedDate": item.get("publishedDate"),
        **{k: v for k, v in item.items() if k not in {"engine", "engines", "score", "category"}},
    }


def searxng_search(
    results: Callable[[Request], list[dict]],
    *,
    auth: tuple[str, str] | None = None,
    unresponsive: Iterable[tuple[str, str]] = (),
) -> Route:
    """GET /search as SearXNG answers it; 403 unless format=json, as when json is not enabled."""
    unresponsive_engines = [list(pair) for pair in unresponsive]

    def route(request: Request) -> Response:
        if not _basic_auth_ok(request, auth):
            return Response(401, "Unauthorized", {"WWW-Authenticate": 'Basic realm="searxng"'})
        if request.param("format") != "json":
            return Response(403, b"<html><body>403 Forbidden</body></html>", {"Content-Type": "text/html"})
        items = [searxng_result(item, i) for i, item in enumerate(results(request), start=1)]
        return Response(
            200,
            {
                "query": request.param("q"),
                "number_of_results": len(items),
                "results": items,
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": unresponsive_engines,
            },
        )

    return route


def reader_text(title: str, url: str, markdown: str) -> str:
    return f"Title: {title}\n\nURL Source: {url}\n\nMarkdown Content:\n{markdown}\n"


def reader(pages: dict[str, tuple[str, str]], *, key: str | None = None) -> Route:
    """GET /<target-url> as r.jina.ai answers it; `pages` maps a target URL to (title, markdown).

    Use it as a FakeService `fallback`, since the target URL is the path.
    """

    def route(request: Request) -> Response:
        if not _bearer_ok(request, key):
            return Response(
                401, {"code": 401, "name": "AuthenticationRequiredError", "message": "Invalid API key"}
            )
        target = request.raw_path.removeprefix("/")
        if target not in pages:
            return Response(
                422, {"code": 422, "name": "AssertionFailureError", "message": f"Failed to goto {target}"}
            )
        title, markdown = pages[target]
        return Response(200, reader_text(title, target, markdown))

    return route


def html_page(title: str, body_html: str, *, status: int = 200, charset: str = "utf-8") -> Route:
    """A plain HTML page."""
    html = (
        f'<!DOCTYPE html><html><head><meta charset="{charset}"><title>{title}</title></head>'
        f"<body>{body_html}</body></html>"
    )

    def route(request: Request) -> Response:
        content_type = f"text/html; charset={charset}"
        return Response(status, html.encode(charset), {"Content-Type": content_type})

    return route


def redirect(location: str, status: int = 302) -> Route:
    """A redirect to `location` (absolute or relative, as the server sends it)."""

    def route(request: Request) -> Response:
        return Response(status, b"", {"Location": location})

    return route


def searxng_config(*engine_names: str, timed: tuple[str, ...] = ()) -> Route:
    """GET /config as SearXNG answers it (searx/webapp.py's `config`: one entry per engine with
    its categories, `enabled`, `paging`, `time_range_support`, `timeout`); `timed` engines
    support time ranges."""

    def route(request: Request) -> Response:
        engines = [
            {
                "name": name,
                "categories": ["general"],
                "shortcut": name[:2],
                "enabled": True,
                "paging": True,
                "language_support": True,
                "safesearch": False,
                "time_range_support": name in timed,
                "timeout": 3.0,
            }
            for name in engine_names
        ]
        return Response(200, {"engines": engines, "categories": ["general"], "instance_name": "SearXNG"})

    return route
