"""Pages as Markdown through an r.jina.ai-style reader (JINA_READER_URL + target URL).

No retries here: when the reader fails, the pipeline falls back to a direct fetch.
"""

from __future__ import annotations

import asyncio
import re

import httpx
from django.conf import settings

from mindsearch.clients import fetch, ratelimit, tls
from mindsearch.clients.fetch import Page

TIMEOUT_SECONDS = 30.0
_PREAMBLE = re.compile(
    r"\A\s*Title:[ \t]*(?P<title>[^\n]*)\n(?P<meta>.*?)^Markdown Content:[ \t]*\n?(?P<body>.*)\Z",
    re.DOTALL | re.MULTILINE,
)


class ReadError(Exception):
    """The reader could not give us the page; `status` is its HTTP status, if it answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def parse_reader_text(text: str) -> tuple[str, str]:
    """(title, markdown) of the reader's plain answer; without its preamble, all is Markdown."""
    found = _PREAMBLE.match(text)
    if found is None:
        return "", text.strip()
    return found.group("title").strip(), found.group("body").strip()


async def read(url: str, *, user: int | None = None) -> Page:
    """Read `url` through the reader, in `user`'s share of the limit.

    The target is checked first (fetch.UnsafeURL when refused): a self-hosted reader would
    otherwise fetch private and metadata addresses for us.
    """
    await asyncio.to_thread(fetch.check_url, url)
    await ratelimit.acquire_reader(user=user)
    response = await _get(settings.JINA_READER_URL + url)
    _raise_for_status(response.status_code)
    title, markdown = parse_reader_text(response.text)
    if not markdown:
        raise ReadError("the reader returned no text", status=response.status_code)
    return Page(url=url, title=title, markdown=markdown, via="reader")


def _headers() -> dict[str, str]:
    headers = {"Accept": "text/plain", "X-Return-Format": "markdown"}
    if settings.JINA_API_KEY:
        headers["Authorization"] = f"Bearer {settings.JINA_API_KEY}"
    return headers


async def probe(timeout: float) -> int:
    """The HTTP status of the reader's own address, for the status page (no page is read and no
    share of the limit spent); ReadError when it does not answer."""
    return (await _get(settings.JINA_READER_URL, timeout=timeout)).status_code


def problem(status: int) -> str:
    """What a status of the reader means for reading pages, as `read` would say it; "" when none
    (a reader's own address may well answer 404)."""
    if status in (401, 402, 403, 429) or status >= 500:
        try:
            _raise_for_status(status)
        except ReadError as exc:
            return str(exc)
    return ""


async def _get(reader_url: str, timeout: float | None = None) -> httpx.Response:
    timeout = TIMEOUT_SECONDS if timeout is None else timeout  # read when called: settings may change it
    try:
        async with httpx.AsyncClient(timeout=timeout, verify=tls.context()) as client:
            return await client.get(reader_url, headers=_headers())
    except httpx.TimeoutException:
        raise ReadError(f"the reader did not answer within {timeout:g} s") from None
    except httpx.HTTPError as exc:
        base = settings.JINA_READER_URL
        raise ReadError(f"the reader is not reachable at {base}: {exc or type(exc).__name__}") from exc


def _raise_for_status(status: int) -> None:
    if status < 400:
        return
    if status == 402:
        raise ReadError("the reader's quota is used up (HTTP 402)", status)
    if status in (401, 403):
        raise ReadError(f"the reader rejected the API key (HTTP {status}): check JINA_API_KEY", status)
    if status == 429:
        raise ReadError("the reader is rate-limiting us (HTTP 429)", status)
    if status >= 500:
        raise ReadError(f"the reader failed (HTTP {status})", status)
    raise ReadError(f"the reader could not read the page (HTTP {status})", status)
