"""One GET as the status page's probes send it (`llm.list_models`, `websearch.read_config`):
asked once, no retries, redirects followed; any HTTP answer is returned as it is, for the
caller to read its service's way, and no answer at all is `Unreachable`."""

from __future__ import annotations

from typing import Any

import httpx


class Unreachable(Exception):
    """Nothing answered; `timed_out` when the service was too slow rather than absent, and
    `connected` when it accepted the connection and the request but sent no answer in time (a
    busy server: a local LLM server working on another request)."""

    def __init__(self, message: str, *, timed_out: bool = False, connected: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        self.connected = connected


async def get(url: str, *, timeout: float, **client: Any) -> httpx.Response:
    """GET `url` within `timeout` seconds; `client` holds the service's own options (its
    headers, auth, TLS context)."""
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout), follow_redirects=True, **client) as http:
            return await http.get(url)
    except httpx.TimeoutException as exc:
        connected = isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout)
        raise Unreachable(str(exc) or type(exc).__name__, timed_out=True, connected=connected) from None
    except httpx.HTTPError as exc:
        raise Unreachable(str(exc) or type(exc).__name__) from exc
