"""Passages, not pages: long pages cut into passages, the relevant ones used and cited."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research.models import Document, Report, Topic
from research.pipeline.passages import (
    LONG_PAGE_CHARS,
    SEPARATOR,
    Passage,
    choose_passages,
    cited_passages,
    excerpt,
    quote,
    split_passages,
    text_fragment_url,
)
from research.pipeline.run import plan_topic, run_topic
from tests.support.deep_world import QUESTION, DeepWorld, deep_world

FILLER = "Backups are copied to a second data centre every night and restored once a month. "


def long_page() -> str:
    sections = [f"## Routine {i}\n\n{FILLER * 12}\n\n{FILLER * 8}" for i in range(1, 9)]
    sections.insert(5, "## Commit rule\n\nA Kestrel block is final once three of four nodes have signed it.")
    return "# Handbook\n\nThe handbook of the Kestrel ledger.\n\n" + "\n\n".join(sections)


def test_passages_cover_the_page_at_their_offsets_under_their_headings() -> None:
    page = long_page()
    passages = split_passages(page, size=1200)
    assert len(passages) > 8
    for passage in passages:
        assert page[passage.start : passage.end] == passage.text
        assert len(passage.text) <= 1200
    assert [p.start for p in passages] == sorted(p.start for p in passages)
    commit = next(p for p in passages if "three of four" in p.text)
    assert commit.heading == "Commit rule" and commit.text.startswith("## Commit rule")
    assert passages[0].heading == "Handbook"


def test_a_paragraph_longer_than_a_passage_is_cut_at_sentence_ends() -> None:
    page = FILLER * 60
    passages = split_passages(page, size=1000)
    assert len(passages) >= 4
    assert all(p.text.rstrip().endswith(".") for p in passages)
    assert "".join(page[p.start : p.end] for p in passages).replace(" ", "") == page.replace(" ", "")


def test_the_passages_about_the_query_are_chosen_in_page_order() -> None:
    page = long_page()
    assert len(page) > LONG_PAGE_CHARS
    chosen = choose_passages(page, "When is a Kestrel block final?", budget=3000)
    assert any("three of four nodes" in p.text for p in chosen)
    assert sum(p.end - p.start for p in chosen) <= 3000
    assert [p.start for p in chosen] == sorted(p.start for p in chosen)
    assert chosen[0].start == 0  # the opening passage says what the page is about


def test_short_pages_are_used_whole_and_unmatched_ones_from_the_top() -> None:
    assert choose_passages("Short page.", "anything", budget=100) == [Passage(0, 11, "", "Short page.")]
    assert choose_passages("", "anything", budget=100) == []
    page = long_page()
    chosen = choose_passages(page, "zebra giraffe", budget=2500)
    assert chosen[0].start == 0 and "three of four" not in excerpt(chosen)


def test_excerpt_quote_and_text_fragment() -> None:
    first = Passage(0, 20, "Intro", "The Kestrel protocol commits in two rounds.")
    second = Passage(
        100, 140, "Commit rule", "## Commit rule\n\nA block is **final** once [signed](http://x)."
    )
    assert excerpt([first, second]) == (
        "§ Intro\n\nThe Kestrel protocol commits in two rounds." + SEPARATOR + second.text
    )
    assert quote(second, words=5) == "A block is final once…"  # the heading is shown apart
    assert text_fragment_url("https://example.org/kestrel", "A well-known block, final.") == (
        "https://example.org/kestrel#:~:text=A%20well%2Dknown%20block%2C%20final."
    )
    assert text_fragment_url("https://example.org/k#top", "A block is final") == "https://example.org/k#top"
    assert text_fragment_url("", "A block is final") == ""


def test_cited_passages_only_for_a_page_that_was_cut() -> None:
    short = Document(title="Kestrel", text="Kestrel commits in two rounds.")
    assert cited_passages(short, QUESTION, 5000) == []
    long = Document(title="Kestrel block finality", text=long_page())
    cited = cited_passages(long, "When is a block final?", 3000)
    assert cited[0]["heading"] == "Commit rule"  # the most relevant passage first
    assert cited[0]["quote"].startswith("A Kestrel block is final")
    assert all(set(c) == {"start", "end", "heading", "quote"} for c in cited)


# --- in a run ---------------------------------------------------------------------------------------


@pytest.fixture
def web(settings: object) -> Iterator[DeepWorld]:
    with deep_world(settings=settings) as w:
        yield w


def summarise_requests(web: DeepWorld) -> list[str]:
    contents = [json.loads(r.body)["messages"] for r in web.llm.requests]
    return [m[-1]["content"] for m in contents if "кратком изложении" in m[0]["content"]]


@pytest.mark.django_db
def test_a_long_page_is_summarised_and_cited_by_its_relevant_passages(
    alice: User, alice_client: Client, web: DeepWorld
) -> None:
    topic = Topic.objects.create(owner=alice, question=QUESTION, auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    handbook = Document.objects.get(topic=topic, url__endswith="/kestrel-handbook")
    assert len(handbook.text) > 20_000  # the whole page is kept
    request = next(text for text in summarise_requests(web) if "Kestrel operations handbook" in text)
    # The commit rule sits past 16,000 characters; the summary saw it and not the whole page.
    assert handbook.text.index("## Commit rule") > 16_000
    assert "three of four nodes have signed" in request and len(request) < 7_000
    assert "three of four nodes have signed" in web.script.answer_requests[-1]
    report = Report.objects.get(topic=topic)
    source = next(s for s in report.sources if s["document_id"] == handbook.pk)
    assert source["passages"][0]["heading"] == "Commit rule"
    line = next(line for line in report.markdown.splitlines() if "kestrel-handbook" in line)
    assert line.startswith(f"{source['n']}. [Kestrel operations handbook](") and " — " in line
    short = next(s for s in report.sources if s["document_id"] != handbook.pk)
    assert short["passages"] == []
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "Passage used" in page and "#:~:text=" in page
