"""What reaches Django over HTTP is bounded before it is read, and the client address is the
real one.

`GuardedApp`, the ASGI layer in front of Django (mindsearch/asgi.py), works under any ASGI
server:

- a request body larger than its route allows — uploads `UPLOAD_MAX_REQUEST_BYTES`, topic
  archives their own limit, everything else `REQUEST_MAX_BYTES` — is answered 413 as soon as its
  `Content-Length` says so, or as soon as a streamed (chunked) body passes the limit; nothing of
  it reaches Django;
- `X-Forwarded-For`, `-Proto`, `-Host` and `-Port` are believed only from a peer listed in
  `TRUSTED_PROXIES`; from a trusted proxy the client address (`REMOTE_ADDR`, which the login
  guard and the sign-up rate count) becomes the first untrusted address of `X-Forwarded-For`,
  read from the right; from anyone else the headers are dropped.

Under daphne a body is read to its end before the ASGI application sees the request, and then
handed to it in one go, so a layer inside the application comes too late for memory.
`install_daphne_guard` therefore applies the same limits in daphne's own request object: a
declared or streamed body over the limit is answered 413 while its headers are read (or as the
stream passes the limit), daphne stops reading that socket — the client's unsent bytes wait in
its own kernel, costing this process nothing — and closes it a few seconds later.

A body within its limit is spooled to a temporary file by twisted as it arrives; daphne would
then copy all of it into the application's input queue at once, and twisted would first parse a
multipart body into memory (a 100 MB upload, even an anonymous one answered 401, cost daphne
~200 MB). A body over `SPOOLED_BODY_MIN_BYTES` is therefore kept in its file: daphne hands the
application an empty piece, and `GuardedApp` reads the file to the application a piece at a
time, so an accepted body costs the process one piece, whatever its size.
"""

from __future__ import annotations

import io
import ipaddress
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from functools import cache
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

FORWARDED_HEADERS = {
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"x-forwarded-host",
    b"x-forwarded-port",
    b"forwarded",
}
# After a refusal the socket is no longer read (the client's kernel holds back the rest of its
# body) and is closed this long later, time for any client to read the answer.
LINGER_SECONDS = 5.0
UNSAFE = {"POST", "PUT", "PATCH"}
# Bodies larger than this are read to the application from daphne's spool file (below).
SPOOLED_BODY_MIN_BYTES = 256 * 1024
SPOOLED_PIECE_BYTES = 64 * 1024
# The header by which daphne's request names its spooled body to GuardedApp. Whatever a client
# sends under this name is removed first; the value is an unguessable key of `_spooled`.
SPOOLED_HEADER = b"x-mindsearch-spooled-body"
# A spooled body no application took (the client left before it started) is closed this late.
SPOOLED_ORPHAN_SECONDS = 600.0
_spooled: dict[str, Any] = {}


# --- Limits by route -----------------------------------------------------------------------------


def limit_for(method: str, path: str) -> int:
    """The largest body this route accepts, in bytes."""
    if method.upper() in UNSAFE:
        if path in ("/documents/upload/", "/api/documents"):
            return settings.UPLOAD_MAX_REQUEST_BYTES
        if path == "/topics/import/":
            return settings.IMPORT_MAX_REQUEST_BYTES
        if path in ("/topics/new/", "/api/topics"):  # a question may come with a picture
            return settings.TOPIC_REQUEST_MAX_BYTES
    return settings.REQUEST_MAX_BYTES


def too_large_body(limit: int) -> bytes:
    detail = f"The request body is too large: this address accepts at most {limit} bytes."
    return json.dumps({"detail": detail}).encode()


# --- Trusted proxies -----------------------------------------------------------------------------


@cache
def _networks(spec: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in spec)


def is_trusted_proxy(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return False
    return any(ip in network for network in _networks(tuple(settings.TRUSTED_PROXIES)))


def forwarded_client(peer: str, forwarded_for: str) -> str:
    """The client's address behind a chain of proxies: the right-most address of
    X-Forwarded-For that is not itself a trusted proxy (anything left of it could be forged)."""
    address = peer
    for hop in reversed([part.strip() for part in forwarded_for.split(",") if part.strip()]):
        address = hop
        if not is_trusted_proxy(hop):
            break
    try:
        return str(ipaddress.ip_address(address.strip("[]")))
    except ValueError:
        return peer


def trusted_scope(scope: Scope) -> Scope:
    """The scope with forwarded headers applied (trusted peer) or removed (anyone else)."""
    client = scope.get("client") or None
    peer = client[0] if client else ""
    headers = [(name.lower(), value) for name, value in scope.get("headers", [])]
    forwarded = {name: value for name, value in headers if name in FORWARDED_HEADERS}
    if not forwarded:
        return scope
    if not is_trusted_proxy(peer):
        return {**scope, "headers": [(n, v) for n, v in headers if n not in FORWARDED_HEADERS]}
    updated = dict(scope)
    chain = b",".join(value for name, value in headers if name == b"x-forwarded-for").decode("latin-1")
    if chain:
        updated["client"] = [forwarded_client(peer, chain), client[1] if client else 0]
    proto = forwarded.get(b"x-forwarded-proto", b"").decode("latin-1").split(",")[-1].strip().lower()
    if proto in ("http", "https"):
        updated["scheme"] = proto
    return updated


# --- The ASGI layer ------------------------------------------------------------------------------


class BodyTooLarge(Exception):
    pass


class GuardedApp:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        scope = trusted_scope(scope)
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        scope, spooled = take_spooled_body(scope)
        try:
            await self._http(
                scope, _spooled_receive(spooled, receive) if spooled is not None else receive, send
            )
        finally:
            if spooled is not None:
                spooled.close()

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = limit_for(scope.get("method", "GET"), scope.get("path", ""))
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, limit)
            return
        started = False
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await _refuse(send, limit)


def take_spooled_body(scope: Scope) -> tuple[Scope, Any]:
    """The scope without the spooled-body header, and the body file it names (None: the body
    comes through `receive` as usual — under any server but daphne, or a small body)."""
    headers = scope.get("headers", [])
    if not any(name.lower() == SPOOLED_HEADER for name, _ in headers):
        return scope, None
    key = next(value for name, value in headers if name.lower() == SPOOLED_HEADER)
    kept = [(name, value) for name, value in headers if name.lower() != SPOOLED_HEADER]
    return {**scope, "headers": kept}, _spooled.pop(key.decode("latin-1"), None)


def _spooled_receive(body: Any, receive: Receive) -> Receive:
    """`receive` that reads the request's body from its file, a piece at a time, then goes on
    with daphne's own messages (a disconnect)."""
    size = body.seek(0, io.SEEK_END)
    body.seek(0)
    state = {"first": True, "done": False}

    async def spooled() -> Message:
        if state["done"]:
            return await receive()
        if state["first"]:
            state["first"] = False
            await receive()  # daphne's own piece: empty, its body being here
        piece = body.read(SPOOLED_PIECE_BYTES)
        more = body.tell() < size
        state["done"] = not more
        return {"type": "http.request", "body": piece, "more_body": more}

    return spooled


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, limit: int) -> None:
    body = too_large_body(limit)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# --- daphne --------------------------------------------------------------------------------------


def install_daphne_guard() -> None:
    """Refuse over-limit bodies inside daphne's request object, before they are buffered.

    Only methods daphne's WebRequest inherits from twisted's Request are wrapped: `gotLength`
    (headers read, length known or chunked), `handleContentChunk` (each piece of body) and
    `requestReceived` (body complete: daphne starts the application here).
    """
    try:
        from daphne.http_protocol import WebRequest
    except ImportError:  # another ASGI server: GuardedApp alone applies the limits
        return
    if getattr(WebRequest, "_mindsearch_guarded", False):
        return
    original_got_length = WebRequest.gotLength
    original_chunk = WebRequest.handleContentChunk
    original_received = WebRequest.requestReceived

    def got_length(self: Any, length: int | None) -> None:
        self._ms_limit = _daphne_limit(self)
        self._ms_received = 0
        self._ms_refused = False
        if length is not None and length > self._ms_limit:
            # No "100 Continue" after the refusal: the client must not send the body.
            self.requestHeaders.removeHeader(b"expect")
            _daphne_refuse(self)
            return
        original_got_length(self, length)

    def handle_content_chunk(self: Any, data: bytes) -> None:
        if getattr(self, "_ms_refused", False):
            return  # read and dropped
        self._ms_received = getattr(self, "_ms_received", 0) + len(data)
        if self._ms_received > getattr(self, "_ms_limit", settings.REQUEST_MAX_BYTES):
            _daphne_refuse(self)
            return
        original_chunk(self, data)

    def request_received(self: Any, command: bytes, path: bytes, version: bytes) -> None:
        if getattr(self, "_ms_refused", False):
            # The refusal was sent; this request is over. Close once the client has read it.
            transport = getattr(self.channel, "transport", None)
            if transport is not None:
                transport.loseConnection()
            return
        self.requestHeaders.removeHeader(SPOOLED_HEADER)  # no client may name a spooled body
        if self.content.tell() > SPOOLED_BODY_MIN_BYTES:
            _spool(self)
        original_received(self, command, path, version)

    WebRequest.gotLength = got_length
    WebRequest.handleContentChunk = handle_content_chunk
    WebRequest.requestReceived = request_received
    WebRequest._mindsearch_guarded = True


def _spool(request: Any) -> None:
    """Keep the request's body in its file for GuardedApp; daphne and twisted see an empty one
    (twisted parses no multipart into memory, daphne queues one empty piece)."""
    key = secrets.token_urlsafe(24)
    _spooled[key] = request.content
    request.content = io.BytesIO()
    request.requestHeaders.setRawHeaders(SPOOLED_HEADER, [key.encode()])
    _call_later(SPOOLED_ORPHAN_SECONDS, _discard_spooled, key)


def _call_later(seconds: float, function: Callable[..., object], *args: object) -> None:
    """The reactor's callLater. Its interface (zope) declares methods without `self`, so mypy,
    reading it as a class, takes `seconds` for the callable: the reactor is untyped here."""
    from twisted.internet import reactor as twisted_reactor

    reactor: Any = twisted_reactor
    reactor.callLater(seconds, function, *args)


def _discard_spooled(key: str) -> None:
    body = _spooled.pop(key, None)
    if body is not None:
        body.close()


def _daphne_limit(request: Any) -> int:
    channel = request.channel
    method = (getattr(channel, "_command", b"") or b"GET").decode("latin-1")
    raw = (getattr(channel, "_path", b"") or b"/").split(b"?", 1)[0]
    try:
        from urllib.parse import unquote

        path = unquote(raw.decode("ascii"))
    except UnicodeDecodeError:
        path = "/"
    return limit_for(method, path)


def _daphne_refuse(request: Any) -> None:
    request._ms_refused = True
    transport = getattr(request.channel, "transport", None)
    if transport is None:
        return
    body = too_large_body(request._ms_limit)
    head = (
        b"HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
    )
    transport.write(head + body)
    # Read no more of it: what already arrived is dropped (handle_content_chunk), the rest stays
    # with the client, and the socket is closed once it had time to read the answer.
    transport.pauseProducing()
    _call_later(LINGER_SECONDS, transport.abortConnection)
    log.info("refused a request body over %d bytes", request._ms_limit)
