"""The TLS context every outside service's client verifies with, built once per process.

Building one loads the CA store: 30-50 ms of CPU. A client made per request (a search, a
reader call, each scholarly or JSON service's GET) built its own each time; in a test file of
whole deep topics against loopback fakes that was a fifth of the CPU samples, and a worker
searching for a topic pays it on every query. A context is safe to share: httpx only reads it,
and sets the same ALPN list on it for every HTTP/1.1 connection."""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def context(*, trust_env: bool = True) -> ssl.SSLContext:
    """The CA store's context; `trust_env` as httpx's (SSL_CERT_FILE and SSL_CERT_DIR, read once)."""
    return httpx.create_ssl_context(trust_env=trust_env)
