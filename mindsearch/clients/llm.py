"""Chat completions and embeddings from an OpenAI-compatible endpoint (aitunnel, OpenAI, Ollama,
vLLM, llama.cpp, DeepSeek, Mistral…), whatever the model behind it.

One retry layer only, ours: up to MAX_ATTEMPTS on 429, 5xx, timeouts, dropped connections and
empty answers, each attempt waiting for the global rate limit first. A caller for whom an empty
answer is an answer (a report's section with nothing new to say) says so (`empty_ok`): its empty
answer is returned at once, never asked again. Errors that no retry can
mend are raised at once and say what to do: a rejected key (`LLMAuthError`), an exhausted quota
or billing (`LLMQuotaError`), a model the endpoint does not know or has not pulled
(`LLMUnknownModel`), a prompt larger than the model's window (`LLMContextOverflow`).

Every call is streamed (server-sent `chat.completion.chunk` frames, usage asked for in the last
one), so its timeout measures the server's work, not the queue in front of it: the first frame
may take QUEUE_TIMEOUT_SECONDS (a local server busy with another request), and then no more than
TIMEOUT_SECONDS may pass between two frames. A timed-out request is closed before it is sent
again, so a server never works on two copies. A server that answers with one JSON body instead
is read as it is. Only a finished answer is ever returned; a stream that breaks off is a failed
attempt, retried from the start.

What a model does differently is learned from the endpoint's own answers and remembered per base
URL and model in the shared cache (the database, or Redis), so each lesson costs one extra call
at most once: a parameter it refuses (OpenAI's reasoning models refuse `temperature` and
`max_tokens`; known families are set up before any refusal), its context window (from a
context-length 400), and whether it reasons. Reasoning — `<think>` blocks, `reasoning_content`,
`reasoning`, Mistral's thinking parts — is never the answer: it is separated before anyone sees
the text, counted in `reasoning_tokens`, and announced through `on_thinking`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urljoin

import httpx
from django.conf import settings
from django.core.cache import caches

from mindsearch.clients import probe, ratelimit, tls

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.aitunnel.ru/v1/"
# Read at call time, so tests can shorten them.
TIMEOUT_SECONDS = 120.0  # once the server began answering: the longest silence between two frames
QUEUE_TIMEOUT_SECONDS = 600.0  # before its first frame: a local server finishing other requests
EMBEDDINGS_TIMEOUT_SECONDS = 60.0
CONNECT_TIMEOUT_SECONDS = 10.0
SERVER_INFO_TIMEOUT_SECONDS = 5.0
MAX_ATTEMPTS = 4
BACKOFF_SECONDS = 0.5
RETRY_AFTER_CAP_SECONDS = 60.0
RETRYABLE_STATUSES = {408, 409, 429}
# Tokens a reasoning model gets on top of the answer's own limit, for its reasoning.
REASONING_EXTRA_TOKENS = 4096
# The least room an answer is given when the window is nearly full of prompt.
MIN_ANSWER_TOKENS = 256
THINKING_INTERVAL_SECONDS = 1.0
# Families that refuse `temperature` and `max_tokens` (OpenAI's reasoning models), by the name
# after any provider prefix ("openai/o3-mini" through a router).
REASONING_FAMILY = re.compile(r"^(o1|o3|o4|gpt-5)", re.IGNORECASE)
REASONING_FAMILY_REFUSALS = {"temperature": "", "max_tokens": "max_completion_tokens"}
NEVER_DROPPED = {"model", "messages", "stream"}


class LLMError(Exception):
    """The LLM call failed; the message is shown to the user."""

    def __init__(self, message: str, *, attempts: int = 0, latency_ms: int = 0) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.latency_ms = latency_ms


class LLMAuthError(LLMError):
    """The endpoint rejected the API key."""


class LLMNotConfigured(LLMError):
    """No endpoint or model is configured."""


class LLMBadAnswer(LLMError):
    """The endpoint answered, but not with anything usable."""


class LLMQuotaError(LLMError):
    """The account is out of quota, credit or billing: never retried (it does not clear by itself)."""


class LLMUnknownModel(LLMError):
    """The endpoint does not know the model (or Ollama has not pulled it): never retried."""


class LLMContextOverflow(LLMError):
    """The prompt does not fit the model's context window: never sent again as it is.
    `context_tokens` is the window, when the endpoint said it."""

    def __init__(
        self, message: str, *, context_tokens: int | None = None, attempts: int = 0, latency_ms: int = 0
    ) -> None:
        super().__init__(message, attempts=attempts, latency_ms=latency_ms)
        self.context_tokens = context_tokens


class _Transient(Exception):
    """A failure worth another attempt; becomes `kind` when the attempts run out."""

    def __init__(
        self, message: str, *, retry_after: float | None = None, kind: type[LLMError] = LLMError
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.kind = kind


class _Refused(Exception):
    """A 400 naming a parameter (or its value) the model does not take: `replacement` is the
    parameter to send the value as instead, "" to leave it out."""

    def __init__(self, message: str, parameter: str, replacement: str) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.replacement = replacement


class _Overflow(Exception):
    """A context-length 400: the window and the prompt's tokens, when the endpoint said them."""

    def __init__(
        self, message: str, window: int | None, prompt_tokens: int | None, most_output: int | None = None
    ) -> None:
        super().__init__(message)
        self.window = window
        self.prompt_tokens = prompt_tokens
        self.most_output = most_output  # "max_tokens is too large … supports at most N completion tokens"


@dataclass(frozen=True)
class Completion:
    text: str  # the answer only: never reasoning, never <think> blocks
    model: str
    prompt_tokens: int
    completion_tokens: int  # includes reasoning tokens
    latency_ms: int
    attempts: int
    reasoning_tokens: int = 0
    finish_reason: str = "stop"  # "length" when the token limit cut the answer
    usage_estimated: bool = False  # the server sent no usage: counts estimated from the text

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass(frozen=True)
class ModelProfile:
    """What is known of the configured model, for the status page."""

    base_url: str
    model: str
    context_tokens: int | None
    context_source: str  # "setting" | "server" | "learned" | ""
    reasoning: bool  # a known reasoning family, or reasoning was seen in an answer
    refused: tuple[str, ...]  # parameters the endpoint refused and we now leave out/rename
    streaming: bool | None  # None: not seen yet


def endpoint_configured() -> bool:
    """An API key, or an endpoint of one's own (Ollama, vLLM and llama.cpp need no key)."""
    return bool(settings.AITUNNEL_API_KEY) or settings.AITUNNEL_BASE_URL != DEFAULT_BASE_URL


def is_configured() -> bool:
    """A model, and an API key or an endpoint of one's own (local servers need no key)."""
    return endpoint_configured() and bool(settings.AITUNNEL_MODEL)


def _auth_headers() -> dict[str, str]:
    """The endpoint's Bearer header, none without a key (local servers need none)."""
    return {"Authorization": f"Bearer {settings.AITUNNEL_API_KEY}"} if settings.AITUNNEL_API_KEY else {}


def endpoint_key(model: str = "") -> str:
    """ "base_url|model": what caches and learned refusals are keyed by, so another server behind
    the same model name never inherits the first one's answers or lessons."""
    return f"{settings.AITUNNEL_BASE_URL.rstrip('/')}|{model or settings.AITUNNEL_MODEL}"


def estimate_tokens(text: str) -> int:
    """A conservative token count of `text` without a tokenizer, for small local models too:
    a token per 4 ASCII letters, per digit, per punctuation mark and per 4 spaces; a token per
    character of other scripts (Cyrillic, Greek), two per character of three bytes and more (CJK).
    Measured against SmolLM2's tokenizer (tests/data/token_counts.json): never under by 10%."""
    letters = singles = spaces = 0
    for ch in text:
        if ord(ch) >= 128:
            singles += (len(ch.encode()) + 1) // 2
        elif ch.isalpha():
            letters += 1
        elif ch.isspace():
            spaces += 1
        else:
            singles += 1
    return (letters + 3) // 4 + singles + (spaces + 3) // 4


def _messages_text(messages: list[dict[str, Any]]) -> str:
    """The text of the messages, as the model reads it (a picture's parts are left out)."""
    texts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "\n".join(texts)


# --- what the endpoint taught us, shared by every process -------------------------------------------


@dataclass
class _Endpoint:
    refused: dict[str, str] = field(default_factory=dict)  # parameter → replacement ("" = left out)
    context_tokens: int | None = None
    reasoning: bool = False
    streaming: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "refused": self.refused,
            "context_tokens": self.context_tokens,
            "reasoning": self.reasoning,
            "streaming": self.streaming,
        }

    def merge(self, stored: dict[str, Any]) -> None:
        """What another process learned, kept beside what this one did."""
        self.refused = {**dict(stored.get("refused") or {}), **self.refused}
        self.context_tokens = self.context_tokens or stored.get("context_tokens")
        self.reasoning = self.reasoning or bool(stored.get("reasoning"))
        if self.streaming is None:
            self.streaming = stored.get("streaming")


_KNOWN: dict[str, _Endpoint] = {}  # this process's copy, read from the shared cache once per key
_SERVER_WINDOWS: dict[str, tuple[int | None, float]] = {}  # key → (window the server reports, when)
SERVER_WINDOW_RETRY_SECONDS = 300.0


def forget_endpoints() -> None:
    """Drop this process's copy of what endpoints taught (as a new process starts without it)."""
    _KNOWN.clear()
    _SERVER_WINDOWS.clear()


def _store_key(key: str) -> str:
    return "llm-endpoint:" + hashlib.sha256(key.encode()).hexdigest()[:40]


async def _stored(key: str) -> dict[str, Any]:
    try:
        value = await caches["default"].aget(_store_key(key))
    except Exception as exc:  # a cache that fails costs a lesson, never a call
        logger.debug("the LLM endpoint's lessons could not be read: %s", exc)
        return {}
    return value if isinstance(value, dict) else {}


async def _known(key: str, model: str) -> _Endpoint:
    """What is known of `key`, read from the shared cache the first time this process asks."""
    if key not in _KNOWN:
        endpoint = _Endpoint()
        if REASONING_FAMILY.match(model.rsplit("/", 1)[-1]):
            endpoint.refused, endpoint.reasoning = dict(REASONING_FAMILY_REFUSALS), True
        endpoint.merge(await _stored(key))
        _KNOWN[key] = endpoint
    return _KNOWN[key]


async def _learn(key: str, endpoint: _Endpoint, change: Callable[[_Endpoint], None]) -> None:
    """Apply `change` to what is known of `key`, and share it when it taught something new."""
    before = endpoint.as_dict()
    change(endpoint)
    if endpoint.as_dict() == before:
        return
    endpoint.merge(await _stored(key))
    try:
        await caches["default"].aset(_store_key(key), endpoint.as_dict(), timeout=None)
    except Exception as exc:  # this process still remembers it
        logger.debug("the LLM endpoint's lesson could not be shared: %s", exc)


# --- the context window ------------------------------------------------------------------------------


async def context_window(model: str = "") -> int | None:
    """The model's context window in tokens: AITUNNEL_CONTEXT_TOKENS, else what a context-length
    400 taught, else what the server reports (vLLM's max_model_len in /v1/models, llama.cpp's
    /props or /v1/models meta.n_ctx), else None."""
    return (await _window(model or settings.AITUNNEL_MODEL))[0]


async def _window(model: str) -> tuple[int | None, str]:
    if settings.AITUNNEL_CONTEXT_TOKENS:
        return settings.AITUNNEL_CONTEXT_TOKENS, "setting"
    key = endpoint_key(model)
    endpoint = await _known(key, model)
    if endpoint.context_tokens:
        return endpoint.context_tokens, "learned"
    served = await _server_window(key, model)
    return (served, "server") if served else (None, "")


def _known_window(key: str, endpoint: _Endpoint) -> int | None:
    """The window as far as it is known without asking anyone."""
    served = _SERVER_WINDOWS.get(key, (None, 0.0))[0]
    return settings.AITUNNEL_CONTEXT_TOKENS or endpoint.context_tokens or served


async def _server_window(key: str, model: str) -> int | None:
    window, asked = _SERVER_WINDOWS.get(key, (None, -SERVER_WINDOW_RETRY_SECONDS))
    if window or time.monotonic() - asked < SERVER_WINDOW_RETRY_SECONDS:
        return window
    base = settings.AITUNNEL_BASE_URL.rstrip("/") + "/"
    root = re.sub(r"/v1/?$", "/", base)
    window = _window_in_models(await _server_json(urljoin(base, "models")), model)
    window = window or _window_in_props(await _server_json(urljoin(root, "props")))
    _SERVER_WINDOWS[key] = (window, time.monotonic())
    return window


async def _server_json(url: str) -> Any:
    try:
        response = await probe.get(
            url, timeout=SERVER_INFO_TIMEOUT_SECONDS, headers=_auth_headers(), verify=tls.context()
        )
        return response.json() if response.status_code == 200 else None
    except (probe.Unreachable, ValueError):
        return None


def _window_in_models(answer: Any, model: str) -> int | None:
    items = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(items, list):
        return None
    for item in items:
        if isinstance(item, dict) and (item.get("id") == model or len(items) == 1):
            meta = item.get("meta")
            if not isinstance(meta, dict):
                meta = {}
            return _positive(item.get("max_model_len")) or _positive(meta.get("n_ctx"))
    return None


def _window_in_props(answer: Any) -> int | None:
    if not isinstance(answer, dict):
        return None
    settings_ = answer.get("default_generation_settings")
    nested = settings_.get("n_ctx") if isinstance(settings_, dict) else None
    return _positive(nested) or _positive(answer.get("n_ctx"))


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def profile(model: str = "") -> ModelProfile:
    """What is known of the model: its window and where that came from, whether it reasons,
    the parameters it refused, whether it streams."""
    name = model or settings.AITUNNEL_MODEL
    endpoint = await _known(endpoint_key(name), name)
    window, source = await _window(name)
    refused = tuple(f"{k}→{v}" if v else k for k, v in sorted(endpoint.refused.items()))
    return ModelProfile(
        base_url=settings.AITUNNEL_BASE_URL,
        model=name,
        context_tokens=window,
        context_source=source,
        reasoning=endpoint.reasoning,
        refused=refused,
        streaming=endpoint.streaming,
    )


# --- chat completions --------------------------------------------------------------------------------

TextListener = Callable[[str], Awaitable[None]]
ThinkingListener = Callable[[], Awaitable[None]]


@dataclass
class _Call:
    """One `complete`: what it asks, and what it has spent so far."""

    key: str
    model: str
    messages: list[dict[str, Any]]
    limit: int
    temperature: float | None
    user: int | None
    on_text: TextListener | None
    on_thinking: ThinkingListener | None
    empty_ok: bool = False  # an empty answer that did not reason is the answer, not a failure
    started: float = field(default_factory=time.monotonic)
    sent: int = 0  # requests sent, every kind of retry included
    widened: bool = False  # asked again with a larger budget after an empty answer that reasoned
    fitted: bool = False  # asked again with a limit fitting a window a 400 told


async def complete(
    messages: list[dict[str, Any]],
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    user: int | None = None,
    on_text: TextListener | None = None,
    on_thinking: ThinkingListener | None = None,
    model: str = "",
    empty_ok: bool = False,
) -> Completion:
    """One chat completion, retried on transient failures; `user` is whose share of the limit it
    takes. An empty answer is one of them (LLMBadAnswer when every attempt got one), unless
    `empty_ok`: a caller that may rightly get nothing (a report's section whose sources the
    sections above said) gets the empty Completion of the first, its usage as the endpoint told
    it, without paying for the same prompt again. A reasoning model that spent its limit
    reasoning is asked again with a larger budget either way: that is no answer. `on_text`
    hears the answer so far as it grows (from the start again when an attempt is retried),
    never reasoning; `on_thinking` is called (at most once a second) while the model reasons
    and no answer text came yet. `max_tokens` None is AITUNNEL_MAX_TOKENS, fitted
    to the window; `temperature` None is AITUNNEL_TEMPERATURE (empty: the provider's default).
    `model` picks another model of the same endpoint (the vision model); the same global limit
    holds for it."""
    if not is_configured():
        raise LLMNotConfigured(
            "No LLM is configured: set AITUNNEL_MODEL and AITUNNEL_API_KEY (or AITUNNEL_BASE_URL)"
        )
    name = model or settings.AITUNNEL_MODEL
    key = endpoint_key(name)
    endpoint = await _known(key, name)
    call = _Call(
        key=key,
        model=name,
        messages=messages,
        limit=_token_limit(max_tokens, messages, endpoint, _known_window(key, endpoint)),
        temperature=settings.AITUNNEL_TEMPERATURE if temperature is None else temperature,
        user=user,
        on_text=on_text,
        on_thinking=on_thinking,
        empty_ok=empty_ok,
    )
    async with _http_client() as client:
        return await _with_retries(client, call, endpoint)


async def most_tokens(messages: list[dict[str, Any]], max_tokens: int | None = None, model: str = "") -> int:
    """The most one `complete` of `messages` can cost, for a budget to hold before it is sent:
    the prompt as estimated with half again for the estimate's error, and the answer's limit as
    the call will send it (for a reasoning model twice, and the extra: it may be asked again
    with a larger budget)."""
    name = model or settings.AITUNNEL_MODEL
    key = endpoint_key(name)
    endpoint = await _known(key, name)
    limit = _token_limit(max_tokens, messages, endpoint, _known_window(key, endpoint))
    prompt = estimate_tokens(_messages_text(messages))
    answer = 2 * limit + REASONING_EXTRA_TOKENS if endpoint.reasoning else limit
    return prompt + prompt // 2 + answer


def _token_limit(
    asked: int | None, messages: list[dict[str, Any]], endpoint: _Endpoint, window: int | None
) -> int:
    """Every call has a limit: the caller's or AITUNNEL_MAX_TOKENS, more for a reasoning model
    (its reasoning counts), no more than the window leaves after the prompt."""
    limit = asked or settings.AITUNNEL_MAX_TOKENS
    if endpoint.reasoning:
        limit += REASONING_EXTRA_TOKENS
    return _fitted(limit, messages, window)


def _fitted(limit: int, messages: list[dict[str, Any]], window: int | None) -> int:
    if not window:
        return limit
    room = window - estimate_tokens(_messages_text(messages))
    return max(min(limit, room), MIN_ANSWER_TOKENS)


def _http_client() -> httpx.AsyncClient:
    """A client per call, closed after it; cheap, because the TLS context is shared. Reads have
    no httpx timeout: `_send` measures the queue and the silences itself."""
    timeout = httpx.Timeout(CONNECT_TIMEOUT_SECONDS, read=None, write=60.0, pool=None)
    # A keyless local server still gets a Bearer header: some refuse a request without one.
    headers = _auth_headers() or {"Authorization": "Bearer not-needed"}
    return httpx.AsyncClient(timeout=timeout, headers=headers, verify=tls.context())


async def _with_retries(client: httpx.AsyncClient, call: _Call, endpoint: _Endpoint) -> Completion:
    attempt = 1
    while True:
        try:
            return await _asked(client, call, endpoint)
        except _Transient as failure:
            if attempt == MAX_ATTEMPTS:
                message = f"{failure} (gave up after {call.sent} attempts)"
                raise failure.kind(
                    message, attempts=call.sent, latency_ms=_ms_since(call.started)
                ) from failure
            await asyncio.sleep(retry_delay(attempt, failure.retry_after))
        except LLMError as error:
            error.attempts, error.latency_ms = call.sent, _ms_since(call.started)
            raise
        attempt += 1


async def _asked(client: httpx.AsyncClient, call: _Call, endpoint: _Endpoint) -> Completion:
    """One attempt: sent again at once, never more than once per lesson, when the endpoint
    refused a parameter, said its window, or reasoned without answering."""
    while True:
        body = _body(call, endpoint)
        try:
            answer = await _send(client, call, body)
        except _Refused as refusal:
            await _learn_refusal(call, endpoint, refusal, body)
            continue
        except _Overflow as overflow:
            await _fit_window(call, endpoint, overflow)
            continue
        await _learn_answer(call, endpoint, answer)
        if answer.text.strip():
            return answer.completion(call)
        if not answer.reasoned:
            if call.empty_ok:
                return answer.completion(call)
            raise _Transient("The LLM returned an empty answer", kind=LLMBadAnswer)
        if call.widened:
            raise LLMBadAnswer(
                f"The LLM spent its {call.limit} tokens reasoning and returned no answer, even with a"
                " larger budget (raise AITUNNEL_MAX_TOKENS, or lower AITUNNEL_REASONING_EFFORT)"
            )
        call.widened = True
        call.limit = _fitted(
            max(2 * call.limit, call.limit + REASONING_EXTRA_TOKENS),
            call.messages,
            _known_window(call.key, endpoint),
        )


def _body(call: _Call, endpoint: _Endpoint) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": call.model,
        "messages": call.messages,
        "max_tokens": call.limit,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if call.temperature is not None:
        body["temperature"] = call.temperature
    if settings.AITUNNEL_REASONING_EFFORT:
        body["reasoning_effort"] = settings.AITUNNEL_REASONING_EFFORT
    for name, replacement in endpoint.refused.items():
        if name in body and name not in NEVER_DROPPED:
            value = body.pop(name)
            if replacement:
                body[replacement] = value
    return body


async def _learn_refusal(call: _Call, endpoint: _Endpoint, refusal: _Refused, body: dict[str, Any]) -> None:
    """Remember the refused parameter, or fail when it was no lesson (a loop otherwise)."""
    name, replacement = refusal.parameter, refusal.replacement
    if (
        name not in body
        or name in NEVER_DROPPED
        or name in endpoint.refused
        or replacement in endpoint.refused
    ):
        raise LLMError(f"The LLM endpoint refused the request (HTTP 400): {refusal}")
    logger.info(
        "%s refuses %r; sent %s from now on",
        call.key,
        name,
        repr(replacement) if replacement else "without it",
    )
    await _learn(call.key, endpoint, lambda known: known.refused.update({name: replacement}))


async def _fit_window(call: _Call, endpoint: _Endpoint, overflow: _Overflow) -> None:
    """Learn the window a context-length 400 told; ask once more with a smaller limit when the
    prompt alone fits it, else raise LLMContextOverflow."""
    most = overflow.most_output
    if most and not call.fitted and most < call.limit:
        call.fitted, call.limit = True, most
        return
    window = overflow.window
    if window:
        await _learn(call.key, endpoint, lambda known: setattr(known, "context_tokens", window))
    prompt = overflow.prompt_tokens or estimate_tokens(_messages_text(call.messages))
    room = window - prompt if window else 0
    if not call.fitted and room >= MIN_ANSWER_TOKENS // 4 and room < call.limit:
        call.fitted, call.limit = True, room
        return
    size = f" ({window} tokens)" if window else ""
    raise LLMContextOverflow(
        f"The prompt does not fit the model's context window{size}: {overflow}", context_tokens=window
    )


async def _learn_answer(call: _Call, endpoint: _Endpoint, answer: _Answer) -> None:
    def seen(known: _Endpoint) -> None:
        known.reasoning = known.reasoning or answer.reasoned
        known.streaming = answer.streamed

    await _learn(call.key, endpoint, seen)


@dataclass
class _Answer:
    """What one request brought back: the answer and the reasoning apart."""

    text: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str = ""
    streamed: bool = True

    @property
    def reasoned(self) -> bool:
        """Reasoning came back, or the usage counted some (OpenAI's reasoning is not sent)."""
        details = (self.usage or {}).get("completion_tokens_details")
        told = details.get("reasoning_tokens") if isinstance(details, dict) else None
        return bool(self.reasoning) or (isinstance(told, int) and told > 0)

    def completion(self, call: _Call) -> Completion:
        prompt, completion, reasoning, estimated = self._counts(call)
        return Completion(
            text=self.text,
            model=self.model or call.model,
            prompt_tokens=prompt,
            completion_tokens=completion,
            latency_ms=_ms_since(call.started),
            attempts=call.sent,
            reasoning_tokens=reasoning,
            finish_reason=self.finish_reason or "stop",
            usage_estimated=estimated,
        )

    def _counts(self, call: _Call) -> tuple[int, int, int, bool]:
        """(prompt, completion, reasoning, estimated): the server's usage, else estimates, so a
        cost never reads 0."""
        usage = self.usage or {}
        thought = estimate_tokens(self.reasoning)
        completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
        if isinstance(completion, int) and isinstance(prompt, int) and (completion or prompt):
            details = usage.get("completion_tokens_details")
            told = details.get("reasoning_tokens") if isinstance(details, dict) else None
            reasoning = told if isinstance(told, int) and told else min(thought, completion)
            return prompt, completion, reasoning, False
        estimated_prompt = estimate_tokens(_messages_text(call.messages))
        return estimated_prompt, estimate_tokens(self.text) + thought, thought, True


async def _send(client: httpx.AsyncClient, call: _Call, body: dict[str, Any]) -> _Answer:
    """One request: its first frame awaited up to QUEUE_TIMEOUT_SECONDS, then no silence longer
    than TIMEOUT_SECONDS. Leaving the stream on a timeout closes the connection, so the server
    stops before the request is sent again."""
    await ratelimit.acquire_llm(user=call.user)
    call.sent += 1
    url = settings.AITUNNEL_BASE_URL.rstrip("/") + "/chat/completions"
    reader = _Reader(call)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(QUEUE_TIMEOUT_SECONDS) as deadline:
            async with client.stream("POST", url, json=body) as response:
                if not response.is_success:
                    await response.aread()
                    raise _status_failure(response, body, call.model)
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    await response.aread()
                    return reader.whole(response)
                async for line in response.aiter_lines():
                    if reader.feed(line):
                        deadline.reschedule(loop.time() + TIMEOUT_SECONDS)
                        await reader.tell()
                    if reader.done:
                        break
    except TimeoutError:
        if reader.began:
            raise _Transient(f"The LLM endpoint stopped sending for {TIMEOUT_SECONDS:g} s") from None
        raise _Transient(f"The LLM endpoint did not answer within {QUEUE_TIMEOUT_SECONDS:g} s") from None
    except httpx.HTTPError as exc:
        where = (
            "broke off its answer" if reader.began else "is not reachable at " + settings.AITUNNEL_BASE_URL
        )
        raise _Transient(f"The LLM endpoint {where}") from exc
    return reader.finished()


class _Reader:
    """The frames of a streamed answer, read into the answer and the reasoning apart."""

    def __init__(self, call: _Call) -> None:
        self.call = call
        self.content = ""  # the content as sent: <think> blocks still in it
        self.reasoning = ""  # reasoning sent apart from the content
        self.answer = _Answer()
        self.began = self.done = False
        self.heard = ""
        self.thought_at = -THINKING_INTERVAL_SECONDS

    def feed(self, line: str) -> bool:
        """Read one line of the event stream; True when it was a frame of the answer."""
        if not line.startswith("data:"):
            return False  # blank lines, comments (keep-alives), event names
        data = line[5:].strip()
        self.began = True
        if data == "[DONE]":
            self.done = True
            return True
        try:
            frame = json.loads(data)
        except ValueError:
            return True
        if not isinstance(frame, dict):
            return True
        if frame.get("error"):  # an error frame in the middle of the stream (OpenRouter)
            raise _Transient(f"The LLM endpoint broke off its answer: {_error_message(frame)[:300]}")
        self.answer.model = frame.get("model") or self.answer.model
        self.answer.usage = frame.get("usage") or self.answer.usage
        # vLLM ends with a usage chunk whose choices are null rather than [].
        for choice in frame.get("choices") or []:
            if isinstance(choice, dict):
                self._choice(choice.get("delta") or {}, choice.get("finish_reason"))
        return True

    def _choice(self, delta: dict[str, Any], finish: str | None) -> None:
        text, thought = content_parts(delta.get("content"))
        self.content += text
        self.reasoning += thought + reasoning_field(delta)
        self.answer.finish_reason = finish or self.answer.finish_reason

    async def tell(self) -> None:
        answer, thought = split_reasoning(self.content)
        if answer and answer != self.heard and self.call.on_text is not None:
            self.heard = answer
            await self.call.on_text(answer)
        elif not answer and (thought or self.reasoning) and self._may_think():
            self.thought_at = time.monotonic()
            await self.call.on_thinking()  # type: ignore[misc]  # _may_think checked it

    def _may_think(self) -> bool:
        due = time.monotonic() - self.thought_at >= THINKING_INTERVAL_SECONDS
        return self.call.on_thinking is not None and due

    def finished(self) -> _Answer:
        answer, thought = split_reasoning(self.content)
        if self.answer.finish_reason is None:  # the body ended cleanly, but the answer had not
            raise _Transient(
                "The LLM endpoint's answer stopped before it was finished"
                if answer or thought or self.reasoning
                else "The LLM endpoint sent no answer",
                kind=LLMBadAnswer,
            )
        self.answer.text, self.answer.reasoning = answer, self.reasoning + thought
        return self.answer

    def whole(self, response: httpx.Response) -> _Answer:
        """A server that ignored `stream` and answered with one chat.completion body."""
        try:
            body = response.json()
        except ValueError:
            raise _Transient("The LLM endpoint did not answer JSON", kind=LLMBadAnswer) from None
        choices = body.get("choices") if isinstance(body, dict) else None
        if not choices or not isinstance(choices[0], dict):
            raise _Transient("The LLM returned an empty answer", kind=LLMBadAnswer)
        message = choices[0].get("message") or {}
        text, thought = content_parts(message.get("content"))
        answer, tagged = split_reasoning(text)
        return _Answer(
            text=answer,
            reasoning=thought + reasoning_field(message) + tagged,
            finish_reason=choices[0].get("finish_reason") or "stop",
            usage=body.get("usage") if isinstance(body.get("usage"), dict) else None,
            model=body.get("model") or "",
            streamed=False,
        )


# --- reasoning apart from the answer --------------------------------------------------------------

_THINK_OPEN = re.compile(r"<(think|thinking)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking)>", re.IGNORECASE)
REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")


def reasoning_field(message: dict[str, Any]) -> str:
    """The reasoning a message or delta carries beside its content: DeepSeek's and vLLM's
    `reasoning_content`, Ollama's and OpenRouter's `reasoning`, `thinking`."""
    return "".join(value for name in REASONING_FIELDS if isinstance(value := message.get(name), str))


def content_parts(content: Any) -> tuple[str, str]:
    """(text, thinking) of a message's content: a string, or a list of parts (Mistral's
    Magistral: {"type": "thinking", "thinking": [...]} and {"type": "text", "text": ...})."""
    if isinstance(content, str):
        return content, ""
    if not isinstance(content, list):
        return "", ""
    text, thought = [], []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") in ("thinking", "reasoning"):
            thought.append(_part_text(part.get("thinking") or part.get("text") or part.get("reasoning")))
        elif part.get("type", "text") == "text":
            text.append(_part_text(part.get("text")))
    return "".join(text), "".join(thought)


def _part_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_part_text(item.get("text") if isinstance(item, dict) else item) for item in value)
    return ""


def split_reasoning(text: str) -> tuple[str, str]:
    """(answer, reasoning) of a content that may hold <think>…</think> blocks: a closed block is
    taken out, an unclosed one is reasoning to the end, and a closing tag with no opening one
    (a chat template that opened it) ends the reasoning that began the text."""
    if not text or "think" not in text.lower():
        begun = text.lstrip().lower() if text else ""
        if begun.startswith("<") and any(tag.startswith(begun) for tag in ("<think>", "<thinking>")):
            return "", ""  # a stream that has sent only the start of its opening tag so far
        return text or "", ""
    reasoning: list[str] = []
    answer = text
    opened, closed = _THINK_OPEN.search(answer), _THINK_CLOSE.search(answer)
    if closed and (opened is None or closed.start() < opened.start()):
        reasoning.append(answer[: closed.start()])
        answer = answer[closed.end() :]
    while opened := _THINK_OPEN.search(answer):
        end = re.compile(rf"</{opened.group(1)}>", re.IGNORECASE).search(answer, opened.end())
        if end is None:
            reasoning.append(answer[opened.end() :])
            answer = answer[: opened.start()]
            break
        reasoning.append(answer[opened.end() : end.start()])
        answer = answer[: opened.start()] + answer[end.end() :]
    if not reasoning:
        return text, ""
    return answer.strip(), "".join(reasoning).strip()


def strip_reasoning(text: str) -> str:
    """The answer of a content, without its <think> blocks."""
    return split_reasoning(text)[0]


# --- what an error answer says --------------------------------------------------------------------

_UNSUPPORTED = re.compile(r"Unsupported (parameter|value): '([\w.]+)'", re.IGNORECASE)
_INSTEAD = re.compile(r"Use '([\w.]+)' instead", re.IGNORECASE)
_WINDOW = re.compile(
    r"maximum context length is (\d+)|context size \((\d+) tokens\)|context length of (\d+)", re.IGNORECASE
)
_PROMPT = re.compile(
    r"\((\d+) in the messages|messages resulted in (\d+) tokens|request \((\d+) tokens\)", re.IGNORECASE
)
_OVERFLOW = re.compile(
    r"maximum context length|exceeds the available context size|context length exceeded|"
    r"context_length_exceeded|exceed_context_size",
    re.IGNORECASE,
)
_MOST_OUTPUT = re.compile(r"supports at most (\d+) completion tokens", re.IGNORECASE)
_QUOTA = re.compile(
    r"insufficient_quota|exceeded your current quota|billing|out of credits?|credit balance", re.I
)
_NOT_PULLED = re.compile(r"try pulling it first", re.IGNORECASE)
_NO_MODEL = re.compile(r"model[^.]{0,80}(?:not found|does not exist|not exist)|model_not_found", re.I)


def _error_of(body: Any) -> dict[str, Any]:
    """OpenAI's {"error": {...}}, vLLM's older top-level {"object": "error", "message": ...}."""
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict):
            return inner
        if isinstance(inner, str):
            return {**body, "message": inner}
        return body
    return {}


def _error_message(body: Any) -> str:
    error = _error_of(body)
    return str(error.get("message") or error.get("detail") or body)


def _status_failure(response: httpx.Response, body: dict[str, Any], model: str) -> Exception:
    status = response.status_code
    try:
        answer = response.json()
    except ValueError:
        answer = response.text
    error = _error_of(answer)
    message = _error_message(answer)[:500] if error else str(answer)[:300]
    code = " ".join(str(error.get(name) or "") for name in ("code", "type"))
    if status in (401, 403):
        return LLMAuthError(
            f"The LLM endpoint rejected the API key (HTTP {status}): {message[:200]}. Check AITUNNEL_API_KEY"
        )
    if status == 402 or (status == 429 and _QUOTA.search(f"{code} {message}")):
        return LLMQuotaError(
            f"The LLM endpoint says the account is out of quota or credit (HTTP {status}): {message[:200]}."
            " Check your account's billing and plan with the provider, or set another AITUNNEL_API_KEY"
        )
    if status in RETRYABLE_STATUSES or status >= 500:
        retry_after = parse_retry_after(response.headers)
        reason = "is rate-limiting us" if status == 429 else "failed"
        return _Transient(f"The LLM endpoint {reason} (HTTP {status})", retry_after=retry_after)
    if _NOT_PULLED.search(message) or (status in (400, 404) and _NO_MODEL.search(f"{code} {message}")):
        return LLMUnknownModel(
            f"The LLM endpoint does not know model {model} (HTTP {status}): {message[:200]}. Pull it on"
            f" the server (Ollama: ollama pull {model}) or fix AITUNNEL_MODEL"
        )
    if status == 404:
        return LLMError(
            f"The LLM endpoint does not know model {model} or this API (HTTP 404): {message[:200]}."
            " Check AITUNNEL_BASE_URL (it ends in /v1/) and AITUNNEL_MODEL"
        )
    return _client_failure(status, error, message, code, body)


def _client_failure(
    status: int, error: dict[str, Any], message: str, code: str, body: dict[str, Any]
) -> Exception:
    if (most := _number(_MOST_OUTPUT, message)) and status == 400:
        return _Overflow(message, None, None, most_output=most)
    if _OVERFLOW.search(f"{code} {message}"):
        window = _positive(error.get("n_ctx")) or _number(_WINDOW, message)
        prompt = _positive(error.get("n_prompt_tokens")) or _number(_PROMPT, message)
        return _Overflow(message, window, prompt)
    unsupported = _UNSUPPORTED.search(message)
    named = str(error.get("param") or "") or (unsupported.group(2) if unsupported else "")
    refusal = unsupported or "unsupported" in code.lower()
    if status == 400 and refusal and named in body:
        instead = _INSTEAD.search(message)
        if instead:
            replacement = instead.group(1)
        elif named == "max_tokens" and not (unsupported and unsupported.group(1).lower() == "value"):
            replacement = "max_completion_tokens"
        else:
            replacement = ""
        return _Refused(message, named, replacement)
    return LLMError(f"The LLM endpoint refused the request (HTTP {status}): {message[:300]}")


def _number(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.search(text)
    return int(next(group for group in found.groups() if group)) if found else None


def parse_retry_after(headers: Any, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from Retry-After (seconds or an HTTP date) or retry-after-ms, capped."""
    if milliseconds := headers.get("retry-after-ms"):
        seconds = _float(milliseconds)
        seconds = seconds / 1000 if seconds is not None else None
    else:
        seconds = _retry_after_seconds(headers.get("retry-after") or "", now or datetime.now(UTC))
    return None if seconds is None else min(max(seconds, 0.0), RETRY_AFTER_CAP_SECONDS)


def _retry_after_seconds(value: str, now: datetime) -> float | None:
    if not value:
        return None
    seconds = _float(value)
    if seconds is not None:
        return seconds
    try:
        return (parsedate_to_datetime(value) - now).total_seconds()
    except (TypeError, ValueError):
        return None


def _float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def retry_delay(attempt: int, retry_after: float | None) -> float:
    """The server's Retry-After when given, else 0.5, 1, 2 s … with ±25% jitter."""
    if retry_after is not None:
        return retry_after
    base = BACKOFF_SECONDS * 2 ** (attempt - 1)
    return base * random.uniform(0.75, 1.25)  # noqa: S311 (jitter, not a secret)


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


# --- embeddings: the same endpoint, its global limit and its retries ------------------------------


async def embed(texts: list[str], *, model: str, user: int | None = None) -> list[list[float]]:
    """The endpoint's /embeddings of `texts`, in their order (as sent: no prefix, no norm).

    Each attempt waits for the LLM's global limit (one endpoint, one limit), and 429, 5xx,
    timeouts and dropped connections are retried like a completion's (Retry-After honoured);
    a rejected key or a refused request is not. LLMError says what went wrong."""
    url = settings.AITUNNEL_BASE_URL.rstrip("/") + "/embeddings"
    timeout = httpx.Timeout(EMBEDDINGS_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
    async with httpx.AsyncClient(timeout=timeout, headers=_auth_headers(), verify=tls.context()) as client:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            await ratelimit.acquire_llm(user=user)
            try:
                response = await client.post(url, json={"model": model, "input": texts})
            except httpx.HTTPError as exc:
                failure = _Transient(f"the embedding endpoint is not reachable: {exc or type(exc).__name__}")
            else:
                if response.is_success:
                    return _embeddings_of(response, len(texts))
                failure = _embedding_failure(response)
            if attempt == MAX_ATTEMPTS:
                raise failure.kind(f"{failure} (gave up after {attempt} attempts)", attempts=attempt)
            await asyncio.sleep(retry_delay(attempt, failure.retry_after))
    raise LLMError("the embedding endpoint was not asked")  # MAX_ATTEMPTS < 1


def _embedding_failure(response: httpx.Response) -> _Transient:
    status = response.status_code
    message = f"the embedding endpoint answered HTTP {status}: {response.text[:200]}"
    if status in (401, 403):
        raise LLMAuthError(message)
    if status in RETRYABLE_STATUSES or status >= 500:
        return _Transient(message, retry_after=parse_retry_after(response.headers))
    raise LLMError(message)


def _embeddings_of(response: httpx.Response, expected: int) -> list[list[float]]:
    """OpenAI's answer: {"data": [{"index": 0, "embedding": [...]}, ...]}, put back in input order."""
    try:
        items = sorted(response.json()["data"], key=lambda item: item.get("index", 0))
        vectors = [[float(value) for value in item["embedding"]] for item in items]
    except ValueError:
        raise LLMBadAnswer("the embedding endpoint did not answer JSON") from None
    except (KeyError, TypeError, AttributeError):
        raise LLMBadAnswer("the embedding endpoint's answer has no embeddings in it") from None
    if len(vectors) != expected:
        raise LLMBadAnswer(f"the embedding endpoint returned {len(vectors)} vectors for {expected} texts")
    return vectors


# --- the endpoint's model list: what the status page asks --------------------------------------------


@dataclass(frozen=True)
class ModelList:
    """What the endpoint's /models answered: its HTTP status, and the model ids it lists (empty
    unless it answered 200 with OpenAI's list; some compatible servers have no /models)."""

    status: int
    models: frozenset[Any]


async def list_models(timeout: float) -> ModelList:
    """The endpoint's GET /models, asked once (no retries: a status check tells what it finds)
    with the key the completions send. It takes no slot of the LLM's limit: it costs no tokens,
    runs a few times a minute at most (the status page caches its checks a minute per language,
    and the vision check asks again), and must answer while
    research calls hold the next slots. probe.Unreachable when nothing answered within
    `timeout` seconds; any HTTP answer is returned as it is."""
    url = urljoin(settings.AITUNNEL_BASE_URL.rstrip("/") + "/", "models")
    response = await probe.get(url, timeout=timeout, headers=_auth_headers(), verify=tls.context())
    listed = _model_ids(response) if response.status_code == 200 else frozenset()
    return ModelList(response.status_code, listed)


def _model_ids(response: httpx.Response) -> frozenset[Any]:
    """The ids of OpenAI's {"data": [{"id": ...}, ...]}; none when the answer is not that."""
    try:
        return frozenset(item.get("id") for item in response.json().get("data", []))
    except (ValueError, AttributeError, TypeError):
        return frozenset()


# --- Tolerant JSON -----------------------------------------------------------------------------

_FENCE = re.compile(r"```[\w-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_TRAILING_COMMA = re.compile(r'("(?:\\.|[^"\\])*")|,(\s*[\]}])', re.DOTALL)
# Outside strings, a JSON value holds only these (letters of true, false and null included).
_BARE = set(" \t\r\n:,.+-0123456789eEtrufalsn")
_MAX_STARTS = 200
_NOTHING = object()


def parse_json(text: str, *, expect: type | tuple[type, ...] | None = None) -> Any:
    """The JSON value that is the LLM's answer, repaired when the answer was cut off.

    Reasoning (<think> blocks) is taken out first, and a fenced block is preferred to the rest.
    Of the values in a text, `expect` (dict, list, or a tuple of both) keeps those of that
    shape; a value that begins a line is the answer, else the largest one — never a stray
    citation marker such as `[1]` in the prose before it, unless nothing else is there. A
    truncated answer is cut back to the end of its last complete element (a half-written
    string, number or member is dropped) and what is still open is closed.
    """
    answer = strip_reasoning(text or "")
    for source in [*(m.group(1) for m in _FENCE.finditer(answer)), answer]:
        value = _answer_value(source, expect)
        if value is not _NOTHING:
            return value
    raise LLMBadAnswer("The LLM's answer holds no usable JSON")


@dataclass(frozen=True)
class _Found:
    start: int
    end: int
    value: Any


def _answer_value(text: str, expect: type | tuple[type, ...] | None) -> Any:
    found = [item for item in _values(text) if expect is None or isinstance(item.value, expect)]
    plain = [item for item in found if not _citation_like(item.value)] or found
    if not plain:
        return _NOTHING
    at_line = [item for item in plain if _begins_line(text, item.start)]
    if at_line:
        return at_line[0].value
    return max(plain, key=lambda item: item.end - item.start).value


def _begins_line(text: str, start: int) -> bool:
    """Nothing but blanks between the line's start (or the text's) and `start`."""
    before = text[:start].rstrip(" \t")
    return not before or before.endswith("\n")


def _citation_like(value: Any) -> bool:
    """[1], [2, 5]: how prose cites its sources, not an answer."""
    return isinstance(value, list) and 0 < len(value) <= 5 and all(type(item) is int for item in value)


def _values(text: str) -> list[_Found]:
    """Each JSON value of `text` that parses (or can be repaired), not those inside another."""
    found: list[_Found] = []
    reached = 0
    for start in [i for i, ch in enumerate(text) if ch in "[{"][:_MAX_STARTS]:
        if start < reached:
            continue
        state, end, cuts = _scan(text, start)
        if state == "complete":
            value = _loads(text[start:end])
        elif state == "truncated":
            value = _repair(text[start:], [(pos - start, closers) for pos, closers in cuts])
            end = len(text)
        else:
            continue
        if value is not _NOTHING:
            found.append(_Found(start, end, value))
            reached = end
    return found


def _scan(text: str, start: int) -> tuple[str, int, list[tuple[int, str]]]:
    """Walk the value at `start`: ("complete", its end, _) or ("truncated", _, cut points) or
    ("invalid", …). A cut point is where the text may be cut, with the closers it then needs."""
    closers: list[str] = []
    cuts: list[tuple[int, str]] = []
    in_string = escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
            if not in_string:  # a closed string may end the value (or be a key: then loads fails)
                cuts.append((i + 1, "".join(reversed(closers))))
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            closers.append("]" if ch == "[" else "}")
            cuts.append((i + 1, "".join(reversed(closers))))
        elif ch in "]}":
            if closers.pop() != ch:
                return "invalid", i, cuts
            if not closers:
                return "complete", i + 1, cuts
            cuts.append((i + 1, "".join(reversed(closers))))
        elif ch == ",":
            cuts.append((i, "".join(reversed(closers))))
        elif ch not in _BARE:
            return "invalid", i, cuts
    return "truncated", len(text), cuts


def _repair(text: str, cuts: list[tuple[int, str]]) -> Any:
    for position, closers in reversed(cuts):
        value = _loads(text[:position].rstrip().removesuffix(",") + closers)
        if value is not _NOTHING:
            return value
    return _NOTHING


def _loads(candidate: str) -> Any:
    for attempt in (candidate, _TRAILING_COMMA.sub(lambda m: m.group(1) or m.group(2), candidate)):
        try:
            return json.loads(attempt, strict=False)
        except ValueError:
            continue
    return _NOTHING
