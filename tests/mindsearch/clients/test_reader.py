"""The r.jina.ai-style reader against a loopback server that answers as the reader does."""

from __future__ import annotations

import asyncio

import pytest

from mindsearch.clients import reader
from mindsearch.clients.fetch import UnsafeURL
from mindsearch.clients.reader import ReadError, parse_reader_text
from mindsearch.models import RateLimitGrant
from tests.support.fakes import FakeService, Fault, Response, reader_text
from tests.support.fakes import reader as reader_route
from tests.support.processes import free_port

TARGET = "https://93.184.216.34/articles/mixture-of-tokens"
PAGES = {
    TARGET: ("Mixture of Tokens", "# Mixture of Tokens\n\nA continuous alternative to sparse MoE."),
    "https://93.184.216.34/search?q=a&lang=en": ("Search", "Results for a"),
}


@pytest.fixture(autouse=True)
def reader_settings(settings):
    settings.LIMIT_JINA_RPS = 0
    settings.JINA_API_KEY = ""
    settings.MINDSEARCH_ALLOW_PRIVATE_URLS = False


@pytest.fixture
def fake(settings):
    with FakeService(fallback=reader_route(PAGES)) as service:
        settings.JINA_READER_URL = service.url
        yield service


def read(url: str = TARGET) -> reader.Page:
    return asyncio.run(reader.read(url))


def test_read_parses_title_and_content(fake) -> None:
    page = read()
    assert page.url == TARGET
    assert page.title == "Mixture of Tokens"
    assert page.markdown == "# Mixture of Tokens\n\nA continuous alternative to sparse MoE."
    assert page.via == "reader"


def test_the_target_url_is_appended_to_the_reader_url(fake) -> None:
    read("https://93.184.216.34/search?q=a&lang=en")
    assert fake.requests[0].raw_path == "/https://93.184.216.34/search?q=a&lang=en"


def test_headers_without_a_key(fake) -> None:
    read()
    headers = fake.requests[0].headers
    assert headers["accept"] == "text/plain"
    assert headers["x-return-format"] == "markdown"
    assert "authorization" not in headers


def test_api_key_is_sent(settings) -> None:
    with FakeService(fallback=reader_route(PAGES, key="jina_secret")) as service:
        settings.JINA_READER_URL = service.url
        settings.JINA_API_KEY = "jina_secret"
        assert read().title == "Mixture of Tokens"
        assert service.requests[0].headers["authorization"] == "Bearer jina_secret"


def test_wrong_api_key(settings) -> None:
    with FakeService(fallback=reader_route(PAGES, key="jina_secret")) as service:
        settings.JINA_READER_URL = service.url
        settings.JINA_API_KEY = "wrong"
        with pytest.raises(ReadError, match=r"JINA_API_KEY") as raised:
            read()
    assert raised.value.status == 401


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (402, "quota"),
        (429, "rate-limiting"),
        (500, "HTTP 500"),
        (502, "HTTP 502"),
        (503, "HTTP 503"),
        (422, "could not read"),
    ],
)
def test_error_statuses(fake, status: int, message: str) -> None:
    fake.inject(Fault(status, body={"code": status, "message": "nope"}))
    with pytest.raises(ReadError, match=message) as raised:
        read()
    assert raised.value.status == status
    assert len(fake.requests) == 1  # no retries here


def test_unknown_page_is_a_read_error(fake) -> None:
    with pytest.raises(ReadError) as raised:
        read("https://93.184.216.34/not-there")
    assert raised.value.status == 422


def test_timeout(fake, monkeypatch) -> None:
    monkeypatch.setattr(reader, "TIMEOUT_SECONDS", 0.3)
    fake.inject(Fault.hang(1.5))
    with pytest.raises(ReadError, match=r"did not answer within 0.3 s") as raised:
        read()
    assert raised.value.status is None


def test_not_reachable(settings) -> None:
    settings.JINA_READER_URL = f"http://127.0.0.1:{free_port()}/"
    with pytest.raises(ReadError, match=r"not reachable") as raised:
        read()
    assert raised.value.status is None


def test_empty_content(fake) -> None:
    fake.inject(Fault(200, body=reader_text("Empty page", TARGET, "")))
    with pytest.raises(ReadError, match=r"no text") as raised:
        read()
    assert raised.value.status == 200


def test_body_without_the_preamble_is_all_markdown(fake) -> None:
    fake.inject(Fault(200, body="# Just Markdown\n\nNo preamble at all."))
    page = read()
    assert page.title == ""
    assert page.markdown == "# Just Markdown\n\nNo preamble at all."


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:8080/admin",
        "http://10.0.0.5/",
        "file:///etc/passwd",
    ],
)
def test_private_targets_are_refused_before_any_request(fake, url: str) -> None:
    with pytest.raises(UnsafeURL):
        read(url)
    assert fake.requests == []


@pytest.mark.django_db(transaction=True)
def test_a_rate_limit_slot_is_taken(fake, settings) -> None:
    settings.LIMIT_JINA_RPS = 100
    read()
    assert RateLimitGrant.objects.filter(name="reader").count() == 1


def test_the_fake_answers_like_the_reader() -> None:
    route = reader_route({"https://a.example/": ("A", "text")})
    from tests.support.fakes import Request

    answer = route(Request("GET", "/https://a.example/", {}, {}, b"", raw_path="/https://a.example/"))
    assert isinstance(answer, Response)
    assert answer.body == "Title: A\n\nURL Source: https://a.example/\n\nMarkdown Content:\ntext\n"


# --- parse_reader_text -------------------------------------------------------------------------


def test_parse_reader_text_full_preamble() -> None:
    text = (
        "Title: Some page title\n\nURL Source: https://example.org/page\n\n"
        "Published Time: 2024-05-01T00:00:00Z\n\nMarkdown Content:\n# Heading\n\ntext...\n"
    )
    assert parse_reader_text(text) == ("Some page title", "# Heading\n\ntext...")


def test_parse_reader_text_keeps_later_lines_that_look_like_the_preamble() -> None:
    text = "Title: T\n\nURL Source: u\n\nMarkdown Content:\nBody\n\nMarkdown Content:\nstill body\n"
    text += "Title: not a title"
    title, markdown = parse_reader_text(text)
    assert title == "T"
    assert markdown == "Body\n\nMarkdown Content:\nstill body\nTitle: not a title"


def test_parse_reader_text_empty_title() -> None:
    assert parse_reader_text("Title: \n\nURL Source: u\n\nMarkdown Content:\nBody") == ("", "Body")


def test_parse_reader_text_without_preamble() -> None:
    assert parse_reader_text("  Plain body\nwith lines  ") == ("", "Plain body\nwith lines")
    assert parse_reader_text("Title: only a title line\nand no markdown marker") == (
        "",
        "Title: only a title line\nand no markdown marker",
    )
