"""What the four scholarly clients share (OpenAlex, arXiv, PubMed, Crossref): the `Paper` each
returns, their common error, the contact address their polite pools ask for, and the open-access
PDF download (SSRF-checked like every page fetch, for the document reader to parse).

Each service's own client (`openalex.py`, `arxiv.py`, `pubmed.py`, `crossref.py`) has its base
URL setting (empty = off; an institution may point it at a mirror, tests at loopback), its own
global rate limit (`ratelimit.acquire`) and its own way of failing, which it turns into
`ScholarlyError` with the service's words.
"""

from __future__ import annotations

import asyncio
import html
import re
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urljoin

import httpx
from django.conf import settings

from mindsearch.clients import fetch, ratelimit, tls

# An open-access PDF larger than this is not downloaded (the reader's upload limit is larger,
# but a paper is rarely over 20 MB and a topic reads several at once).
PDF_MAX_BYTES = 25_000_000
PDF_TIMEOUT_SECONDS = 30.0
PDF_TYPES = {"application/pdf", "application/x-pdf", "application/octet-stream", "binary/octet-stream"}
_DOI = re.compile(r"10\.\d{4,9}/\S+", re.IGNORECASE)
_TAGS = re.compile(r"<[^>]+>")


class ScholarlyError(Exception):
    """A scholarly service could not answer; the message is shown in the topic's log."""


@dataclass(frozen=True)
class Paper:
    """One work as a scholarly index describes it. `url` is what the topic reads: the open-access
    PDF when there is one, else the landing page (DOI link); the abstract is read when neither
    gives the text."""

    source: str  # the service that found it: openalex, arxiv, pubmed, crossref
    title: str
    doi: str = ""  # bare, lower case: 10.1234/abc (never the https://doi.org/ form)
    authors: list[str] = field(default_factory=list)
    year: int | None = None
    venue: str = ""
    abstract: str = ""
    pdf_url: str = ""
    landing_url: str = ""
    kind: str = "article"  # article, preprint (arXiv), book-chapter…: the BibTeX entry type's hint
    identifier: str = ""  # the service's own id: W123 (OpenAlex), 2401.01234 (arXiv), PMID

    @property
    def url(self) -> str:
        return self.pdf_url or self.landing_url or (f"https://doi.org/{self.doi}" if self.doi else "")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Paper:
        names = set(cls.__dataclass_fields__)
        return cls(**{key: value for key, value in data.items() if key in names})


def clean_doi(value: str | None) -> str:
    """A DOI as people and services write it (a doi.org link, "doi:" prefix) to its bare form."""
    found = _DOI.search(value or "")
    return found.group(0).rstrip(".,;)").lower() if found else ""


def plain(text: str | None) -> str:
    """Markup (JATS, HTML) out, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(_TAGS.sub(" ", text or "")).split())


def mailto() -> str:
    return settings.SCHOLARLY_MAILTO


def user_agent() -> str:
    contact = f" (mailto:{mailto()})" if mailto() else ""
    return f"MindSearch/1.0{contact}"


async def get(url: str, *, name: str, accept: str = "application/json") -> httpx.Response:
    """One GET to a scholarly service (not SSRF-checked: the base URL is the operator's setting);
    a timeout or a dropped connection is the client's error, any answer is returned."""
    try:
        async with httpx.AsyncClient(
            timeout=settings.SCHOLARLY_TIMEOUT_SECONDS, trust_env=False, verify=tls.context(trust_env=False)
        ) as client:
            return await client.get(url, headers={"Accept": accept, "User-Agent": user_agent()})
    except httpx.TimeoutException:
        raise ScholarlyError(
            f"{name} did not answer within {settings.SCHOLARLY_TIMEOUT_SECONDS:g} s"
        ) from None
    except httpx.HTTPError as exc:
        raise ScholarlyError(f"{name} is not reachable: {exc or type(exc).__name__}") from exc


def retry_after(response: httpx.Response, default: float = 1.0) -> float:
    """The pause a 429/503 asks for (Retry-After in seconds), at most 10 s; `default` without it."""
    try:
        return min(max(float(response.headers.get("retry-after", "")), 0.0), 10.0)
    except ValueError:
        return default


async def download_pdf(url: str) -> bytes:
    """An open-access PDF's bytes: every hop checked (private addresses refused), size and time
    capped; `fetch.FetchError` when it is not a PDF (a landing page in its place) or too big."""
    try:
        async with asyncio.timeout(PDF_TIMEOUT_SECONDS), fetch.checked_client(PDF_TIMEOUT_SECONDS) as client:
            for _hop in range(fetch.MAX_REDIRECTS + 1):
                await asyncio.to_thread(fetch.check_url, url)
                data, location = await _pdf_once(client, url)
                if data is not None:
                    return data
                url = location
    except (TimeoutError, httpx.TimeoutException):
        raise fetch.FetchError(f"the PDF did not download within {PDF_TIMEOUT_SECONDS:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise fetch.FetchError(f"could not download the PDF: {exc or type(exc).__name__}") from exc
    raise fetch.FetchError(f"more than {fetch.MAX_REDIRECTS} redirects")


async def _pdf_once(client: httpx.AsyncClient, url: str) -> tuple[bytes | None, str]:
    headers = {"Accept": "application/pdf,*/*;q=0.5"}
    async with client.stream("GET", url, headers=headers) as response:
        location = response.headers.get("location")
        if response.status_code in fetch.REDIRECT_STATUSES and location:
            return None, urljoin(str(response.url), location)
        if not response.is_success:
            raise fetch.FetchError(f"the PDF answered HTTP {response.status_code}")
        mime = fetch.mime_of(response.headers.get("content-type", ""))
        if mime and mime not in PDF_TYPES:
            raise fetch.FetchError(f"not a PDF: {mime} (a landing page in the PDF's place)")
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > PDF_MAX_BYTES:
                raise fetch.FetchError(f"the PDF is larger than {PDF_MAX_BYTES // 1_000_000} MB")
            chunks.append(chunk)
    data = b"".join(chunks)
    if not data.startswith(b"%PDF"):
        raise fetch.FetchError("the file is not a PDF")
    return data, ""


ATTEMPTS = 2


async def ask(
    url: str,
    *,
    name: str,
    service: str,
    limit: float,
    per_seconds: float,
    user: int | None,
    accept: str = "application/json",
    reason: Any = None,
) -> httpx.Response:
    """One request under the service's own global limit; a 429 or 5xx (the services' "slow
    down" and "busy" answers) waits what the answer asks (Retry-After) and is tried once more,
    then is the client's error with the service's own words (`reason(response)`)."""
    for number in range(1, ATTEMPTS + 1):
        await ratelimit.acquire(service, limit, per_seconds, user=user)
        response = await get(url, name=name, accept=accept)
        if response.status_code != 429 and response.status_code < 500:
            return response
        why = (reason(response) if reason else "") or response.reason_phrase
        if number == ATTEMPTS:
            refused = "rate limit" if response.status_code == 429 else "unavailable"
            raise ScholarlyError(
                f"{name} refused the request ({refused}, HTTP {response.status_code}): {why}"
                f" (gave up after {number} attempts)"
            )
        await asyncio.sleep(retry_after(response))
    raise AssertionError("unreachable")


def refused(response: httpx.Response, name: str, why: str = "") -> ScholarlyError:
    return ScholarlyError(
        f"{name} refused the request (HTTP {response.status_code}){': ' + why if why else ''}"
    )


def xml_root(data: bytes, name: str) -> Any:
    """An XML answer parsed without entities or network (lxml), or the client's error."""
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, remove_comments=True)
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise ScholarlyError(f"{name} answered, but not with XML: {exc}") from exc
