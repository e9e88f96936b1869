"""The SSRF-safe fetcher: which addresses it refuses, redirects, caps, and HTML to Markdown."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from mindsearch.clients import fetch
from mindsearch.clients.fetch import FetchError, UnsafeURL, address_allowed, check_url
from tests.support.fakes import FakeService, Response, html_page, redirect
from tests.support.processes import free_port

ARTICLE = (
    "<header><nav><a href='/'>Home</a> | <a href='/about'>About</a></nav></header>"
    "<article><h1>Mixture of Tokens</h1>"
    "<p>Mixture of Tokens is a continuous alternative to sparse Mixture of Experts layers. "
    "Instead of routing each token to one expert, it mixes tokens from different examples "
    "before feeding them to the experts, which keeps the whole model differentiable.</p>"
    "<p>It was later improved with transition tuning, which lets a trained model switch to "
    "sparse inference, and it has been used in several large language model experiments.</p>"
    "<table><tr><th>Model</th><th>Speed-up</th></tr><tr><td>MoT-Medium</td><td>3x</td></tr></table>"
    "</article><footer>© 2024 Example</footer>"
)


@pytest.fixture
def private_allowed(settings):
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = True


@pytest.fixture
def private_refused(settings):
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False


@pytest.fixture
def dns(monkeypatch):
    """Made-up host names for getaddrinfo; other names resolve as usual."""
    names: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in names:
            answers = names[host]
            address = answers.pop(0) if len(answers) > 1 else answers[0]
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            return [(family, socket.SOCK_STREAM, 6, "", (address, port or 0))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return names


def run(coro):
    return asyncio.run(coro)


# --- check_url and the address policy ----------------------------------------------------------

PRIVATE_URLS = [
    "http://127.0.0.1/",
    "http://127.1/",
    "http://localhost:8000/",
    "http://api.localhost/",
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://100.64.0.1/",
    "http://100.100.100.200/",
    "http://0.0.0.0/",
    "http://224.0.0.1/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://[::1]/",
    "http://[::]/",
    "http://[fd00::1]/",
    "http://[fe80::1]/",
    "http://[ff02::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:10.0.0.1]/",
    "http://[::127.0.0.1]/",
    "http://[64:ff9b::127.0.0.1]/",
    "http://[2002:7f00:1::1]/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://0x7f.1/",
    "http://0x7f000001/",
    "http://metadata.google.internal/computeMetadata/v1/",
]


@pytest.mark.parametrize("url", PRIVATE_URLS)
def test_private_addresses_are_refused(private_refused, url: str) -> None:
    with pytest.raises(UnsafeURL):
        check_url(url)


@pytest.mark.parametrize("url", ["http://93.184.216.34:99999/", "http://[::1/"])
def test_malformed_urls(private_allowed, url: str) -> None:
    with pytest.raises(FetchError, match=r"not a valid URL"):
        check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.org/file",
        "file:///etc/passwd",
        "gopher://127.0.0.1:6379/_FLUSHALL",
        "javascript:alert(1)",
        "http:///no-host",
        "http://user:secret@93.184.216.34/",
        "http://user@93.184.216.34/",
    ],
)
def test_other_schemes_hostless_and_credentials_are_refused(private_allowed, url: str) -> None:
    with pytest.raises(UnsafeURL):
        check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://93.184.216.34/",
        "https://93.184.216.34:8443/path?q=1",
        "http://[2606:2800:220:1:248:1893:25c8:1946]/",
    ],
)
def test_public_literal_addresses_are_allowed(private_refused, url: str) -> None:
    check_url(url)


def test_host_names_are_resolved_and_every_address_checked(private_refused, dns) -> None:
    dns["public.test"] = ["93.184.216.34"]
    check_url("http://public.test/")
    dns["split.test"] = ["10.0.0.7"]
    with pytest.raises(UnsafeURL, match=r"10.0.0.7"):
        check_url("http://split.test/")


def test_unresolvable_host(private_refused) -> None:
    with pytest.raises(FetchError, match=r"cannot resolve"):
        check_url("http://no-such-host.invalid/")


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/", "http://localhost/", "http://10.0.0.1/", "http://made-up.test/"]
)
def test_allowing_private_urls_lets_loopback_through_without_dns(private_allowed, url: str) -> None:
    check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fe80::1]/",
        "http://metadata.google.internal/",
        "http://100.100.100.200/",
        "http://[fd00:ec2::254]/",
        "http://0.0.0.0/",
    ],
)
def test_metadata_and_link_local_are_refused_even_when_private_is_allowed(private_allowed, url: str) -> None:
    with pytest.raises(UnsafeURL):
        check_url(url)


@pytest.mark.parametrize(
    ("address", "public", "private_allowed_too"),
    [
        ("93.184.216.34", True, True),
        ("2606:4700::1111", True, True),
        ("127.0.0.1", False, True),
        ("10.0.0.1", False, True),
        ("100.64.0.1", False, True),
        ("fd12::1", False, True),
        ("::ffff:127.0.0.1", False, True),
        ("169.254.169.254", False, False),
        ("169.254.1.1", False, False),
        ("fe80::1", False, False),
        ("224.0.0.251", False, False),
        ("0.0.0.0", False, False),
        ("::", False, False),
    ],
)
def test_address_allowed(settings, address: str, public: bool, private_allowed_too: bool) -> None:
    ip = ipaddress.ip_address(address)
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False
    assert address_allowed(ip) is public
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = True
    assert address_allowed(ip) is private_allowed_too


# --- fetch -------------------------------------------------------------------------------------


def test_fetch_html(private_allowed) -> None:
    with FakeService({("GET", "/article"): html_page("Mixture of Tokens", ARTICLE)}) as fake:
        page = run(fetch.fetch(f"{fake.url}article"))
        request = fake.requests[0]
    assert page.url == f"{fake.url}article"
    assert page.status == 200
    assert page.content_type.startswith("text/html")
    assert "Mixture of Tokens is a continuous" in page.text
    assert request.headers["user-agent"].startswith("Mozilla/5.0")


def test_loopback_is_refused_unless_allowed(private_refused) -> None:
    with FakeService({("GET", "/"): html_page("t", "<p>x</p>")}) as fake, pytest.raises(UnsafeURL):
        run(fetch.fetch(fake.url))
    assert fake.requests == []


def test_redirects_are_followed(private_allowed) -> None:
    routes = {
        ("GET", "/old"): redirect("/older", 301),
        ("GET", "/older"): redirect("/article", 308),
        ("GET", "/article"): html_page("Mixture of Tokens", ARTICLE),
    }
    with FakeService(routes) as fake:
        page = run(fetch.fetch(f"{fake.url}old"))
    assert page.url == f"{fake.url}article"
    assert [r.path for r in fake.requests] == ["/old", "/older", "/article"]


def test_redirect_to_metadata_is_refused(private_allowed) -> None:
    routes = {("GET", "/go"): redirect("http://169.254.169.254/latest/meta-data/iam/")}
    with FakeService(routes) as fake, pytest.raises(UnsafeURL, match=r"169.254.169.254"):
        run(fetch.fetch(f"{fake.url}go"))


def test_redirect_to_a_name_that_resolves_to_metadata_is_refused_at_connect(private_allowed, dns) -> None:
    # With private URLs allowed, check_url does not resolve names: the connect-time check must catch it.
    dns["rebind.test"] = ["169.254.169.254"]
    with FakeService() as fake:
        port = fake.url.rsplit(":", 1)[1].strip("/")
        fake.routes[("GET", "/go")] = redirect(f"http://rebind.test:{port}/secret")
        with pytest.raises(UnsafeURL, match=r"169.254.169.254"):
            run(fetch.fetch(f"{fake.url}go"))
        assert [r.path for r in fake.requests] == ["/go"]


def test_dns_rebinding_between_check_and_connect_is_refused(private_refused, dns) -> None:
    # The check sees a public address, the connection would go to loopback.
    dns["rebind.test"] = ["93.184.216.34", "127.0.0.1"]
    with pytest.raises(UnsafeURL, match=r"127.0.0.1"):
        run(fetch.fetch("http://rebind.test/"))


def test_the_connection_goes_to_the_checked_address_with_the_host_name_kept(private_allowed, dns) -> None:
    dns["pages.test"] = ["127.0.0.1"]
    with FakeService({("GET", "/article"): html_page("Mixture of Tokens", ARTICLE)}) as fake:
        port = fake.url.rsplit(":", 1)[1].strip("/")
        page = run(fetch.fetch(f"http://pages.test:{port}/article"))
        assert fake.requests[0].headers["host"] == f"pages.test:{port}"
    assert page.url == f"http://pages.test:{port}/article"


def test_redirect_loop(private_allowed) -> None:
    routes = {("GET", "/a"): redirect("/b"), ("GET", "/b"): redirect("/a")}
    with FakeService(routes) as fake, pytest.raises(FetchError, match=r"redirect loop"):
        run(fetch.fetch(f"{fake.url}a"))


def test_too_many_redirects(private_allowed) -> None:
    routes = {("GET", f"/{i}"): redirect(f"/{i + 1}") for i in range(10)}
    with FakeService(routes) as fake, pytest.raises(FetchError, match=r"more than 5 redirects"):
        run(fetch.fetch(f"{fake.url}0"))
    assert len(fake.requests) == 6


def test_page_larger_than_the_cap_by_content_length(private_allowed) -> None:
    big = Response(200, b"<p>" + b"x" * 2_000 + b"</p>", {"Content-Type": "text/html"})
    with (
        FakeService({("GET", "/big"): lambda request: big}) as fake,
        pytest.raises(FetchError, match=r"larger than 1,000 bytes"),
    ):
        run(fetch.fetch(f"{fake.url}big", max_bytes=1_000))


def test_page_larger_than_the_cap_while_streaming(private_allowed) -> None:
    big = Response(
        200, b"<p>" + b"x" * 200_000 + b"</p>", {"Content-Type": "text/html"}, close_delimited=True
    )
    with (
        FakeService({("GET", "/big"): lambda request: big}) as fake,
        pytest.raises(FetchError, match=r"larger than 10,000 bytes"),
    ):
        run(fetch.fetch(f"{fake.url}big", max_bytes=10_000))


def test_default_cap_is_five_megabytes(private_allowed) -> None:
    big = Response(200, b"x" * 5_000_001, {"Content-Type": "text/plain"})
    with (
        FakeService({("GET", "/big"): lambda request: big}) as fake,
        pytest.raises(FetchError, match=r"larger than 5,000,000 bytes"),
    ):
        run(fetch.fetch(f"{fake.url}big"))


@pytest.mark.parametrize(
    "content_type", ["application/pdf", "image/png", "application/octet-stream", "application/json"]
)
def test_binary_content_types_are_refused(private_allowed, content_type: str) -> None:
    answer = Response(200, b"%PDF-1.7 ...", {"Content-Type": content_type})
    with (
        FakeService({("GET", "/file"): lambda request: answer}) as fake,
        pytest.raises(FetchError, match=f"not a web page: {content_type}"),
    ):
        run(fetch.fetch(f"{fake.url}file"))


def test_error_status(private_allowed) -> None:
    with FakeService() as fake, pytest.raises(FetchError, match=r"HTTP 404"):
        run(fetch.fetch(f"{fake.url}missing"))


def test_total_time_is_capped(private_allowed) -> None:
    with (
        FakeService({("GET", "/slow"): html_page("t", "<p>x</p>")}, latency=2.0) as fake,
        pytest.raises(FetchError, match=r"did not load within 0.5 s"),
    ):
        run(fetch.fetch(f"{fake.url}slow", timeout=0.5))


def test_connection_refused(private_allowed) -> None:
    with pytest.raises(FetchError, match=r"could not fetch"):
        run(fetch.fetch(f"http://127.0.0.1:{free_port()}/"))


def test_charset_from_meta_when_the_header_has_none(private_allowed) -> None:
    head = '<head><meta charset="windows-1251"><title>Привет</title></head>'
    body = f"<html>{head}<body>Смесь токенов</body></html>"
    answer = Response(200, body.encode("cp1251"), {"Content-Type": "text/html"})
    with FakeService({("GET", "/ru"): lambda request: answer}) as fake:
        page = run(fetch.fetch(f"{fake.url}ru"))
    assert "Смесь токенов" in page.text


def test_decode_prefers_the_header_charset() -> None:
    assert fetch.decode("Привет".encode("koi8-r"), "text/html; charset=koi8-r") == "Привет"
    assert fetch.decode(b"plain", "text/plain") == "plain"
    russian = "Смесь токенов — это непрерывная альтернатива разреженным слоям смеси экспертов."
    assert fetch.decode(russian.encode("cp1251"), "text/plain") == russian


# --- fetch_page --------------------------------------------------------------------------------


def test_fetch_page_turns_html_into_markdown(private_allowed) -> None:
    with FakeService({("GET", "/article"): html_page("Mixture of Tokens | Example", ARTICLE)}) as fake:
        page = run(fetch.fetch_page(f"{fake.url}article"))
    assert page.via == "direct"
    assert page.title == "Mixture of Tokens"  # trafilatura drops the site name
    assert "continuous alternative to sparse Mixture of Experts" in page.markdown
    assert "MoT-Medium" in page.markdown  # tables are kept
    assert "About" not in page.markdown  # navigation is not


def test_fetch_page_passes_plain_text_and_markdown_through(private_allowed) -> None:
    text = Response(
        200, b"# Notes\n\nPlain text, kept as it is.", {"Content-Type": "text/markdown; charset=utf-8"}
    )
    with FakeService({("GET", "/notes.md"): lambda request: text}) as fake:
        page = run(fetch.fetch_page(f"{fake.url}notes.md"))
    assert page.title == "Notes"
    assert page.markdown == "# Notes\n\nPlain text, kept as it is."


def test_fetch_page_without_readable_text(private_allowed) -> None:
    with (
        FakeService({("GET", "/empty"): html_page("Empty", "<script>var x = 1;</script>")}) as fake,
        pytest.raises(FetchError, match=r"no readable text"),
    ):
        run(fetch.fetch_page(f"{fake.url}empty"))


def test_empty_plain_text_is_not_readable(private_allowed) -> None:
    empty = Response(200, b"   \n", {"Content-Type": "text/plain"})
    with (
        FakeService({("GET", "/blank"): lambda request: empty}) as fake,
        pytest.raises(FetchError, match=r"no readable text"),
    ):
        run(fetch.fetch_page(f"{fake.url}blank"))
