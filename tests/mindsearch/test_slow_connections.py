"""Idle and slow connections are closed by the web server itself (issue 26, finding 9): a client
that connects and says nothing, or sends its headers a byte at a time, no longer holds a socket
(and a file descriptor) of daphne's for as long as it likes."""

from __future__ import annotations

import socket
import time

import pytest

from tests.support import processes

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def closed_after(sock: socket.socket, trickle: bytes, limit: float) -> float | None:
    """Seconds until the server closed `sock` while one byte of `trickle` is sent each 0.5 s
    (nothing, if empty); None if it was still open after `limit`."""
    started = time.monotonic()
    sock.settimeout(0.5)
    sent = 0
    while time.monotonic() - started < limit:
        try:
            if sent < len(trickle):
                sock.sendall(trickle[sent : sent + 1])
                sent += 1
            if sock.recv(4096) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except OSError:  # reset: closed too
            return time.monotonic() - started
    return None


def test_idle_and_trickling_clients_are_cut_off() -> None:
    env = processes.process_env(
        LOG_LEVEL="WARNING", WEB_IDLE_TIMEOUT_SECONDS="2", WEB_REQUEST_READ_SECONDS="4"
    )
    with processes.daphne(env) as address:
        host, port = address.split(":")
        with socket.create_connection((host, int(port))) as idle:
            waited = closed_after(idle, b"", limit=15)
        assert waited is not None and waited < 6, waited
        slow_headers = b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 200
        with socket.create_connection((host, int(port))) as slow:
            waited = closed_after(slow, slow_headers, limit=15)
        assert waited is not None and waited < 8, waited
        # A client that asks at an ordinary pace is answered as before.
        with socket.create_connection((host, int(port))) as normal:
            normal.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert normal.recv(64).startswith(b"HTTP/1.1 200")
