"""Direct page fetches that cannot be turned against our own network (SSRF-safe).

Two checks: `check_url` before each request (and each redirect hop), and a custom httpcore
network backend that resolves the host itself at connect time, checks every address and
connects to the checked one. The second closes the DNS-rebinding window between the check
and the connection; TLS still verifies the certificate against the host name.
"""

from __future__ import annotations

import asyncio
import html
import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import charset_normalizer
import httpcore
import httpx
from django.conf import settings

from mindsearch.clients import tls

MAX_REDIRECTS = 5
USER_AGENT = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
)
HEADERS = {
    "User-Agent": USER_AGENT,
    "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,text/markdown;q=0.9,*/*;q=0.5",
    "Accept-Language": "en,ru;q=0.9,*;q=0.5",
}
PAGE_TYPES = {"text/html", "application/xhtml+xml", "text/plain", "text/markdown"}
TEXT_TYPES = {"text/plain", "text/markdown"}
REDIRECT_STATUSES = {301, 302, 303, 307, 308}
# Cloud metadata services: refused even when private addresses are allowed (in tests).
METADATA_ADDRESSES = {
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
}
METADATA_HOSTS = {"metadata.google.internal", "metadata.goog", "metadata"}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_HEADER_CHARSET = re.compile(r"""charset=["']?([\w.:-]+)""", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset=["']?([\w.:-]+)""", re.IGNORECASE)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class FetchError(Exception):
    """A page could not be fetched; the message is shown to the user."""


class UnsafeURL(FetchError):
    """The URL points at an address we must not reach (private, loopback, metadata…)."""


@dataclass(frozen=True)
class FetchedPage:
    url: str
    status: int
    content_type: str
    text: str


@dataclass(frozen=True)
class Page:
    url: str
    title: str
    markdown: str
    via: str


# --- Address policy ----------------------------------------------------------------------------


def _embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, compatible, 6to4, NAT64), if any."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if embedded := ip.ipv4_mapped or ip.sixtofour:
        return embedded
    if ip in _NAT64 or (int(ip) >> 32 == 0 and int(ip) > 1):  # ::a.b.c.d, "IPv4-compatible"
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_allowed(ip: IPAddress) -> bool:
    """Whether a connection to `ip` is allowed.

    Only globally routable addresses, unless MINDSEARCH_ALLOW_PRIVATE_URLS (tests scraping
    loopback fakes); link-local, metadata, multicast, reserved and unspecified never.
    """
    ip = _embedded_ipv4(ip) or ip
    never = ip.is_link_local or ip.is_multicast or ip.is_reserved or ip.is_unspecified
    if never or ip in METADATA_ADDRESSES:
        return False
    # Python calls deprecated IPv6 site-local addresses (fec0::/10) global; networks that still
    # use them route them internally, like private ones.
    site_local = getattr(ip, "is_site_local", False)
    return (ip.is_global and not site_local) or settings.MINDSEARCH_ALLOW_PRIVATE_URLS


def resolve(host: str, port: int, *, numeric_only: bool = False) -> list[IPAddress]:
    """Every address `host` stands for; numeric forms (2130706433, 0x7f.1) need no DNS."""
    numeric = numeric_address(host)
    if numeric is not None or numeric_only:
        return [numeric] if numeric is not None else []
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise FetchError(f"cannot resolve host {host}: {exc}") from exc
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))


def numeric_address(host: str) -> IPAddress | None:
    """The address a numeric host means, in any form the C library accepts (as getaddrinfo)."""
    try:
        # Without its zone (fe80::1%eth0): a scoped address would not equal the metadata ones.
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, UnicodeError):
        return None


def check_addresses(host: str, addresses: Iterable[IPAddress]) -> None:
    refused = [str(ip) for ip in addresses if not address_allowed(ip)]
    if refused:
        raise UnsafeURL(
            f"refused to fetch {host}: it resolves to a non-public address ({', '.join(refused)})"
        )


def check_url(url: str) -> None:
    """Refuse URLs that are not plain http(s) to a public host.

    With MINDSEARCH_ALLOW_PRIVATE_URLS host names are not resolved here (tests use made-up
    names); literal addresses are still checked, and the connect-time check always runs.
    """
    try:
        parts = urlsplit(url)
        port = _port_of(parts.port, parts.scheme)
    except ValueError as exc:
        raise FetchError(f"not a valid URL: {url} ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise UnsafeURL(f"only http and https URLs can be fetched, not {parts.scheme or 'this'}: {url}")
    if parts.username is not None or parts.password is not None:
        raise UnsafeURL("URLs with credentials in them are not fetched")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UnsafeURL(f"the URL has no host: {url}")
    _check_host(host, port)


def _port_of(port: int | None, scheme: str) -> int:
    return port or (443 if scheme == "https" else 80)


def _check_host(host: str, port: int) -> None:
    allow_private = settings.MINDSEARCH_ALLOW_PRIVATE_URLS
    if host.lower() in METADATA_HOSTS:
        raise UnsafeURL(f"refused to fetch {host}: it is a cloud metadata service")
    if not allow_private and (host.lower() == "localhost" or host.lower().endswith(".localhost")):
        raise UnsafeURL(f"refused to fetch {host}: it is this machine")
    check_addresses(host, resolve(host, port, numeric_only=allow_private))


# --- Connect-time check ------------------------------------------------------------------------


class CheckedBackend(httpcore.AsyncNetworkBackend):
    """Resolves and checks the host inside connect_tcp, then connects to a checked address."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await asyncio.to_thread(resolve, host, port)
        check_addresses(host, addresses)
        return await self._connect_first(addresses, port, timeout, local_address, socket_options)

    async def _connect_first(
        self,
        addresses: list[IPAddress],
        port: int,
        timeout: float | None,
        local_address: str | None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None,
    ) -> httpcore.AsyncNetworkStream:
        for ip in addresses[:-1]:
            try:
                return await self._inner.connect_tcp(str(ip), port, timeout, local_address, socket_options)
            except httpcore.ConnectError:
                continue
        return await self._inner.connect_tcp(str(addresses[-1]), port, timeout, local_address, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not fetched")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class CheckedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport with its connection pool on the checking backend."""

    def __init__(self) -> None:
        super().__init__(verify=tls.context(trust_env=False), trust_env=False)
        # httpx has no network_backend option; the pool it built is swapped for an equal one.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls.context(trust_env=False), network_backend=CheckedBackend()
        )


def checked_client(timeout: float) -> httpx.AsyncClient:
    """An httpx client whose every connection goes to a checked public address."""
    return httpx.AsyncClient(
        transport=CheckedTransport(),
        timeout=timeout,
        headers=HEADERS,
        follow_redirects=False,
        trust_env=False,
    )


# --- Fetching ----------------------------------------------------------------------------------


async def fetch(url: str, *, max_bytes: int = 5_000_000, timeout: float = 20.0) -> FetchedPage:
    """GET a web page, following up to 5 redirects, each checked; size and time capped."""
    try:
        async with asyncio.timeout(timeout), checked_client(timeout) as client:
            return await _follow(client, url, max_bytes)
    except (TimeoutError, httpx.TimeoutException):
        raise FetchError(f"the page did not load within {timeout:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise FetchError(f"could not fetch the page: {exc or type(exc).__name__}") from exc


async def _follow(client: httpx.AsyncClient, url: str, max_bytes: int) -> FetchedPage:
    seen: set[str] = set()
    for _hop in range(MAX_REDIRECTS + 1):
        if url in seen:
            raise FetchError(f"redirect loop at {url}")
        seen.add(url)
        await asyncio.to_thread(check_url, url)
        page, location = await _get_once(client, url, max_bytes)
        if page is not None:
            return page
        url = location
    raise FetchError(f"more than {MAX_REDIRECTS} redirects")


async def _get_once(client: httpx.AsyncClient, url: str, max_bytes: int) -> tuple[FetchedPage | None, str]:
    """The page, or (None, where it redirects to)."""
    async with client.stream("GET", url) as response:
        location = response.headers.get("location")
        if response.status_code in REDIRECT_STATUSES and location:
            return None, urljoin(str(response.url), location)
        if not response.is_success:
            raise FetchError(f"the page answered HTTP {response.status_code}")
        content_type = response.headers.get("content-type", "")
        _check_content_type(content_type)
        body = await _read_capped(response, max_bytes)
    text = await asyncio.to_thread(decode, body, content_type)  # a guess over 5 MB takes a while
    return FetchedPage(str(response.url), response.status_code, content_type, text), ""


def mime_of(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def _check_content_type(content_type: str) -> None:
    mime = mime_of(content_type)
    if mime and mime not in PAGE_TYPES:
        raise FetchError(f"not a web page: {mime}")


async def _read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    too_large = FetchError(f"page is larger than {max_bytes:,} bytes")
    if int(response.headers.get("content-length") or 0) > max_bytes:
        raise too_large
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise too_large
    return bytes(body)


def decode(body: bytes, content_type: str) -> str:
    """Text from the header's charset, else the page's <meta charset>, else a guess."""
    for charset in _declared_charsets(body, content_type):
        try:
            return body.decode(charset)
        except (LookupError, UnicodeDecodeError):
            continue
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return _guess_decode(body)


def _declared_charsets(body: bytes, content_type: str) -> list[str]:
    charsets = []
    if header := _HEADER_CHARSET.search(content_type):
        charsets.append(header.group(1))
    if meta := _META_CHARSET.search(body[:4096]):
        charsets.append(meta.group(1).decode("ascii"))
    return charsets


def _guess_decode(body: bytes) -> str:
    best = charset_normalizer.from_bytes(body).best()
    return str(best) if best is not None else body.decode("utf-8", errors="replace")


# --- HTML to Markdown --------------------------------------------------------------------------


async def fetch_page(url: str) -> Page:
    """Fetch a page directly and turn it into Markdown."""
    fetched = await fetch(url)
    if mime_of(fetched.content_type) in TEXT_TYPES:
        title, markdown = _markdown_title(fetched.text), fetched.text.strip()
    else:
        title, markdown = await asyncio.to_thread(html_to_markdown, fetched.text)
    if not markdown:
        raise FetchError("no readable text")
    return Page(url=fetched.url, title=title, markdown=markdown, via="direct")


def html_to_markdown(page: str) -> tuple[str, str]:
    """(title, markdown) of the main text of an HTML page."""
    import trafilatura  # here, not at the top: it takes 0.4 s to import and only workers need it

    markdown = trafilatura.extract(
        page, output_format="markdown", include_links=False, include_tables=True, with_metadata=False
    )
    metadata = trafilatura.extract_metadata(page, extensive=False)
    title = (metadata.title if metadata else None) or _html_title(page)
    return title.strip(), (markdown or "").strip()


def _html_title(page: str) -> str:
    found = _TITLE.search(page)
    return html.unescape(re.sub(r"\s+", " ", found.group(1))).strip() if found else ""


def _markdown_title(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


# --- A file behind a page (research/keep.py) -------------------------------------------------------

PDF_TYPE = "application/pdf"
# What servers send a PDF as; it is taken only when its bytes begin as a PDF does.
PDF_TYPES = {PDF_TYPE, "application/x-pdf", "application/octet-stream", "binary/octet-stream"}
PDF_MAGIC = b"%PDF-"
_PDF_LINK = re.compile(
    r"""<meta\s[^>]*name=["']citation_pdf_url["'][^>]*content=["']([^"']+)["']"""
    r"""|<meta\s[^>]*content=["']([^"']+)["'][^>]*name=["']citation_pdf_url["']""",
    re.IGNORECASE,
)
PAGE_HEAD_BYTES = 512 * 1024


@dataclass(frozen=True)
class FetchedFile:
    url: str
    content_type: str
    body: bytes


async def fetch_pdf(url: str, *, max_bytes: int, timeout: float = 30.0) -> FetchedFile | None:
    """The PDF at `url`, or the one its page names as its own (`citation_pdf_url`, as scholarly
    pages do); None when it is a page without one. Every hop checked like a page fetch
    (SSRF-safe), the PDF at most `max_bytes` (FetchError past it), the whole within `timeout`."""
    try:
        async with asyncio.timeout(timeout), checked_client(timeout) as client:
            found = await _follow_file(client, url, max_bytes)
            if found is None or _is_pdf(found):
                return found
            if mime_of(found.content_type) in PDF_TYPES:
                return None  # a file, but not a PDF
            link = _PDF_LINK.search(found.body.decode("utf-8", "replace"))
            if link is None:
                return None
            behind = await _follow_file(
                client, urljoin(found.url, html.unescape(link.group(1) or link.group(2))), max_bytes
            )
            return behind if behind is not None and _is_pdf(behind) else None
    except (TimeoutError, httpx.TimeoutException):
        raise FetchError(f"the file did not load within {timeout:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise FetchError(f"could not fetch the file: {exc or type(exc).__name__}") from exc


def _is_pdf(found: FetchedFile) -> bool:
    return mime_of(found.content_type) in PDF_TYPES and found.body.startswith(PDF_MAGIC)


async def _follow_file(client: httpx.AsyncClient, url: str, max_bytes: int) -> FetchedFile | None:
    """A PDF (whole, up to `max_bytes`), an HTML page's head (to look for its PDF), or None."""
    seen: set[str] = set()
    for _hop in range(MAX_REDIRECTS + 1):
        if url in seen:
            raise FetchError(f"redirect loop at {url}")
        seen.add(url)
        await asyncio.to_thread(check_url, url)
        async with client.stream("GET", url, headers={"Accept": f"{PDF_TYPE},text/html;q=0.9"}) as response:
            location = response.headers.get("location")
            if response.status_code in REDIRECT_STATUSES and location:
                url = urljoin(str(response.url), location)
                continue
            if not response.is_success:
                raise FetchError(f"the file answered HTTP {response.status_code}")
            content_type = response.headers.get("content-type", "")
            mime = mime_of(content_type)
            if mime in PDF_TYPES:
                return FetchedFile(str(response.url), content_type, await _read_capped(response, max_bytes))
            if mime in ("text/html", "application/xhtml+xml"):
                head = bytearray()
                async for chunk in response.aiter_bytes():
                    head += chunk
                    if len(head) >= PAGE_HEAD_BYTES:
                        break
                return FetchedFile(str(response.url), content_type, bytes(head[:PAGE_HEAD_BYTES]))
            return None
    raise FetchError(f"more than {MAX_REDIRECTS} redirects")
