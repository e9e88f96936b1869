"""URL keys for de-duplicating search hits and capping hits per domain.

`normalize_url` gives a comparison key, not a URL to fetch: the same page found through two
queries (http vs https, tracking parameters, "www.", a fragment) collapses to one key.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

_TRACKING = {"fbclid", "gclid", "yclid", "mc_cid", "mc_eid", "ref", "ref_src"}
_DEFAULT_PORTS = {80, 443}
_SCHEME = re.compile(r"^[a-z][a-z0-9+.\-]*://", re.IGNORECASE)
# "mailto:", "javascript:" — but not "example.com:8080".
_OTHER_SCHEME = re.compile(r"^[a-z][a-z0-9+.\-]*:(?!\d)", re.IGNORECASE)
_HOST = re.compile(r"^[\w\-.]+$|^[0-9a-f:.]+$", re.IGNORECASE)
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PATH_SAFE = "/%:@!$&'()*+,;="
# Second-level labels under which every name belongs to a different owner
# (a compact stand-in for the Public Suffix List).
_SHARED_SUFFIXES = {
    "co.uk", "org.uk", "ac.uk", "gov.uk", "com.au", "net.au", "org.au", "edu.au", "co.jp",
    "ne.jp", "ac.jp", "co.kr", "com.br", "com.cn", "com.tr", "com.ua", "co.in", "co.nz",
    "co.za", "com.mx", "com.ru", "org.ru", "net.ru", "msk.ru", "spb.ru", "github.io",
    "gitlab.io", "blogspot.com", "herokuapp.com", "vercel.app", "netlify.app", "pages.dev",
    "readthedocs.io", "substack.com", "medium.com", "wordpress.com", "narod.ru", "livejournal.com",
}  # fmt: skip


def normalize_url(url: str) -> str:
    """A de-duplication key for `url`; garbage comes back stripped and lower-cased."""
    text = (url or "").strip()
    try:
        return _normalize(text)
    except ValueError:
        return text.lower()


def _normalize(text: str) -> str:
    if _OTHER_SCHEME.match(text) and not _SCHEME.match(text):
        raise ValueError("not a web URL")
    parts = urlsplit(text if _SCHEME.match(text) else "https://" + text.removeprefix("//"))
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError("not a web URL")
    host = _host(parts.hostname or "")
    port = parts.port
    netloc = host if port in (None, *_DEFAULT_PORTS) else f"{host}:{port}"
    return urlunsplit(("https", netloc, _path(parts.path), _query(parts.query), ""))


def _host(hostname: str) -> str:
    host = hostname.strip(".").lower().removeprefix("www.")
    if not host or not _HOST.match(host):
        raise ValueError("no host")
    try:
        host = host.encode("idna").decode("ascii")
    except UnicodeError as error:
        raise ValueError("bad IDN host") from error
    return f"[{host}]" if ":" in host else host


def _path(path: str) -> str:
    # Quote raw non-ASCII first, then unify escapes, so "/wiki/Москва" and its %-form agree.
    return _unify_escapes(quote(path, safe=_PATH_SAFE)).rstrip("/")


def _unify_escapes(text: str) -> str:
    return _ESCAPE.sub(_unescape_unreserved, text)


def _unescape_unreserved(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else "%" + match.group(1).upper()


def _query(query: str) -> str:
    pairs = [(key, value) for key, value in parse_qsl(query, keep_blank_values=True) if not _tracking(key)]
    # Sort by key only: the order of a repeated key's values can matter to the site.
    return urlencode(sorted(pairs, key=lambda pair: pair[0]), quote_via=quote)


def _tracking(key: str) -> bool:
    key = key.lower()
    return key.startswith("utm_") or key in _TRACKING


def domain_of(url: str) -> str:
    """The registrable-ish host of `url` without "www." ("export.arxiv.org" → "arxiv.org")."""
    host = urlsplit(normalize_url(url)).hostname or ""
    if not host or ":" in host or re.fullmatch(r"[\d.]+", host):
        return host
    labels = host.split(".")
    keep = 3 if ".".join(labels[-2:]) in _SHARED_SUFFIXES else 2
    return ".".join(labels[-keep:])
