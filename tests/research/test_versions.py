"""Versions of a topic and what changed between two of them (research/versions.py)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from research import versions, workflow
from research.models import Report, ShareLink, SubQuery, Topic

pytestmark = pytest.mark.django_db

SOURCES_BEFORE = [
    {"n": 1, "title": "Rates", "url": "https://a.example/rates", "document_id": None},
    {"n": 2, "title": "History", "url": "https://b.example/history", "document_id": None},
    {"n": 3, "title": "Old news", "url": "https://c.example/old", "document_id": None},
]
SOURCES_AFTER = [
    {"n": 1, "title": "Rates", "url": "https://a.example/rates", "document_id": None},
    {"n": 2, "title": "History", "url": "https://b.example/history", "document_id": None},
    {"n": 3, "title": "New study", "url": "https://d.example/study", "document_id": None},
]
BEFORE = (
    "# Key rate\n\nThe central bank kept the key rate at 16 percent in October [1]. "
    "The rate was first introduced in 2013 to replace the refinancing rate [2]. "
    "Analysts expected no cut before spring [3].\n"
)
AFTER = (
    "# Key rate\n\nIn October the central bank raised the key rate to 17 percent [1]. "
    "It was introduced in 2013, replacing the refinancing rate [2]. "
    "A new study links the rate to mortgage demand falling by a fifth [3].\n"
)


def words_only(texts: list[str]) -> list[list[float]]:
    raise RuntimeError("no embedding model in this test")


def completed(owner: User, markdown: str, sources: list[dict], **fields: object) -> Topic:
    topic = Topic.objects.create(
        owner=owner, question="What is the key rate?", status=Topic.Status.COMPLETED, **fields
    )
    Report.objects.create(topic=topic, markdown=markdown, sources=sources)
    return topic


def test_changes_name_new_changed_and_dropped_claims_and_sources(alice: User) -> None:
    old = completed(alice, BEFORE, SOURCES_BEFORE).report
    new = completed(alice, AFTER, SOURCES_AFTER).report
    changes = versions.compare(old, new)  # the bundled embedding model matches by meaning
    assert [s["url"] for s in changes["sources"]["added"]] == ["https://d.example/study"]
    assert [s["url"] for s in changes["sources"]["dropped"]] == ["https://c.example/old"]
    claims = changes["claims"]
    assert [c["text"] for c in claims["added"]] == [
        "A new study links the rate to mortgage demand falling by a fifth."
    ]
    assert [c["text"] for c in claims["removed"]] == ["Analysts expected no cut before spring."]
    # The rate's number changed; the reworded 2013 sentence is the same claim, not a change.
    assert [(c["before"]["text"], c["after"]["text"]) for c in claims["changed"]] == [
        (
            "The central bank kept the key rate at 16 percent in October.",
            "In October the central bank raised the key rate to 17 percent.",
        )
    ]
    assert claims["added"][0]["sources"] == ["https://d.example/study"]
    assert versions.count(changes) == 5 and changes["empty"] is False


def test_an_unchanged_report_has_no_changes(alice: User) -> None:
    old = completed(alice, BEFORE, SOURCES_BEFORE).report
    new = completed(alice, BEFORE.replace("kept", "held"), SOURCES_BEFORE).report
    changes = versions.compare(old, new)
    assert changes["empty"] is True and versions.count(changes) == 0


def test_without_embeddings_claims_are_matched_by_their_words(alice: User) -> None:
    old = completed(alice, BEFORE, SOURCES_BEFORE).report
    new = completed(alice, BEFORE, SOURCES_BEFORE).report
    assert versions.count(versions.compare(old, new, embed=words_only)) == 0


def test_research_again_makes_a_version_and_the_page_lists_them(alice: User, alice_client: Client) -> None:
    first = completed(alice, BEFORE, SOURCES_BEFORE)
    SubQuery.objects.create(topic=first, position=1, text="key rate")
    second = workflow.rerun_topic(first)
    assert second.pk != first.pk
    assert (second.series, second.previous_version_id) == (first.pk, first.pk)
    second.set_status(Topic.Status.COMPLETED)
    third = workflow.rerun_topic(second)
    assert third.series == first.pk and third.previous_version_id == second.pk
    assert [v["id"] for v in versions.version_list(second)] == [first.pk, second.pk, third.pk]
    page = alice_client.get(reverse("topic_detail", args=[first.pk])).content.decode()
    assert "A newer version exists." in page
    assert f'href="/topics/{third.pk}/"' in page


def test_a_share_link_shows_the_newest_version_unless_pinned(alice: User) -> None:
    first = completed(alice, BEFORE, SOURCES_BEFORE)
    _loose, loose_token = ShareLink.issue(first)
    pinned, pinned_token = ShareLink.issue(first)
    pinned.pinned = True
    pinned.save()
    second = completed(alice, AFTER, SOURCES_AFTER, series=first.pk, previous_version=first)
    anonymous = Client()
    assert "17 percent" in anonymous.get(reverse("shared_report", args=[loose_token])).content.decode()
    assert "16 percent" in anonymous.get(reverse("shared_report", args=[pinned_token])).content.decode()
    # A newer version still running is not shown until it has its report.
    Topic.objects.create(owner=alice, question="q", series=first.pk, previous_version=second)
    assert "17 percent" in anonymous.get(reverse("shared_report", args=[loose_token])).content.decode()


def test_the_owner_sees_which_share_link_is_pinned(alice: User, alice_client: Client) -> None:
    first = completed(alice, BEFORE, SOURCES_BEFORE)
    ShareLink.issue(first)
    pinned, _token = ShareLink.issue(first)
    pinned.pinned = True
    pinned.save()
    page = alice_client.get(reverse("topic_detail", args=[first.pk])).content.decode()
    shows = re.findall(r'data-label="Shows">([^<]+)</td>', page)
    assert sorted(shows) == ["the newest version", "this version"]
    # The box is inside its label, with what it means as the label's title.
    assert re.search(
        r'<label class="check" title="Without it the link shows[^"]*"><input type="checkbox"', page
    )


def test_the_page_shows_what_changed_above_the_report(alice: User, alice_client: Client) -> None:
    first = completed(alice, BEFORE, SOURCES_BEFORE)
    second = completed(alice, AFTER, SOURCES_AFTER, series=first.pk, previous_version=first)
    assert versions.record_changes(second) is not None
    page = alice_client.get(reverse("topic_detail", args=[second.pk])).content.decode()
    assert "Since " in page and "1 new source" in page
    assert "<ins>A new study links the rate to mortgage demand falling by a fifth.</ins>" in page
    assert "<del>Analysts expected no cut before spring.</del>" in page
    # In a card of its own above the report, not loose on the page.
    card = page.split('<div class="card changes-card">', 1)[1]
    assert card.index("Analysts expected") < card.index("</div>") < card.index('id="report"')
    # The marked view: the report itself marks the new claim and the changed one.
    report = page.split('id="report"', 1)[1]
    assert (
        '<ins class="claim-new">A new study links the rate to mortgage demand falling by a fifth</ins>'
        in report
    )
    changed = '<ins class="claim-changed">In October the central bank raised the key rate to 17 percent</ins>'
    assert changed in report
    assert "It was introduced in 2013" in report and report.count("<ins class=") == 2
    # A hostile "what changed" (from an archive) marks nothing and breaks nothing.
    hostile = {"claims": {"added": ["x", {"text": 5}, {"text": '<a href="x">it</a> rate'}], "changed": "y"}}
    assert versions.mark_new_claims("<p>The rate</p>", hostile) == "<p>The rate</p>"


def test_a_later_version_does_not_reuse_old_web_results(alice: User) -> None:
    from research.pipeline import cache

    first = completed(alice, BEFORE, SOURCES_BEFORE)
    key = cache.make_key("page", "https://a.example/rates")
    cache.put(cache.Kind.DOCS, key, {"markdown": "old"})
    second = completed(alice, AFTER, SOURCES_AFTER, series=first.pk, previous_version=first)
    assert first.web_fresh_since is None and second.web_fresh_since is not None
    assert cache.get(cache.Kind.DOCS, key) == {"markdown": "old"}
    assert cache.get(cache.Kind.DOCS, key, newer_than=second.web_fresh_since) is None
    later = second.web_fresh_since + timedelta(seconds=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timezone, "now", lambda: later)
        cache.put(cache.Kind.DOCS, key, {"markdown": "new"})
    assert cache.get(cache.Kind.DOCS, key, newer_than=second.web_fresh_since) == {"markdown": "new"}


def test_the_api_lists_versions_and_carries_what_changed(alice: User, alice_client: Client) -> None:
    first = completed(alice, BEFORE, SOURCES_BEFORE)
    second = completed(alice, AFTER, SOURCES_AFTER, series=first.pk, previous_version=first)
    versions.record_changes(second)
    topic = alice_client.get(f"/api/topics/{second.pk}").json()
    assert (topic["series"], topic["previous_version"]) == (first.pk, first.pk)
    listed = alice_client.get(f"/api/topics/{first.pk}/versions").json()
    assert [(v["number"], v["id"], v["current"]) for v in listed] == [
        (1, first.pk, True),
        (2, second.pk, False),
    ]
    report = alice_client.get(f"/api/topics/{second.pk}/report").json()
    assert report["changes"]["sources"]["added"][0]["url"] == "https://d.example/study"
    assert alice_client.get(f"/api/topics/{first.pk}/report").json()["changes"] is None
