from __future__ import annotations

import pytest

from research.pipeline.links import domain_of, normalize_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com/a", "https://example.com/a"),
        ("HTTP://Example.COM/Path", "https://example.com/Path"),
        ("http://example.com/a", "https://example.com/a"),
        ("https://www.example.com/a", "https://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("http://example.com:80/a", "https://example.com/a"),
        ("https://example.com:8443/a", "https://example.com:8443/a"),
        ("https://example.com/a#section-2", "https://example.com/a"),
        ("https://example.com/a/", "https://example.com/a"),
        ("https://example.com/", "https://example.com"),
        ("https://example.com", "https://example.com"),
        ("https://example.com/?", "https://example.com"),
        ("https://example.com/a?b=2&a=1", "https://example.com/a?a=1&b=2"),
        ("https://example.com/a?utm_source=x&utm_medium=y&id=7", "https://example.com/a?id=7"),
        ("https://example.com/a?fbclid=1&gclid=2&yclid=3&id=7", "https://example.com/a?id=7"),
        ("https://example.com/a?mc_cid=1&mc_eid=2&ref=hn&ref_src=tw", "https://example.com/a"),
        ("https://example.com/a?UTM_Campaign=x", "https://example.com/a"),
        ("https://example.com/%7Euser/%61bc", "https://example.com/~user/abc"),
        ("https://example.com/a%2fb", "https://example.com/a%2Fb"),
        ("https://example.com/a b", "https://example.com/a%20b"),
        ("  https://example.com/a  ", "https://example.com/a"),
        ("example.com/a", "https://example.com/a"),
        ("//example.com/a", "https://example.com/a"),
        ("https://пример.рф/путь", "https://xn--e1afmkfd.xn--p1ai/%D0%BF%D1%83%D1%82%D1%8C"),
        ("https://user:secret@example.com/a", "https://example.com/a"),
    ],
)
def test_normalize_url(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


@pytest.mark.parametrize(
    "variant",
    [
        "http://www.arxiv.org/abs/2310.15961/?utm_source=google#page=2",
        "https://arxiv.org/abs/2310.15961",
        "HTTPS://ARXIV.ORG:443/abs/2310.15961/",
    ],
)
def test_variants_of_one_page_share_a_key(variant: str) -> None:
    assert normalize_url(variant) == normalize_url("https://arxiv.org/abs/2310.15961")


def test_raw_and_escaped_cyrillic_paths_share_a_key() -> None:
    raw = "https://ru.wikipedia.org/wiki/Токенизация"
    escaped = (
        "https://ru.wikipedia.org/wiki/%d0%a2%d0%be%d0%ba%d0%b5%d0%bd%d0%b8%d0%b7%d0%b0%d1%86%d0%b8%d1%8f"
    )
    assert normalize_url(raw) == normalize_url(escaped)


def test_different_pages_keep_different_keys() -> None:
    assert normalize_url("https://example.com/a?id=1") != normalize_url("https://example.com/a?id=2")
    assert normalize_url("https://example.com/a") != normalize_url("https://example.com/b")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url", "not a url"),
        ("  Not A URL ", "not a url"),
        ("", ""),
        ("mailto:Someone@Example.com", "mailto:someone@example.com"),
        ("javascript:alert(1)", "javascript:alert(1)"),
        ("https://example.com:99999/a", "https://example.com:99999/a"),
        ("ftp://Example.com/file", "ftp://example.com/file"),
    ],
)
def test_garbage_is_returned_lowered_not_raised(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://arxiv.org/abs/1", "arxiv.org"),
        ("https://www.arxiv.org/abs/1", "arxiv.org"),
        ("https://export.arxiv.org/abs/1", "arxiv.org"),
        ("http://EN.Wikipedia.org/wiki/X", "wikipedia.org"),
        ("https://www.bbc.co.uk/news", "bbc.co.uk"),
        ("https://alice.github.io/blog", "alice.github.io"),
        ("https://habr.com:8080/ru/articles/1", "habr.com"),
        ("http://127.0.0.1:8000/x", "127.0.0.1"),
        ("https://localhost/x", "localhost"),
        ("not a url", ""),
    ],
)
def test_domain_of(url: str, expected: str) -> None:
    assert domain_of(url) == expected
