"""Chat completions and embeddings from an OpenAI-compatible endpoint (aitunnel, OpenAI, Ollama, vLLM…).

One retry layer only, ours (the SDK's is off): up to MAX_ATTEMPTS on 429, 5xx, timeouts,
dropped connections and empty answers, each attempt waiting for the global rate limit first.

With `on_text`, the answer is streamed (server-sent `chat.completion.chunk` frames, usage in the
last one): `on_text` gets the text so far after every piece. A stream that breaks off (the
connection drops, an error frame, or it ends without a finish reason) is a failed attempt like
any other: retried from the start, and only a finished answer is ever returned.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urljoin

import httpx
import httpx2
import openai
from django.conf import settings

from mindsearch.clients import probe, ratelimit

DEFAULT_BASE_URL = "https://api.aitunnel.ru/v1/"
# Read at call time, so tests can shorten them.
TIMEOUT_SECONDS = 120.0
EMBEDDINGS_TIMEOUT_SECONDS = 60.0
CONNECT_TIMEOUT_SECONDS = 10.0
MAX_ATTEMPTS = 4
BACKOFF_SECONDS = 0.5
RETRY_AFTER_CAP_SECONDS = 60.0
RETRYABLE_STATUSES = {408, 409, 429}


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


class _Transient(Exception):
    """A failure worth another attempt; becomes `kind` when the attempts run out."""

    def __init__(
        self, message: str, *, retry_after: float | None = None, kind: type[LLMError] = LLMError
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.kind = kind


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: int
    attempts: int


def endpoint_configured() -> bool:
    """An API key, or an endpoint of one's own (Ollama, vLLM and llama.cpp need no key)."""
    return bool(settings.AITUNNEL_API_KEY) or settings.AITUNNEL_BASE_URL != DEFAULT_BASE_URL


def is_configured() -> bool:
    """A model, and an API key or an endpoint of one's own (local servers need no key)."""
    return endpoint_configured() and bool(settings.AITUNNEL_MODEL)


def _auth_headers() -> dict[str, str]:
    """The endpoint's Bearer header, none without a key (local servers need none)."""
    return {"Authorization": f"Bearer {settings.AITUNNEL_API_KEY}"} if settings.AITUNNEL_API_KEY else {}


TextListener = Callable[[str], Awaitable[None]]


async def complete(
    messages: list[dict[str, Any]],
    *,
    max_tokens: int | None = None,
    temperature: float = 0.2,
    user: int | None = None,
    on_text: TextListener | None = None,
    model: str = "",
) -> Completion:
    """One chat completion, retried on transient failures; `user` is whose share of the limit it
    takes. With `on_text` it is streamed, and `on_text` hears the text so far as it grows (from
    the start again when an attempt is retried). `model` picks another model of the same
    endpoint (the vision model); the same global limit holds for it."""
    if not is_configured():
        raise LLMNotConfigured(
            "No LLM is configured: set AITUNNEL_MODEL and AITUNNEL_API_KEY (or AITUNNEL_BASE_URL)"
        )
    request = {"model": model or settings.AITUNNEL_MODEL, "messages": messages, "temperature": temperature}
    if max_tokens is not None:
        request["max_tokens"] = max_tokens
    started = time.monotonic()
    async with _client() as client:
        return await _with_retries(client, request, started, user, on_text)


def _client() -> openai.AsyncOpenAI:
    """A client per call, closed after it; cheap, because the TLS context is shared."""
    return openai.AsyncOpenAI(
        base_url=settings.AITUNNEL_BASE_URL,
        api_key=settings.AITUNNEL_API_KEY or "not-needed",
        max_retries=0,
        timeout=httpx.Timeout(TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS),
        http_client=openai.DefaultAsyncHttpxClient(verify=_tls_context()),
    )


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA store takes ~50 ms of CPU; once per process, not once per call.
    return httpx2.create_ssl_context()


async def _with_retries(
    client: openai.AsyncOpenAI,
    request: dict[str, Any],
    started: float,
    user: int | None,
    on_text: TextListener | None = None,
) -> Completion:
    attempt = 1
    while True:
        try:
            if on_text is not None:
                return await _streamed_attempt(client, request, attempt, started, user, on_text)
            return await _attempt(client, request, attempt, started, user)
        except _Transient as failure:
            if attempt == MAX_ATTEMPTS:
                message = f"{failure} (gave up after {attempt} attempts)"
                raise failure.kind(message, attempts=attempt, latency_ms=_ms_since(started)) from failure
            await asyncio.sleep(retry_delay(attempt, failure.retry_after))
        except LLMError as error:
            error.attempts, error.latency_ms = attempt, _ms_since(started)
            raise
        attempt += 1


async def _attempt(
    client: openai.AsyncOpenAI, request: dict[str, Any], attempt: int, started: float, user: int | None
) -> Completion:
    await ratelimit.acquire_llm(user=user)
    try:
        response = await client.chat.completions.create(**request)
    except openai.APIStatusError as exc:
        raise _status_error(exc) from exc
    except openai.APITimeoutError:
        raise _Transient(f"The LLM endpoint did not answer within {TIMEOUT_SECONDS:g} s") from None
    except openai.APIConnectionError as exc:
        raise _Transient(f"The LLM endpoint is not reachable at {settings.AITUNNEL_BASE_URL}") from exc
    return _completion(response, attempt, started)


async def _streamed_attempt(
    client: openai.AsyncOpenAI,
    request: dict[str, Any],
    attempt: int,
    started: float,
    user: int | None,
    on_text: TextListener,
) -> Completion:
    await ratelimit.acquire_llm(user=user)
    parts: list[str] = []
    usage: Any = None
    model = finish = None
    try:
        stream = await client.chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
        async with stream:
            async for chunk in stream:
                model = getattr(chunk, "model", None) or model
                usage = getattr(chunk, "usage", None) or usage
                # vLLM ends with a usage chunk whose choices are null rather than [].
                for choice in getattr(chunk, "choices", None) or []:
                    piece = getattr(getattr(choice, "delta", None), "content", None)
                    if piece:
                        parts.append(piece)
                        await on_text("".join(parts))
                    finish = getattr(choice, "finish_reason", None) or finish
    except openai.APIStatusError as exc:
        raise _status_error(exc) from exc
    except openai.APITimeoutError:
        raise _Transient(f"The LLM endpoint stopped sending for {TIMEOUT_SECONDS:g} s") from None
    except openai.APIConnectionError as exc:
        where = "broke off its answer" if parts else "is not reachable at " + settings.AITUNNEL_BASE_URL
        raise _Transient(f"The LLM endpoint {where}") from exc
    except openai.APIError as exc:  # an error frame in the middle of the stream
        raise _Transient(f"The LLM endpoint broke off its answer: {exc.message[:300]}") from exc
    text = "".join(parts)
    if finish is None:  # the body ended cleanly, but the answer had not
        raise _Transient(
            "The LLM endpoint's answer stopped before it was finished"
            if text
            else "The LLM endpoint sent no answer",
            kind=LLMBadAnswer,
        )
    if not text.strip():
        raise _Transient("The LLM returned an empty answer", kind=LLMBadAnswer)
    return Completion(
        text=text,
        model=model or settings.AITUNNEL_MODEL,
        prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
        completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
        latency_ms=_ms_since(started),
        attempts=attempt,
    )


def _completion(response: Any, attempt: int, started: float) -> Completion:
    choices = getattr(response, "choices", None)  # a proxy's HTML page parses to a plain str
    text = choices[0].message.content if choices else None
    if not text or not text.strip():
        raise _Transient("The LLM returned an empty answer", kind=LLMBadAnswer)
    usage = response.usage
    return Completion(
        text=text,
        model=response.model or settings.AITUNNEL_MODEL,
        prompt_tokens=usage.prompt_tokens if usage else 0,
        completion_tokens=usage.completion_tokens if usage else 0,
        latency_ms=_ms_since(started),
        attempts=attempt,
    )


def _status_error(exc: openai.APIStatusError) -> Exception:
    status = exc.status_code
    if status in (401, 403):
        return LLMAuthError(f"The LLM endpoint rejected the API key (HTTP {status})")
    if status in RETRYABLE_STATUSES or status >= 500:
        retry_after = parse_retry_after(exc.response.headers)
        reason = "is rate-limiting us" if status == 429 else "failed"
        return _Transient(f"The LLM endpoint {reason} (HTTP {status})", retry_after=retry_after)
    if status == 404:
        model = settings.AITUNNEL_MODEL
        return LLMError(
            f"The LLM endpoint does not know model {model} or this API (HTTP 404): {_detail(exc)}"
        )
    return LLMError(f"The LLM endpoint refused the request (HTTP {status}): {_detail(exc)}")


def _detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        body = body.get("message") or body.get("error") or body
    return str(body or exc.message)[:300]


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
    async with httpx.AsyncClient(timeout=timeout, headers=_auth_headers(), verify=_tls_context()) as client:
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
    response = await probe.get(url, timeout=timeout, headers=_auth_headers(), verify=_tls_context())
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


def parse_json(text: str) -> Any:
    """The first JSON array or object in an LLM answer, repaired when the answer was cut off.

    Code fences and prose around the JSON are ignored. A truncated answer is cut back to the
    end of its last complete element (a half-written string, number or member is dropped)
    and what is still open is closed.
    """
    for source in [*(m.group(1) for m in _FENCE.finditer(text or "")), text or ""]:
        value = _first_value(source)
        if value is not _NOTHING:
            return value
    raise LLMBadAnswer("The LLM's answer holds no usable JSON")


def _first_value(text: str) -> Any:
    starts = [i for i, ch in enumerate(text) if ch in "[{"][:_MAX_STARTS]
    for start in starts:
        state, end, cuts = _scan(text, start)
        if state == "complete":
            value = _loads(text[start:end])
        elif state == "truncated":
            value = _repair(text[start:], [(pos - start, closers) for pos, closers in cuts])
        else:
            continue
        if value is not _NOTHING:
            return value
    return _NOTHING


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
