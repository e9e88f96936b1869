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
import select
import socket
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
    # A streamed answer: when the client closed the connection before its end (None: it did not),
    # and how many chunks were written (the server stops writing once the client is gone).
    gone: float | None = None
    chunks_sent: int = 0

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
        # shutdown() waits for the loop to look at its flag, once per poll interval: at the
        # default 0.5 s every service of every test cost 0.25 s on average to stop (a fifth of
        # a pipeline test's time); at 0.02 s it is 10 ms, for 50 idle wake-ups a second.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

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
                    self._send(response, request)

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

            def _send(self, response: Response, request: Request) -> None:
                if response.chunks is not None:
                    self._send_chunked(response, request)
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

            def _send_chunked(self, response: Response, request: Request) -> None:
                self.protocol_version = "HTTP/1.1"  # chunked bodies need it; closed after
                self.close_connection = True
                self.send_response(response.status)
                headers = {"Content-Type": "text/event-stream; charset=utf-8", **response.headers}
                for name, value in {**headers, "Transfer-Encoding": "chunked", "Connection": "close"}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.flush()
                watching = threading.Event()
                watcher = threading.Thread(target=_watch_close, args=(self.connection, request, watching))
                watcher.start()
                try:
                    for chunk in response.chunks or ():
                        if request.gone is not None:  # the client left: stop generating, as servers do
                            return
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        request.chunks_sent += 1
                    if response.cut != "drop":  # "drop": the connection closes with the body unfinished
                        self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                finally:
                    watching.set()
                    watcher.join()

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        return Handler


def _watch_close(connection: socket.socket, request: Request, done: threading.Event) -> None:
    """Note when the client closes the connection while its streamed answer is being written."""
    while not done.is_set():
        readable, _, _ = select.select([connection], [], [], 0.02)
        if not readable:
            continue
        try:
            if connection.recv(1, socket.MSG_PEEK) == b"":
                request.gone = time.monotonic()
                return
        except OSError:
            request.gone = time.monotonic()
            return
        done.wait(0.02)  # bytes from the client (none expected): keep watching


def _cut(chunks: Iterable[bytes], after: int, how: str) -> Iterator[bytes]:
    yield from itertools.islice(chunks, after)
    if how == "error":
        error = {"error": {"message": "Upstream provider error", "type": "server_error", "code": 502}}
        yield b"data: " + json.dumps(error).encode() + b"\n\n"


def _openai_error(status: int, message: str, kind: str, code: str | None = None) -> Response:
    return Response(status, {"error": {"message": message, "type": kind, "param": None, "code": code}})


def _bearer_ok(request: Request, key: str | None) -> bool:
    return key is None or request.headers.get("authorization") == f"Bearer {key}"


def openai_models(*model_ids: str, max_model_len: int | None = None, n_ctx: int | None = None) -> Route:
    """GET /v1/models as an OpenAI-compatible server answers it; `max_model_len` as vLLM adds
    it to each model, `n_ctx` as llama.cpp's server puts it in each model's `meta`."""

    def entry(model: str) -> dict[str, Any]:
        item: dict[str, Any] = {"id": model, "object": "model", "owned_by": "fake"}
        if max_model_len is not None:
            item["max_model_len"] = max_model_len
        if n_ctx is not None:
            item["meta"] = {"n_ctx": n_ctx, "n_ctx_train": 8 * n_ctx, "n_vocab": 49152}
        return item

    def route(request: Request) -> Response:
        if not _bearer_ok(request, "test-key"):
            return _openai_error(
                401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
            )
        return Response(200, {"object": "list", "data": [entry(m) for m in model_ids]})

    return route


def llamacpp_props(n_ctx: int) -> Route:
    """GET /props as llama.cpp's server answers it (the slot's context size among its settings)."""

    def route(request: Request) -> Response:
        return Response(
            200,
            {
                "default_generation_settings": {"n_ctx": n_ctx, "params": {"n_predict": -1}},
                "total_slots": 1,
                "model_path": "/models/fake.gguf",
            },
        )

    return route


def estimate_tokens(text: str) -> int:
    return len(text) // 4 + 1


# --- how each provider answers beyond plain OpenAI ------------------------------------------------

THINKING = (
    "Okay, the user wants an answer built from the numbered sources [1] and [2]. Let me think "
    "about which of them matters most before I write anything."
)


@dataclass(frozen=True)
class Dialect:
    """What a provider's server does that plain OpenAI chat models do not, as each documents it.

    `reasoning` says how the model's reasoning (`thinking`, or THINKING) comes back: "" none;
    "think" as <think>…</think> before the answer in the content (Ollama, llama.cpp and vLLM
    without a reasoning parser: Qwen3, DeepSeek-R1); "reasoning_content" beside the content
    (vLLM's reasoning parser, DeepSeek's API, llama.cpp with --reasoning-format); "reasoning"
    beside it (Ollama's and OpenRouter's OpenAI API); "parts" as Mistral's Magistral sends it, the
    content a list of {"type": "thinking"} and {"type": "text"} parts; "hidden" as OpenAI's
    reasoning models, not sent but counted in usage.completion_tokens_details.reasoning_tokens.
    Reasoning spends the token limit first: a limit it exhausts leaves the answer empty with
    finish_reason "length" (and a <think> block unclosed).

    `refuses` maps a parameter to how it is refused with OpenAI's 400: "parameter" (Unsupported
    parameter, e.g. max_tokens: "Use 'max_completion_tokens' instead") or "value" (temperature
    other than 1). `stream_usage` False ignores stream_options (no usage in a stream).
    `context_tokens` answers a prompt and limit beyond it with `context_style`'s 400: "openai"
    (and vLLM) "This model's maximum context length is …", "llamacpp" exceed_context_size_error.
    `ollama` answers an unknown model as Ollama does: 404 "… not found, try pulling it first".
    """

    reasoning: str = ""
    thinking: Callable[[list[dict]], str] | None = None
    refuses: dict[str, str] = field(default_factory=dict)
    stream_usage: bool = True
    context_tokens: int | None = None
    context_style: str = "openai"
    ollama: bool = False

    def thought(self, messages: list[dict]) -> str:
        if not self.reasoning:
            return ""
        return self.thinking(messages) if self.thinking else THINKING


PLAIN = Dialect()
OPENAI_REASONING = Dialect(
    reasoning="hidden", refuses={"max_tokens": "parameter", "temperature": "value", "top_p": "parameter"}
)
OLLAMA_THINK = Dialect(reasoning="think", ollama=True)  # Qwen3 / DeepSeek-R1 on Ollama, <think> in content
OLLAMA_REASONING = Dialect(reasoning="reasoning", ollama=True)  # Ollama's `reasoning` field
VLLM_REASONING = Dialect(reasoning="reasoning_content", context_tokens=None)  # vLLM's reasoning parser
DEEPSEEK_REASONER = Dialect(reasoning="reasoning_content")  # DeepSeek's API, deepseek-reasoner
MAGISTRAL = Dialect(reasoning="parts")  # Mistral's Magistral: thinking and text parts
LLAMACPP = Dialect(context_style="llamacpp", stream_usage=False)
# llama.cpp's server with --reasoning-format deepseek: reasoning_content, its own context 400
LLAMACPP_REASONING = Dialect(reasoning="reasoning_content", context_style="llamacpp", stream_usage=False)
NO_STREAM_USAGE = Dialect(stream_usage=False)

QUOTA_ERROR = {
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details. For more "
        "information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}


def quota_exceeded() -> Response:
    """OpenAI's 429 for an account out of quota: it does not clear by waiting."""
    return Response(429, QUOTA_ERROR)


def _refusal(dialect: Dialect, payload: dict[str, Any]) -> Response | None:
    for name, how in dialect.refuses.items():
        if name not in payload:
            continue
        if how == "value" and payload[name] != 1:
            message = (
                f"Unsupported value: '{name}' does not support {payload[name]} with this model. Only the"
                " default (1) value is supported."
            )
            return _openai_refusal(message, name, "unsupported_value")
        if how == "parameter":
            instead = " Use 'max_completion_tokens' instead." if name == "max_tokens" else ""
            message = f"Unsupported parameter: '{name}' is not supported with this model.{instead}"
            return _openai_refusal(message, name, "unsupported_parameter")
    return None


def _openai_refusal(message: str, param: str, code: str) -> Response:
    return Response(
        400, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    )


def _overflow(dialect: Dialect, prompt_tokens: int, limit: int | None) -> Response | None:
    window = dialect.context_tokens
    if window is None:
        return None
    if dialect.context_style == "llamacpp":
        if prompt_tokens < window:
            return None
        error = {
            "code": 400,
            "message": f"request ({prompt_tokens} tokens) exceeds the available context size"
            f" ({window} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": prompt_tokens,
            "n_ctx": window,
        }
        return Response(400, {"error": error})
    asked = prompt_tokens + (limit or 0)
    if asked <= window:
        return None
    message = (
        f"This model's maximum context length is {window} tokens. However, you requested {asked} tokens"
        f" ({prompt_tokens} in the messages, {limit or 0} in the completion). Please reduce the length of"
        " the messages or completion."
    )
    error = {
        "message": message,
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    return Response(400, {"error": error})


def _unknown_model(dialect: Dialect, model: str) -> Response:
    if dialect.ollama:
        message = f'model "{model}" not found, try pulling it first'
        return Response(
            404, {"error": {"message": message, "type": "api_error", "param": None, "code": None}}
        )
    message = f"The model `{model}` does not exist or you do not have access to it."
    return _openai_error(404, message, "invalid_request_error", "model_not_found")


@dataclass(frozen=True)
class Written:
    """What the model wrote within its limit: the answer, the reasoning, why it stopped."""

    answer: str
    reasoning: str
    finish: str

    @classmethod
    def within(cls, answer: str, reasoning: str, limit: int | None) -> Written:
        if not limit:
            return cls(answer, reasoning, "stop")
        if reasoning and estimate_tokens(reasoning) >= limit:
            return cls("", reasoning[: limit * 4], "length")
        room = limit - (estimate_tokens(reasoning) if reasoning else 0)
        if estimate_tokens(answer) > room:
            return cls(answer[: max(room, 0) * 4], reasoning, "length")
        return cls(answer, reasoning, "stop")

    @property
    def reasoning_tokens(self) -> int:
        return estimate_tokens(self.reasoning) if self.reasoning else 0

    @property
    def completion_tokens(self) -> int:
        return estimate_tokens(self.answer) + self.reasoning_tokens


def _usage(dialect: Dialect, written: Written, prompt_tokens: int) -> dict[str, Any]:
    completion = written.completion_tokens
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }
    if dialect.reasoning == "hidden":
        usage["completion_tokens_details"] = {"reasoning_tokens": written.reasoning_tokens}
    return usage


def _think_content(written: Written) -> str:
    """<think>…</think> and the answer, as one content: unclosed when the limit cut the reasoning."""
    if written.answer or written.finish == "stop":
        return f"<think>\n{written.reasoning}\n</think>\n\n{written.answer}"
    return f"<think>\n{written.reasoning}"


def _message(dialect: Dialect, written: Written) -> dict[str, Any]:
    """The assistant message of a whole (not streamed) answer, in the dialect's shape."""
    message: dict[str, Any] = {"role": "assistant", "content": written.answer, "refusal": None}
    if dialect.reasoning == "think" and written.reasoning:
        message["content"] = _think_content(written)
    elif dialect.reasoning in ("reasoning_content", "reasoning") and written.reasoning:
        message[dialect.reasoning] = written.reasoning
    elif dialect.reasoning == "parts":
        thinking = {"type": "thinking", "thinking": [{"type": "text", "text": written.reasoning}]}
        message["content"] = [thinking, {"type": "text", "text": written.answer}]
    return message


def _pieces(text: str) -> list[str]:
    return [text[i : i + 4] for i in range(0, len(text), 4)]


def _deltas(dialect: Dialect, written: Written) -> list[dict[str, Any]]:
    """The content deltas of a streamed answer, about a token each, in the dialect's shape."""
    if dialect.reasoning == "think" and written.reasoning:
        return [{"content": piece} for piece in _pieces(_think_content(written))]
    thinking: list[dict[str, Any]] = []
    if dialect.reasoning in ("reasoning_content", "reasoning"):
        thinking = [{dialect.reasoning: piece} for piece in _pieces(written.reasoning)]
    elif dialect.reasoning == "parts":
        thinking = [
            {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": piece}]}]}
            for piece in _pieces(written.reasoning)
        ]
    if dialect.reasoning == "parts":
        return thinking + [
            {"content": [{"type": "text", "text": piece}]} for piece in _pieces(written.answer)
        ]
    return thinking + [{"content": piece} for piece in _pieces(written.answer)]


def chat_completion(
    model: str,
    content: str | None,
    prompt_tokens: int,
    *,
    dialect: Dialect = PLAIN,
    written: Written | None = None,
) -> dict[str, Any]:
    """A chat.completion object exactly as the OpenAI API (or the dialect's server) returns it."""
    written = written or Written(content or "", "", "stop")
    message = _message(dialect, written)
    if content is None and written.finish == "stop" and not written.reasoning:
        message["content"] = None
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": written.finish}],
        "usage": _usage(dialect, written, prompt_tokens),
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
    model: str,
    content: str,
    prompt_tokens: int,
    messages: list[dict],
    *,
    usage: bool,
    pace: Pace,
    dialect: Dialect = PLAIN,
    written: Written | None = None,
) -> Iterator[bytes]:
    """The server-sent events of a streamed chat completion: a role delta, the reasoning and the
    content in pieces of about a token (paced; in the dialect's shape), a finish reason, the
    usage chunk when asked for (and the dialect sends it), then [DONE]."""
    written = written or Written(content, "", "stop")
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    yield _sse(chat_chunk(completion_id, model, {"role": "assistant", "content": ""}, None, usage))
    deltas = _deltas(dialect, written)
    time.sleep(pace.first_token)
    gap = pace.writing_seconds(messages, written.answer + written.reasoning) / max(1, len(deltas))
    for i, delta in enumerate(deltas):
        if i and gap:
            time.sleep(gap)
        yield _sse(chat_chunk(completion_id, model, delta, None, usage))
    yield _sse(chat_chunk(completion_id, model, {}, written.finish, usage))
    if usage:
        last = chat_chunk(completion_id, model, {}, None, False)
        yield _sse({**last, "choices": [], "usage": _usage(dialect, written, prompt_tokens)})
    yield _sse("[DONE]")


def openai_chat(
    reply: Callable[[list[dict]], str | None],
    *,
    key: str | None = "test-key",
    model_ids: Iterable[str] = ("test-model",),
    pace: Pace | None = None,
    dialect: Dialect = PLAIN,
) -> Route:
    """POST /v1/chat/completions: `reply` gets the messages and returns the answer text.

    A wrong bearer key gets 401 and an unknown model 404, with OpenAI's error JSON; `key=None`
    accepts any key (a keyless local server). With `"stream": true` the answer comes as
    server-sent `chat.completion.chunk` events; `pace` times the writing in both modes. The
    token limit (`max_tokens` or `max_completion_tokens`) cuts the answer (reasoning first) with
    finish_reason "length". `dialect` adds a provider's documented ways (see `Dialect`).
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
            return _unknown_model(dialect, model)
        if refused := _refusal(dialect, payload):
            return refused
        prompt_tokens = estimate_tokens("".join(str(m.get("content", "")) for m in messages))
        limit = payload.get("max_completion_tokens") or payload.get("max_tokens")
        if overflow := _overflow(dialect, prompt_tokens, limit):
            return overflow
        content = reply(messages)
        written = Written.within(content or "", dialect.thought(messages), limit)
        if payload.get("stream"):
            usage = bool((payload.get("stream_options") or {}).get("include_usage")) and dialect.stream_usage
            frames = stream_frames(
                model,
                content or "",
                prompt_tokens,
                messages,
                usage=usage,
                pace=pace,
                dialect=dialect,
                written=written,
            )
            return Response(200, b"", {"Content-Type": "text/event-stream; charset=utf-8"}, chunks=frames)
        time.sleep(pace.first_token + pace.writing_seconds(messages, written.answer + written.reasoning))
        return Response(200, chat_completion(model, content, prompt_tokens, dialect=dialect, written=written))

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
