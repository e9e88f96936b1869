"""Sites to use, prefer and avoid (research/pipeline/sites.py), against a SearXNG stand-in whose
engines ignore `site:` — as many real engines do — so only the filter on results keeps them."""

from __future__ import annotations

from urllib.parse import unquote_plus

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research.models import Document, Hit, Report, SearchQuery, SiteDefaults, Topic
from research.pipeline import sites
from research.pipeline.run import plan_topic, run_topic
from tests.support.fakes import Request, Response, reader_text, searxng_search
from tests.support.world import TOPIC, World

pytestmark = pytest.mark.django_db


HOSTS = {
    "mot-paper": "arxiv.org",
    "mot-blog": "habr.com",
    "mot-uses": "blog.example.com",
    "mot-apps": "www.example.com",
    "mot-improve": "badexample.com",
}


def spread_over_sites(world: World) -> list[str]:
    """The stand-in answers with each page on a host of its own and, like many real engines,
    ignores `site:` operators (it matches the query's other words); the reader serves them."""
    pages = world.script.pages
    urls = {slug: f"https://{HOSTS.get(slug, 'other.net')}/{slug}" for slug, *_ in pages}

    def results(request: Request) -> list[dict]:
        words = set(request.param("q").lower().split())
        found = [page for page in pages if words & set(page[2].split())]
        return [
            {"url": urls[slug], "title": title, "content": text[:120]} for slug, title, _k, _s, text in found
        ]

    world.searxng.routes[("GET", "/search")] = searxng_search(results)
    by_url = {urls[slug]: (title, f"# {title}\n\n{text}") for slug, title, _k, _s, text in pages}
    fallback = world.reader.fallback
    assert fallback is not None

    def read(request: Request) -> Response:
        target = request.raw_path.removeprefix("/")
        if target in by_url:
            title, markdown = by_url[target]
            return Response(200, reader_text(title, target, markdown))
        return fallback(request)

    world.reader.fallback = read
    return list(urls.values())


def research(owner: User, **fields: object) -> Topic:
    topic = Topic.objects.create(owner=owner, question=TOPIC, auto_approve=True, **fields)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def test_site_names_are_read_from_what_people_type() -> None:
    assert sites.clean("https://www.Example.org/path, *.docs.python.org\nхабр.рф") == [
        "example.org",
        "docs.python.org",
        "xn--80ac9br.xn--p1ai",
    ]
    with pytest.raises(ValueError, match="not a site name"):
        sites.clean("example")
    rules = sites.Rules(only=("example.com",), avoid=("blog.example.com",))
    assert rules.verdict("https://www.example.com/a") == ""
    assert rules.verdict("https://blog.example.com/a") == sites.AVOIDED
    assert rules.verdict("https://badexample.com/a") == sites.NOT_ALLOWED
    assert rules.operators() == "site:example.com -site:blog.example.com"
    assert sites.Rules(only=("a.org", "b.org")).operators() == "(site:a.org OR site:b.org)"


def test_an_avoided_site_never_appears_though_the_engines_ignore_site(alice: User, loopback: World) -> None:
    spread_over_sites(loopback)
    topic = research(alice, sites_avoid=["example.com"])
    assert topic.status == Topic.Status.COMPLETED, topic.error
    sent = [unquote_plus(r.raw_path) for r in loopback.searxng.requests]
    assert sent and all("-site:example.com" in q for q in sent)
    hosts = [sites.host_of(url) for url in Hit.objects.filter(topic=topic).values_list("url", flat=True)]
    assert hosts and not any(sites.covers("example.com", host) for host in hosts)
    read = [sites.host_of(d.url) for d in Document.objects.filter(topic=topic)]
    assert read and not any(sites.covers("example.com", host) for host in read)
    report = Report.objects.get(topic=topic)
    assert not any(sites.covers("example.com", sites.host_of(source["url"])) for source in report.sources)
    dropped = [row for q in SearchQuery.objects.filter(subquery__topic=topic) for row in q.dropped]
    assert {row["reason"] for row in dropped} == {sites.AVOIDED}
    # badexample.com is another site: only example.com and its subdomains are avoided.
    assert "badexample.com" in hosts


def test_an_allow_list_keeps_every_source_on_its_sites(
    alice: User, alice_client: Client, loopback: World
) -> None:
    spread_over_sites(loopback)
    topic = research(alice, sites_only=["arxiv.org", "habr.com"])
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert all(
        "(site:arxiv.org OR site:habr.com)" in unquote_plus(r.raw_path) for r in loopback.searxng.requests
    )
    for url in Hit.objects.filter(topic=topic).values_list("url", flat=True):
        assert sites.host_of(url) in {"arxiv.org", "habr.com"}, url
    sources = Report.objects.get(topic=topic).sources
    assert sources and all(sites.host_of(s["url"]) in {"arxiv.org", "habr.com"} for s in sources)
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "dropped by the topic's site rules" in page and "not one of the allowed sites" in page


def test_an_allow_list_that_leaves_nothing_says_so(alice: User, loopback: World) -> None:
    spread_over_sites(loopback)
    topic = research(alice, sites_only=["nowhere.example"])
    messages = " ".join(topic.events.values_list("message", flat=True))
    assert "Your site rules left no web result" in messages
    assert not Hit.objects.filter(topic=topic).exists()
    assert topic.status == Topic.Status.COMPLETED, topic.error  # said, not failed
    report = Report.objects.get(topic=topic).markdown
    assert "nowhere.example" in report and report.startswith(f"# {TOPIC}")


def test_a_preferred_site_is_read_first_among_equals(alice: User, loopback: World) -> None:
    spread_over_sites(loopback)
    plain = research(alice)
    preferred = research(alice, sites_prefer=["www.example.com"])
    assert preferred.status == Topic.Status.COMPLETED, preferred.error
    first = Report.objects.get(topic=plain).sources
    second = Report.objects.get(topic=preferred).sources
    rank = lambda sources: [sites.host_of(s["url"]) for s in sources].index("www.example.com")  # noqa: E731
    assert rank(second) <= rank(first)


def test_the_form_and_the_api_take_site_lists_and_remember_them(alice: User, alice_client: Client) -> None:
    refused = alice_client.post(
        reverse("topic_create"),
        {"question": "Что такое MoT?", "sources": "docs", "mode": "quick", "sites_avoid": "not a site"},
    )
    assert refused.status_code == 400 and "not a site name" in refused.content.decode()
    made = alice_client.post(
        reverse("topic_create"),
        {
            "question": "Что такое MoT?",
            "sources": "docs",
            "mode": "quick",
            "sites_only": "https://arxiv.org/abs/1, habr.com",
            "remember_sites": "on",
        },
    )
    assert made.status_code == 302
    topic = Topic.objects.get(owner=alice)
    assert topic.sites_only == ["arxiv.org", "habr.com"]
    assert SiteDefaults.objects.get(owner=alice).sites_only == ["arxiv.org", "habr.com"]
    assert "arxiv.org, habr.com" in alice_client.get(reverse("home")).content.decode()
    created = alice_client.post(
        "/api/topics",
        {"question": "What is MoT?", "sources": "docs", "sites_avoid": ["www.reddit.com"]},
        content_type="application/json",
    )
    assert created.status_code == 201 and created.json()["sites_avoid"] == ["reddit.com"]
