"""Streamable HTTP for the MCP server at `/mcp`, authenticated with personal API tokens.

`McpHttpApp` answers a request without a usable `Authorization: Bearer <token>` with 401 before
the SDK sees it; otherwise it puts the token owner's id in the ASGI scope (where the tools find
it, mcphub/server.py) with the token's scopes and hands the request to the SDK's session manager.

The manager runs stateless with JSON answers: every POST is a complete exchange, so any web
process (or several behind a proxy) can answer any request and nothing is kept between them.
Its task group lives in a background task of the serving event loop, started by the first
request (daphne does not run ASGI lifespan events).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from mcphub.server import SCOPE_TOKEN_SCOPES_KEY, SCOPE_USER_KEY, server
from mindsearch.bodylimit import Message, Receive, Scope, Send
from mindsearch.csp import POLICY
from mindsearch.models import ApiToken

UNAUTHENTICATED = (
    "Authentication required: send 'Authorization: Bearer <token>' with a personal API token "
    "(create one at /settings/tokens/)."
)
UNUSABLE_CREDENTIAL = "The API token is unknown, expired or revoked."
NO_STREAM = "This MCP server is stateless: send each request as a POST; it opens no stream."


def security_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The headers every page of the site carries (Django's SecurityMiddleware and
    XFrameOptionsMiddleware, mindsearch/csp.py), for answers that do not pass through Django."""
    headers = [
        (b"content-security-policy", "; ".join(f"{k} {v}" for k, v in POLICY.items()).encode()),
        (b"x-frame-options", settings.X_FRAME_OPTIONS.encode()),
    ]
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append((b"x-content-type-options", b"nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        headers.append((b"referrer-policy", settings.SECURE_REFERRER_POLICY.encode()))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.append((b"cross-origin-opener-policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY.encode()))
    if settings.SECURE_HSTS_SECONDS and scope.get("scheme") == "https":
        hsts = f"max-age={settings.SECURE_HSTS_SECONDS}"
        hsts += "; includeSubDomains" if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS else ""
        hsts += "; preload" if settings.SECURE_HSTS_PRELOAD else ""
        headers.append((b"strict-transport-security", hsts.encode()))
    return headers


def with_security_headers(scope: Scope, send: Send) -> Send:
    """`send` with the site's security headers on the response's start (unless already there)."""

    async def sending(message: Message) -> None:
        if message.get("type") == "http.response.start":
            present = {name.lower() for name, _value in message.get("headers", [])}
            extra = [(name, value) for name, value in security_headers(scope) if name not in present]
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return sending


def bearer_token(scope: Scope) -> str | None:
    """The token of the request's `Authorization: Bearer` header; None without one."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


def token_owner(token: str) -> tuple[int, list[str]] | None:
    """The id of the active user a usable token belongs to, and the token's scopes (and the
    token's last use noted)."""
    row = ApiToken.objects.find(token)
    if row is None or not row.owner.is_active:
        return None
    row.touch()
    return row.owner.pk, list(row.scopes or ())


def host_allowed(scope: Scope) -> bool:
    """The request's Host is one of ALLOWED_HOSTS, as Django checks it for every other path."""
    host = next((value.decode("latin-1") for name, value in scope.get("headers", []) if name == b"host"), "")
    domain, _port = split_domain_port(host)
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]  # as Django does in development
    return bool(domain) and validate_host(domain, allowed)


async def _answer(
    send: Send, status: int, payload: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _refuse(send: Send, detail: str) -> None:
    challenge = (b"www-authenticate", b'Bearer realm="MindSearch", error="invalid_token"')
    await _answer(send, 401, {"detail": detail}, (challenge,))


class _Running:
    """The session manager of one event loop, and the task that keeps its task group open."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.manager = StreamableHTTPSessionManager(
            server._lowlevel_server, json_response=True, stateless=True
        )
        self.ready = asyncio.Event()
        self.task = loop.create_task(self._keep())

    async def _keep(self) -> None:
        async with self.manager.run():
            self.ready.set()
            await asyncio.Event().wait()  # until the loop ends


class McpHttpApp:
    """The ASGI application mounted at /mcp (mindsearch/asgi.py)."""

    def __init__(self) -> None:
        self._running: _Running | None = None

    async def _manager(self) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        if self._running is None or self._running.loop is not loop or self._running.task.done():
            self._running = _Running(loop)
        await self._running.ready.wait()
        return self._running.manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        send = with_security_headers(scope, send)
        if not host_allowed(scope):
            await _answer(send, 400, {"detail": "The Host header is not one this server answers to."})
            return
        token = bearer_token(scope)
        if token is None:
            await _refuse(send, UNAUTHENTICATED)
            return
        owner = await database_sync_to_async(token_owner)(token)
        if owner is None:
            await _refuse(send, UNUSABLE_CREDENTIAL)
            return
        if scope.get("method") != "POST":
            # Stateless: nothing to stream outside a request, and a stream left open (GET) or a
            # session to end (DELETE) would only hold a socket. The spec's answer is 405.
            await _answer(send, 405, {"detail": NO_STREAM}, ((b"allow", b"POST"),))
            return
        manager = await self._manager()
        user_id, scopes = owner
        authenticated: dict[str, Any] = {**scope, SCOPE_USER_KEY: user_id, SCOPE_TOKEN_SCOPES_KEY: scopes}
        await manager.handle_request(authenticated, receive, send)


def is_mcp_path(path: str) -> bool:
    return path == "/mcp" or path.startswith("/mcp/")


app = McpHttpApp()


def mcp_or(other: Any) -> Any:
    """An ASGI application that sends /mcp to the MCP server and everything else to `other`."""

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "http" and is_mcp_path(scope.get("path", "")):
            await app(scope, receive, send)
        else:
            await other(scope, receive, send)

    return route
