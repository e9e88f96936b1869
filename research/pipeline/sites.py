"""The sites a topic may use, prefers and avoids (issue 30): "only these", "prefer" and "never".

A site is a host name; it stands for itself and its subdomains (`example.org` covers
`www.example.org` and `docs.example.org`, not `badexample.org`). The rules are sent to SearXNG
as `site:` / `-site:` operators, which some engines honour and others ignore, and they are
always enforced on the results: a result on an avoided site, or off the allowed ones, is dropped
before it is saved, and its query keeps it with the reason (the hits table shows them). A
preferred site's pages are read and cited first among pages of equal score.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.utils.translation import gettext as _

MAX_SITES = 20
# Operators added to a query at most: engines cut long queries, and the results are filtered anyway.
MAX_OPERATORS = 5
PREFERRED_BONUS = 0.5  # on the 0–10 score scale: ahead of equals, never ahead of a clearly better page
_HOST = re.compile(
    r"^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$"
)
_SPLIT = re.compile(r"[\s,;]+")

AVOIDED, NOT_ALLOWED = "avoided", "not_allowed"


def clean(raw: str | list[str]) -> list[str]:
    """Host names from what a user typed (addresses, `*.x`, `www.x`, one per line or comma);
    ValueError naming the first entry that is not a host name."""
    items = raw if isinstance(raw, list) else _SPLIT.split(raw or "")
    hosts: list[str] = []
    for item in (str(item).strip() for item in items):
        if not item:
            continue
        host = urlsplit(item if "//" in item else f"//{item}").hostname or ""
        host = host.removeprefix("*.").removeprefix("www.").rstrip(".")
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            host = ""
        if not _HOST.match(host):
            raise ValueError(_("“%(site)s” is not a site name (like example.org).") % {"site": item[:100]})
        if host not in hosts:
            hosts.append(host)
    if len(hosts) > MAX_SITES:
        raise ValueError(_("At most %(n)s sites per list.") % {"n": MAX_SITES})
    return hosts


def host_of(url: str) -> str:
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return ""
    return host.rstrip(".").lower()


def covers(site: str, host: str) -> bool:
    return host == site or host.endswith("." + site)


@dataclass(frozen=True)
class Rules:
    only: tuple[str, ...] = ()
    prefer: tuple[str, ...] = ()
    avoid: tuple[str, ...] = ()

    @classmethod
    def of(cls, topic: object) -> Rules:
        return cls(
            tuple(getattr(topic, "sites_only", None) or ()),
            tuple(getattr(topic, "sites_prefer", None) or ()),
            tuple(getattr(topic, "sites_avoid", None) or ()),
        )

    def __bool__(self) -> bool:
        return bool(self.only or self.prefer or self.avoid)

    def verdict(self, url: str) -> str:
        """Why a result must be dropped ("" when it may stay)."""
        host = host_of(url)
        if any(covers(site, host) for site in self.avoid):
            return AVOIDED
        if self.only and not any(covers(site, host) for site in self.only):
            return NOT_ALLOWED
        return ""

    def preferred(self, url: str) -> bool:
        host = host_of(url)
        return any(covers(site, host) for site in self.prefer)

    def operators(self) -> str:
        """What is added to a search query for the engines that honour it."""
        parts = []
        only = self.only[:MAX_OPERATORS]
        if len(only) == 1:
            parts.append(f"site:{only[0]}")
        elif only:
            parts.append("(" + " OR ".join(f"site:{site}" for site in only) + ")")
        parts += [f"-site:{site}" for site in self.avoid[:MAX_OPERATORS]]
        return " ".join(parts)
