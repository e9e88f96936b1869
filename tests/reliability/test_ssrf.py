"""Hostile input: SSRF. Every special-purpose address range, in every spelling a URL can give it,
directly, through a DNS name, through a redirect and through the reader; and public neighbours
of those ranges that must stay reachable.

The ranges are IANA's special-purpose registries. "Private" ones are refused unless
MINDSEARCH_ALLOW_PRIVATE_URLS (only tests set it, to scrape loopback fakes); "never" ones
(link-local with the cloud metadata services, unspecified, multicast, reserved) are refused
even then.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User

from mindsearch.clients import fetch, reader
from mindsearch.clients.fetch import FetchError, UnsafeURL, check_url
from research.models import Document, Hit, Topic
from tests.reliability.runs import research, warnings_of
from tests.support.fakes import FakeService, Request, Response, html_page, searxng_result
from tests.support.world import PAGES, loopback_world

PRIVATE_NETWORKS = [
    "0.0.0.0/8",  # "this network" (0.0.0.0 itself is unspecified: never)
    "10.0.0.0/8",
    "100.64.0.0/10",  # carrier-grade NAT
    "127.0.0.0/8",
    "172.16.0.0/12",
    "192.0.0.0/29",  # IETF protocol assignments
    "192.0.2.0/24",  # documentation
    "192.168.0.0/16",
    "198.18.0.0/15",  # benchmarking
    "198.51.100.0/24",
    "203.0.113.0/24",
    "::1/128",
    "fc00::/7",  # unique local
    "fec0::/10",  # site-local, deprecated but still routed internally
    "2001:db8::/32",  # documentation
    "2001::/32",  # Teredo
]
NEVER_NETWORKS = [
    "169.254.0.0/16",  # link-local, with the AWS/GCP/Azure metadata service at 169.254.169.254
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved
    "255.255.255.255/32",
    "::/128",
    "fe80::/10",
    "ff00::/8",
    "64:ff9b:1::/48",  # local-use NAT64
    "100::/64",  # discard-only
    "fd00:ec2::254/128",  # AWS metadata over IPv6
]
# Just outside the ranges above: ordinary public addresses.
PUBLIC_ADDRESSES = [
    "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "126.255.255.255", "128.0.0.0",
    "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0", "192.167.255.255",
    "192.169.0.0", "198.17.255.255", "198.20.0.0", "223.255.255.255", "93.184.216.34",
    "2606:4700:4700::1111", "2a00:1450:4001:81c::200e", "2400:cb00::1",
]  # fmt: skip


def samples(network: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The first, second, a middle and the last address of a range."""
    net = ipaddress.ip_network(network)
    picks = [0, 1, net.num_addresses // 2, net.num_addresses - 1]
    return list(dict.fromkeys(net[i] for i in picks if i < net.num_addresses))


def spellings(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> dict[str, str]:
    """Every host form that means `ip` to the C library or to an IPv6 stack."""
    if ip.version == 6:
        return {
            "literal": f"[{ip.compressed}]",
            "exploded": f"[{ip.exploded.upper()}]",
            "zone": f"[{ip.compressed}%25eth0]",
        }
    value, octets = int(ip), ip.packed
    return {
        "literal": str(ip),
        "decimal": str(value),
        "octal": ".".join(f"0{octet:o}" for octet in octets),
        "hex": f"0x{value:08x}",
        "mixed": f"0x{octets[0]:x}.{octets[1]}.0{octets[2]:o}.{octets[3]}",
        "trailing-dot": f"{ip}.",
        "mapped": f"[::ffff:{ip}]",
        "mapped-hex": f"[::ffff:{value >> 16:x}:{value & 0xFFFF:x}]",
        "compatible": f"[::{ip}]",
        "nat64": f"[64:ff9b::{ip}]",
        "6to4": f"[2002:{value >> 16:x}:{value & 0xFFFF:x}::1]",
    }


def urls(network: str) -> list[str]:
    """A metadata URL for each sample address of the range in each spelling."""
    return [f"http://{host}/latest/meta-data/" for ip in samples(network) for host in spellings(ip).values()]


def each_refused(subtests: pytest.Subtests, network: str) -> None:
    """Every sample of the range in every spelling is refused; each URL is a subtest of its own,
    reported by itself when it passes the check (one test per range, not one per URL: the 951
    cases cost more to set up than to run)."""
    for url in urls(network):
        with subtests.test(url=url), pytest.raises(UnsafeURL):
            check_url(url)


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Made-up names and the addresses they resolve to; other names fail as in every test."""
    names: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host: object, port: object, *args: object, **kwargs: object) -> list:
        if host in names:
            family = lambda a: socket.AF_INET6 if ":" in a else socket.AF_INET  # noqa: E731
            return [(family(a), socket.SOCK_STREAM, 6, "", (a, port or 0)) for a in names[host]]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return names


def fetch_now(url: str) -> fetch.FetchedPage:
    return asyncio.run(fetch.fetch(url, timeout=5))


# --- Literal addresses, in every spelling -----------------------------------------------------


@pytest.mark.parametrize("network", PRIVATE_NETWORKS + NEVER_NETWORKS)
def test_every_spelling_of_a_non_public_address_is_refused(
    settings: object, subtests: pytest.Subtests, network: str
) -> None:
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False
    each_refused(subtests, network)


@pytest.mark.parametrize("network", NEVER_NETWORKS)
def test_link_local_metadata_multicast_and_reserved_are_refused_even_when_private_is_allowed(
    settings: object, subtests: pytest.Subtests, network: str
) -> None:
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = True
    each_refused(subtests, network)


@pytest.mark.parametrize("address", PUBLIC_ADDRESSES)
def test_public_neighbours_of_those_ranges_are_allowed(settings: object, address: str) -> None:
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False
    host = f"[{address}]" if ":" in address else address
    check_url(f"http://{host}/page")


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost/", "http://LOCALHOST./", "http://api.localhost/", "http://[::1]:8000/",
        "http://metadata.google.internal/computeMetadata/v1/", "http://METADATA/", "http://metadata.goog/",
        "http://user:pass@93.184.216.34/", "file:///etc/passwd", "gopher://127.0.0.1:6379/_INFO",
        "dict://127.0.0.1:11211/stat", "ftp://10.0.0.1/", "http:///etc/passwd", "//127.0.0.1/",
    ],
)  # fmt: skip
def test_names_and_schemes_that_mean_this_machine_or_a_metadata_service_are_refused(
    settings: object, url: str
) -> None:
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False
    with pytest.raises(UnsafeURL):
        check_url(url)


# --- DNS names that resolve to them ------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [str(ip) for network in PRIVATE_NETWORKS + NEVER_NETWORKS for ip in samples(network)[:2]],
)
def test_a_name_resolving_to_a_non_public_address_is_refused(
    settings: object, dns: dict[str, list[str]], address: str
) -> None:
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False
    dns["innocent.example"] = [address]
    with pytest.raises(UnsafeURL, match="non-public address"):
        check_url("https://innocent.example/report.html")


@pytest.mark.parametrize("answers", [["93.184.216.34", "10.0.0.5"], ["2606:4700::1", "::1"], ["fec0::2"]])
def test_a_name_with_any_non_public_answer_is_refused(
    settings: object, dns: dict[str, list[str]], answers: list[str]
) -> None:
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False
    dns["mixed.example"] = answers
    with pytest.raises(UnsafeURL):
        check_url("http://mixed.example/")


@pytest.mark.parametrize("address", ["169.254.169.254", "fe80::1", "224.0.0.251", "0.0.0.0"])
def test_a_name_resolving_to_metadata_is_refused_at_connect_even_when_private_is_allowed(
    settings: object, dns: dict[str, list[str]], address: str
) -> None:
    # With private URLs allowed, names are not resolved before the request; the connection is.
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = True
    dns["rebound.example"] = [address]
    with pytest.raises(UnsafeURL, match="non-public address"):
        fetch_now("http://rebound.example/")


# --- Redirects to them -------------------------------------------------------------------------


@pytest.fixture
def redirector(settings: object) -> Iterator[FakeService]:
    """A page that redirects to `?to=`; the first hop goes to this loopback server, and the
    address policy is switched on as the redirect is answered, as for a public page."""
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = True

    def go(request: Request) -> Response:
        settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False
        return Response(302, b"", {"Location": request.param("to")})

    with FakeService({("GET", "/go"): go, ("GET", "/secret"): html_page("secret", "<p>s</p>")}) as server:
        yield server


REDIRECT_TARGETS = [
    "http://127.0.0.1:{port}/secret", "http://2130706433:{port}/secret", "http://0x7f.1:{port}/secret",
    "http://0177.0.0.1:{port}/secret", "http://[::ffff:127.0.0.1]:{port}/secret", "http://[::1]:{port}/secret",
    "http://localhost:{port}/secret", "http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/", "http://[fec0::1]/", "http://metadata.google.internal/",
    "http://internal.example:{port}/secret", "file:///etc/passwd",
]  # fmt: skip


@pytest.mark.parametrize("target", REDIRECT_TARGETS)
def test_a_redirect_to_a_non_public_address_is_refused_before_it_is_followed(
    redirector: FakeService, dns: dict[str, list[str]], target: str
) -> None:
    dns["internal.example"] = ["127.0.0.1"]
    port = redirector.url.rsplit(":", 1)[1].strip("/")
    start = f"{redirector.url}go?to={target.format(port=port)}"
    # Refused by our check; 0177.0.0.1 is refused by httpx's URL parser before that.
    with pytest.raises(FetchError if "0177" in target else UnsafeURL):
        fetch_now(start)
    assert [request.path for request in redirector.requests] == ["/go"]


# --- Through the reader ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/iam/", "http://[::ffff:a9fe:a9fe]/", "http://2852039166/",
        "http://127.0.0.1:5432/", "http://0x7f.1/", "http://[fec0::1]/", "http://metadata.google.internal/",
    ],
)  # fmt: skip
def test_the_reader_is_never_asked_for_a_non_public_address(settings: object, url: str) -> None:
    # A self-hosted reader would fetch it from inside our network for us.
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False
    settings.LIMIT_JINA_RPS = 0
    with FakeService(fallback=lambda request: Response(200, "Title: x\n\nMarkdown Content:\nx")) as service:
        settings.JINA_READER_URL = service.url
        with pytest.raises(UnsafeURL):
            asyncio.run(reader.read(url))
        assert service.requests == []


# --- In a research run -------------------------------------------------------------------------

METADATA_HITS = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://[::ffff:169.254.169.254]/latest/user-data",
    "http://2852039166/computeMetadata/v1/",
    "http://metadata.google.internal/computeMetadata/v1/instance/",
]


@pytest.mark.django_db
def test_search_results_pointing_at_metadata_are_never_fetched(alice: User, settings: object) -> None:
    with loopback_world(settings) as w:
        search = w.searxng.routes[("GET", "/search")]

        def poisoned(request: Request) -> Response:
            # Titled like the best page, so the LLM scores them top and they are tried first.
            planted = [{"url": url, "title": PAGES[0][1], "content": PAGES[0][4]} for url in METADATA_HITS]
            response = search(request)
            response.body["results"][:0] = [searxng_result(item, 1) for item in planted]
            return response

        w.searxng.routes[("GET", "/search")] = poisoned
        topic = research(alice)
        asked = [request.raw_path for request in w.reader.requests]
    assert topic.status == Topic.Status.COMPLETED, topic.error
    planted = Hit.objects.filter(topic=topic, url__in=METADATA_HITS)
    assert planted.exists()  # they were found and scored like any hit…
    assert not Document.objects.filter(hit__in=planted).exists()  # …but never read
    assert not any(url in path for path in asked for url in METADATA_HITS)
    refused = [w for w in warnings_of(topic, "read") if "refused" in w or "non-public" in w]
    assert refused, warnings_of(topic)
