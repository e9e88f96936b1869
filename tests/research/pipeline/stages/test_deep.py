"""Deep mode: rounds that follow what was found, the growth-rate stop, and a report over all rounds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from pytest_django import Settings

from research.models import Document, LLMCall, Report, Round, RunEvent, SubQuery, Topic
from research.pipeline.context import RunContext
from research.pipeline.question_domain import merge_with_question
from research.pipeline.run import plan_topic, run_topic
from research.pipeline.stage import Outcome
from research.pipeline.stages import (
    deep,
    queries,
    read,
    score_hits,
    score_summaries,
    search,
    summarise,
    years,
)
from research.pipeline.stages.deep import (
    Direction,
    Finding,
    Proposal,
    choose,
    growth_rate,
    parse_proposals,
)
from tests.support.deep_world import FACTS, FIRST_ROUND_FACTS, QUESTION, DeepWorld, deep_world, facts_in

# --- pure parts -------------------------------------------------------------------------------------


def test_growth_rate_is_new_over_known_with_a_floor_of_one() -> None:
    assert growth_rate(5, 0) == 5.0  # a first round: its count of finds
    assert growth_rate(2, 5) == 0.4
    assert growth_rate(0, 9) == 0.0


@pytest.mark.parametrize(
    ("growth", "number", "reason"),
    [
        (0.4, 1, ""),
        (0.09, 2, Round.Stop.GROWTH),
        (0.1, 2, ""),
        (3.0, 5, Round.Stop.MAX_ROUNDS),
        (0.0, 5, "growth"),
    ],
)
def test_stop_reason(settings: Settings, growth: float, number: int, reason: str) -> None:
    settings.RESEARCH_DEEP_GROWTH_THRESHOLD = 0.1
    settings.RESEARCH_DEEP_MAX_ROUNDS = 5
    assert deep.stop_reason(growth, number) == reason


def test_proposals_are_read_with_their_scores() -> None:
    answer = (
        "Вот идеи:\n"
        "ПОДЗАПРОС: Что такое Merlin ballot scheme? | ОЦЕНКА: 8\n"
        "- ПОДЗАПРОС: Osprey protocol sharding | Оценка: 9/10\n"
        "ПОДЗАПРОС: Kestrel history\n"
        "ПОДЗАПРОС: | ОЦЕНКА: 7\n"
        "ПОДЗАПРОС: Harrier audit; score = 12"
    )
    assert parse_proposals(answer) == [
        Proposal("Что такое Merlin ballot scheme?", 8.0),
        Proposal("Osprey protocol sharding", 9.0),
        Proposal("Kestrel history", 5.0),
        Proposal("Harrier audit", 10.0),
    ]


def test_proposals_are_chosen_from_one_pool_not_per_answer() -> None:
    # Three sub-queries' answers: the first proposes two strong leads, the others weak ones. A
    # fixed number per answer would take one from each; the pool takes both strong ones first.
    answers = [
        [Proposal("Merlin ballot scheme", 9), Proposal("Osprey protocol", 8)],
        [Proposal("Kestrel logo colours", 2), Proposal("the Osprey protocol?", 7)],  # a repeat
        [Proposal("Kestrel mascot", 1)],
    ]
    pool = [proposal for answer in answers for proposal in answer]
    asked = ["How does the Kestrel consensus protocol work?"]
    chosen = [p.text for p in choose(pool, asked, 3)]
    assert chosen == ["Merlin ballot scheme", "Osprey protocol", "Kestrel logo colours"]
    # What only rephrases an asked sub-query asks nothing new.
    assert choose([Proposal("How does Kestrel consensus protocol work", 9)], asked, 3) == []


def test_proposals_are_merged_with_the_question_subject() -> None:
    assert (
        merge_with_question("Merlin ballot scheme", QUESTION)
        == "Merlin ballot scheme — Kestrel consensus protocol"
    )
    assert (
        merge_with_question("Kestrel consensus protocol history", QUESTION)
        == "Kestrel consensus protocol history"
    )
    russian = "Расскажи об Mixture of Tokens, в том числе где используется и какие есть улучшения"
    assert merge_with_question("transition tuning", russian) == "transition tuning — Mixture of Tokens"


def test_keyword_proposals_follow_new_names_close_to_the_question() -> None:
    kestrel = "Kestrel is a consensus protocol. Its leader election comes from the Merlin ballot scheme."
    birds = "Falcons eat voles in the Nordvik valley. Voles breed fast."
    learned = [
        Direction(
            "How does the Kestrel consensus protocol work?",
            [Finding("Kestrel", "", 9.0, kestrel), Finding("Birds", "", 2.0, birds)],
        )
    ]
    proposals = deep.keyword_proposals(QUESTION, learned, ["How does the Kestrel consensus protocol work?"])
    assert proposals[0] == Proposal("Merlin", 4.5)  # a name, on the page most about the question
    assert {p.text for p in proposals} == {"Merlin", "Nordvik", "Voles breed fast"}
    assert proposals[-1].text == "Voles breed fast"  # a run of words counts less than a name


def test_novel_phrase() -> None:
    known = {"kestrel", "consensu", "protocol"}
    assert deep.novel_phrase("Kestrel moved to the Osprey protocol in 2019.", known) == ("Osprey", True)
    assert deep.novel_phrase("Then the Gannet Scheduler of Nordvik ran.", known) == (
        "Gannet Scheduler of Nordvik",
        True,
    )
    # A capital that only starts the sentence is no name; the longest run of new words is used.
    assert deep.novel_phrase("Backups are copied every night.", known) == ("copied every night", False)
    assert deep.novel_phrase("Kestrel protocol.", known) == ("", False)


# --- whole runs against the Kestrel web -------------------------------------------------------------


@pytest.fixture
def web(settings: Settings) -> Iterator[DeepWorld]:
    with deep_world(settings=settings) as w:
        yield w


def research(owner: User, mode: str, question: str = QUESTION) -> Topic:
    topic = Topic.objects.create(owner=owner, question=question, mode=mode, auto_approve=True)
    if plan_topic(topic.pk):
        run_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def found_facts(topic: Topic) -> set[str]:
    return set().union(
        *(facts_in(text) for text in Document.objects.filter(topic=topic).values_list("text", flat=True))
    )


@pytest.mark.django_db
def test_deep_mode_finds_more_and_stops_by_itself(alice: User, web: DeepWorld) -> None:
    quick = research(alice, Topic.Mode.QUICK)
    assert quick.status == Topic.Status.COMPLETED, quick.error
    assert found_facts(quick) == FIRST_ROUND_FACTS and not quick.rounds.exists()

    topic = research(alice, Topic.Mode.DEEP)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert found_facts(topic) == set(FACTS) > found_facts(quick)
    rounds = list(topic.rounds.order_by("number"))
    # Round 2 follows the leads of round 1 (Merlin, Osprey), round 3 theirs (Harrier, Gannet);
    # round 4 finds nothing new, and the growth rule ends the search before the fifth round.
    assert [r.number for r in rounds] == [1, 2, 3, 4]
    assert [r.new_documents for r in rounds] == [5, 2, 2, 0]
    assert [r.known_documents for r in rounds] == [0, 5, 7, 9]
    assert [round(r.growth_rate, 2) for r in rounds] == [5.0, 0.4, 0.29, 0.0]
    assert [r.stop_reason for r in rounds] == ["", "", "", Round.Stop.GROWTH]
    second = list(topic.subqueries.filter(round=2).values_list("text", "origin"))
    assert second[0] == ("Merlin ballot scheme — Kestrel consensus protocol", SubQuery.Origin.DEEP)
    assert "Osprey protocol — Kestrel consensus protocol" in {text for text, _ in second}
    assert {text for text, _ in topic.subqueries.filter(round=3).values_list("text", "origin")} >= {
        "Harrier audit — Kestrel consensus protocol",
        "Gannet scheduler — Kestrel consensus protocol",
    }


@pytest.mark.django_db
def test_the_deep_report_covers_every_round_sites_spread_first(alice: User, web: DeepWorld) -> None:
    topic = research(alice, Topic.Mode.DEEP)
    report = Report.objects.get(topic=topic)
    documents = Document.objects.in_bulk([source["document_id"] for source in report.sources])
    rounds_cited = {documents[source["document_id"]].round for source in report.sources}
    assert rounds_cited == {1, 2, 3}  # round 4 found nothing relevant
    hosts = [source["url"].split("/")[2] for source in report.sources]
    # Eight sites, each once, before the shared site's second page fills a free place: the cap
    # is a preference, so the fact only that page holds reaches the answer too.
    assert len(set(hosts)) == 8 and len(hosts) == 9
    assert facts_in(web.script.answer_requests[-1]) == set(FACTS)


@pytest.mark.django_db
def test_rounds_show_live_as_events_and_on_the_page(
    alice: User, alice_client: Client, web: DeepWorld
) -> None:
    topic = research(alice, Topic.Mode.DEEP)
    events = RunEvent.objects.filter(topic=topic, stage="deep").order_by("seq")
    growth = [e.data["growth"] for e in events if "growth" in e.data]
    assert growth == [5.0, 0.4, 0.286, 0.0]
    assert [e.data["round"] for e in events if "subqueries" in e.data] == [2, 3, 4]
    assert "Stopped searching after round 4: growth 0.00 is under 0.1" in events.latest("seq").message
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert 'id="round-4"' in page and "0.29" in page and "Little new was found" in page


@pytest.mark.django_db
def test_max_rounds_stops_a_search_that_keeps_growing(
    alice: User, web: DeepWorld, settings: Settings
) -> None:
    settings.RESEARCH_DEEP_MAX_ROUNDS = 2
    topic = research(alice, Topic.Mode.DEEP)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert list(topic.rounds.values_list("number", "stop_reason")) == [(1, ""), (2, Round.Stop.MAX_ROUNDS)]
    assert not topic.subqueries.filter(round=3).exists()


@pytest.mark.django_db
def test_a_deep_run_that_died_between_rounds_resumes_in_its_round(alice: User, web: DeepWorld) -> None:
    topic = Topic.objects.create(owner=alice, question=QUESTION, mode=Topic.Mode.DEEP, auto_approve=True)
    plan_topic(topic.pk)
    ctx = RunContext.for_topic(Topic.objects.get(pk=topic.pk))
    for stage in (queries, search, years, score_hits, read, summarise, score_summaries):
        stage.run(ctx)
    assert deep.run(ctx) is Outcome.ANOTHER_ROUND  # round 2 planned; then the worker died
    calls = LLMCall.objects.filter(topic=topic).count()
    expands = web.script.calls["expand"]
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    assert list(topic.rounds.values_list("number", flat=True)) == [1, 2, 3, 4]
    # Round 1 was not measured or expanded again, and nothing from round 1 was asked again.
    assert LLMCall.objects.filter(topic=topic, stage="plan").count() == 1
    assert web.script.calls["expand"] == expands + 2 + 2  # rounds 2 and 3 each expand two sub-queries
    assert LLMCall.objects.filter(topic=topic).count() > calls


@pytest.mark.django_db
def test_deep_mode_without_an_llm_follows_names_by_keywords(
    alice: User, web: DeepWorld, settings: Settings
) -> None:
    settings.AITUNNEL_API_KEY = ""
    settings.AITUNNEL_BASE_URL = "https://api.aitunnel.ru/v1/"
    quick = research(alice, Topic.Mode.QUICK)
    topic = research(alice, Topic.Mode.DEEP)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert not web.llm.requests
    assert found_facts(topic) > found_facts(quick)
    last = topic.rounds.latest("number")
    assert last.stop_reason in (Round.Stop.GROWTH, Round.Stop.NO_QUERIES) and last.number < 5
