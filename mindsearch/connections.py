"""Connections that hold a web process's sockets without finishing a request are closed by the
server itself, not only by a reverse proxy in front of it (issue 26, finding 9).

Under daphne every HTTP connection gets two clocks (`install_connection_limits`, called from
mindsearch/asgi.py):

- idle: WEB_IDLE_TIMEOUT_SECONDS without a byte from the client (between requests of a
  keep-alive connection, or in the middle of one) closes it — twisted's own idle timeout, which
  daphne leaves at a minute;
- reading: once a request's first byte arrives, its headers and body must all be in within
  WEB_REQUEST_READ_SECONDS, however slowly they trickle (a byte every few seconds keeps the idle
  clock from ever running out).

An application that takes too long to answer is daphne's `--http-timeout`, which `manage.py serve`
sets to WEB_HTTP_TIMEOUT_SECONDS; websockets are pinged by daphne (every 20 s, closed after 30 s
without an answer). `GET /mcp` opens no stream at all (mcphub/http.py).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings


def install_connection_limits() -> None:
    try:
        from daphne.http_protocol import HTTPFactory
    except ImportError:  # another ASGI server: its own options, and the reverse proxy's
        return
    if getattr(HTTPFactory, "_mindsearch_limited", False):
        return
    build = HTTPFactory.buildProtocol

    def build_protocol(self: Any, addr: Any) -> Any:
        protocol = build(self, addr)
        if protocol is not None:
            _limit(protocol)
        return protocol

    HTTPFactory.buildProtocol = build_protocol
    HTTPFactory._mindsearch_limited = True


def _limit(built: Any) -> None:
    from twisted.internet import reactor as twisted_reactor

    reactor: Any = twisted_reactor  # its interface's stubs type callLater's arguments wrongly
    # twisted wraps the HTTP/1.1 channel in a protocol that could switch to HTTP/2; the clocks go
    # on the channel itself, whose methods the wrapper calls.
    protocol = getattr(built, "_channel", built)
    protocol.timeOut = settings.WEB_IDLE_TIMEOUT_SECONDS
    received, content_received, lost = (
        protocol.dataReceived,
        protocol.allContentReceived,
        protocol.connectionLost,
    )
    deadline: list[Any] = []

    def cancel() -> None:
        while deadline:
            call = deadline.pop()
            if call.active():
                call.cancel()

    def too_slow() -> None:
        deadline.clear()
        if not protocol._handlingRequest and protocol.transport is not None:
            protocol.transport.abortConnection()

    def data_received(data: bytes) -> None:
        if not deadline and not protocol._handlingRequest:
            deadline.append(reactor.callLater(settings.WEB_REQUEST_READ_SECONDS, too_slow))
        received(data)

    def all_content_received() -> None:
        cancel()
        content_received()

    def connection_lost(reason: Any) -> None:
        cancel()
        lost(reason)

    protocol.dataReceived = data_received
    protocol.allContentReceived = all_content_received
    protocol.connectionLost = connection_lost
