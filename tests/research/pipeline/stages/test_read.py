"""Reading chooses the best pages of the whole topic, not the top five of each sub-query.

The hits are rows as the search and hit-scoring stages leave them; the pages come from a loopback
reader speaking r.jina.ai's format. No LLM: summaries are extractive.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from research.models import Document, Hit, HitScore, SubQuery, Topic
from research.pipeline.context import RunContext
from research.pipeline.stages import read
from tests.support.fakes import FakeService, reader

pytestmark = pytest.mark.django_db

# The pages' own address is never fetched: the loopback reader answers for it (a literal loopback
# address, allowed as in every loopback world, so no name has to resolve).
BASE = "http://127.0.0.1:9/pages/"


def page_text(slug: str) -> str:
    return f"# {slug}\n\nThe page {slug} describes Kestrel consensus in detail. " * 3


@pytest.fixture
def web(settings: Any) -> Iterator[FakeService]:
    pages = {f"{BASE}{slug}": (slug, page_text(slug)) for slug in [f"a{i}" for i in range(12)]}
    pages |= {f"{BASE}{slug}": (slug, page_text(slug)) for slug in [f"b{i}" for i in range(9)]}
    with FakeService(fallback=reader(pages)) as service:
        settings.JINA_READER_URL = service.url
        settings.JINA_API_KEY = ""
        settings.MINDSEARCH_ALLOW_PRIVATE_URLS = True
        settings.AITUNNEL_API_KEY = ""
        settings.AITUNNEL_BASE_URL = "https://api.aitunnel.ru/v1/"
        yield service


def add_hits(topic: Topic, subquery: SubQuery, prefix: str, scores: list[float]) -> None:
    for position, score in enumerate(scores):
        url = f"{BASE}{prefix}{position}"
        hit = Hit.objects.create(
            topic=topic, subquery=subquery, url=url, normalized_url=url, title=url, position=position
        )
        HitScore.objects.create(
            hit=hit,
            relevance_to_question=score,
            relevance_to_direction=score,
            completeness=score,
            accuracy=score,
            structure=score,
            total=score,
        )


def read_urls(topic: Topic) -> set[str]:
    return set(Document.objects.filter(topic=topic).values_list("url", flat=True))


def test_the_budget_goes_to_the_best_pages_of_the_topic(alice: User, web: FakeService) -> None:
    topic = Topic.objects.create(owner=alice, question="How does Kestrel consensus work?")
    rich = SubQuery.objects.create(topic=topic, position=0, text="Kestrel consensus")
    thin = SubQuery.objects.create(topic=topic, position=1, text="Kestrel history")
    add_hits(topic, rich, "a", [9, 9, 9, 8, 8, 8, 8, 8])  # eight good pages
    add_hits(topic, thin, "b", [6, 2, 1, 1, 1, 1])  # one fair page, then noise
    read.run(RunContext.for_topic(topic))
    urls = read_urls(topic)
    # Ten pages (five per sub-query): all eight good ones, the fair one and the best of the rest —
    # not five good ones and five of the second sub-query's noise.
    assert len(urls) == 10
    assert {f"{BASE}a{i}" for i in range(8)} <= urls
    assert f"{BASE}b0" in urls


def test_every_sub_query_of_the_round_gets_its_best_page_first(alice: User, web: FakeService) -> None:
    topic = Topic.objects.create(owner=alice, question="How does Kestrel consensus work?")
    rich = SubQuery.objects.create(topic=topic, position=0, text="Kestrel consensus")
    weak = SubQuery.objects.create(topic=topic, position=1, text="Kestrel history")
    add_hits(topic, rich, "a", [9] * 12)
    add_hits(topic, weak, "b", [3])
    read.run(RunContext.for_topic(topic))
    assert f"{BASE}b0" in read_urls(topic)  # a direction deep mode can follow from


def test_a_later_round_reads_the_pages_earlier_rounds_found_but_had_no_place_for(
    alice: User, web: FakeService
) -> None:
    topic = Topic.objects.create(owner=alice, question="How does Kestrel consensus work?", mode="deep")
    first = SubQuery.objects.create(topic=topic, position=0, text="Kestrel consensus")
    add_hits(topic, first, "a", [9, 9, 9, 9, 9, 8, 8, 8, 8])
    read.run(RunContext.for_topic(topic))
    assert len(read_urls(topic)) == 5
    # Round 2 asks a new angle whose results are mostly the pages round 1 already found (a URL
    # belongs to the first sub-query that found it), plus one new page of its own.
    second = SubQuery.objects.create(
        topic=topic, position=0, text="Kestrel ballots", round=2, origin=SubQuery.Origin.DEEP
    )
    add_hits(topic, second, "b", [5])
    read.run(RunContext.for_topic(Topic.objects.get(pk=topic.pk)))
    urls = read_urls(topic)
    assert {f"{BASE}a{i}" for i in range(9)} <= urls and f"{BASE}b0" in urls
    # What round 2 read is new in round 2 (deep mode's growth measures it).
    assert Document.objects.filter(topic=topic, round=2).count() == 5
