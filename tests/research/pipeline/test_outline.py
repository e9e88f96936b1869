"""The report's outline and length as part of the plan (issue 30; research/pipeline/outline.py,
research/pipeline/stages/answer/sections.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from research import workflow
from research.models import Citation, Document, LLMCall, Report, RunEvent, Topic
from research.pipeline import citecheck, outline
from research.pipeline.run import plan_topic, run_topic
from research.pipeline.stages.answer import sections
from tests.support.world import TOPIC, World

pytestmark = pytest.mark.django_db
ADDED = "Открытые вопросы"


def planned(owner: User, **fields: Any) -> Topic:
    topic = Topic.objects.create(owner=owner, question=TOPIC, **fields)
    plan_topic(topic.pk)
    topic.refresh_from_db()
    return topic


def headings(markdown: str) -> list[str]:
    return re.findall(r"^## (.+)$", markdown, re.M)


def section_bodies(markdown: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", markdown, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def approve_reordered(client: Client, topic: Topic) -> list[str]:
    """On the plan review page: the proposed sections reversed and one added, approved."""
    page = client.get(reverse("topic_detail", args=[topic.pk]))
    shown = re.findall(r'name="section" value="([^"]*)"', page.content.decode())
    assert shown == topic.outline and len(shown) >= 3
    wanted = [*reversed(shown), ADDED]
    form: dict[str, Any] = {
        "plan_version": topic.plan_version(),
        "outline_shown": "1",
        "section": list(reversed(shown)),
        "new_section": ADDED,
        "report_length": "short",
        **{f"text-{sq.pk}": sq.text for sq in topic.subqueries.all()},
    }
    answer = client.post(reverse("plan_approve", args=[topic.pk]), form)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    topic.refresh_from_db()
    assert topic.outline == wanted and topic.report_length == "short"
    return wanted


@pytest.mark.parametrize("with_llm", [True, False], ids=["llm", "extractive"])
def test_reordered_sections_and_an_added_one_give_exactly_those_sections_each_checked(
    alice: User, alice_client: Client, loopback: World, settings: Any, with_llm: bool
) -> None:
    if not with_llm:
        settings.AITUNNEL_API_KEY = ""
    topic = planned(alice, report_kind="detailed")
    # The plan proposes the sections: the kind's frame around the sub-queries, in Russian.
    assert topic.outline[0] == "Обзор" and topic.outline[-1] == "Выводы"
    assert len(topic.outline) == 2 + topic.subqueries.count()
    wanted = approve_reordered(alice_client, topic)
    run_topic(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED, topic.error
    report = Report.objects.get(topic=topic)
    assert headings(report.markdown) == [*wanted, "Источники"]
    bodies = section_bodies(report.markdown)
    citations = list(Citation.objects.filter(report=report))
    numbers = {s["n"] for s in report.sources}
    assert numbers == set(range(1, len(report.sources) + 1))  # one numbering for the whole report
    for title in wanted:
        cited = {int(n) for n in re.findall(r"\[(\d+)\]", bodies[title])}
        if not with_llm and bodies[title].strip() == sections.nothing_new(TOPIC):
            # The loopback world's five small pages: the extractive engine, two sentences a source,
            # has said them all before the last section, which says so rather than repeat them.
            assert title == wanted[-1], (title, bodies)
            continue
        assert cited and cited <= numbers, (title, bodies[title])
        # Each section's citations were checked: a verdict for every cited sentence of it.
        assert any(c.sentence and c.sentence[:30] in " ".join(bodies[title].split()) for c in citations), (
            title
        )
    assert {c.n for c in citations} <= numbers
    # Each verdict is stored at its sentence's place in the whole report (the page marks it there).
    body = report.markdown.split("\n## Источники")[0]

    # No section repeats a sentence another has said.
    def sentence_keys(text: str) -> set[str]:
        found = re.findall(r"[^.!?\n]+[.!?]*", re.sub(r"\[\d+\]", " ", text))
        keys = {" ".join(re.findall(r"\w+", sentence.lower())) for sentence in found}
        return {key for key in keys if len(key.split()) >= 5}

    keys = [sentence_keys(bodies[title]) for title in wanted]
    earlier = [set().union(*keys[:i]) for i in range(len(keys))]
    repeated = [
        (title, sorted(own & before))
        for title, own, before in zip(wanted, keys, earlier, strict=True)
        if own & before
    ]
    assert not repeated, repeated
    spans = citecheck.sentence_spans(body)
    for c in citations:
        start, end = spans[c.sentence_index]
        assert citecheck.plain_claim(body[start:end]) == c.sentence
    if with_llm:
        assert loopback.script.calls["section"] == len(wanted)
        assert report.model
    else:
        assert not report.model


@pytest.mark.django_db(transaction=True)
def test_long_says_more_than_short_from_more_evidence_said_once(alice: User, settings: Any) -> None:
    """On the evaluation world (bench/evidence.py --lengths short,long, one question): the long
    report has many more words than the short one, finds no fewer facts, repeats no sentence and
    has no larger share of citations found unsupported. The loopback world's five small pages are all
    said by a short report already, so it cannot tell."""
    from bench.evidence import _repeated, report_body
    from tests.support.evidence_world import Mistakes, evidence_world

    figures = {}
    # Without the stand-in's planted claims: one topic's few are chance, not the writer's doing.
    with evidence_world(mistakes=Mistakes.none()) as world:
        for name, value in world.settings().items():
            setattr(settings, name, value)
        question = next(q for q in world.web.questions if q.id == "breast-cancer")
        for length in ("short", "long"):
            topic = Topic.objects.create(
                owner=alice,
                question=question.text,
                auto_approve=True,
                report_kind="detailed",
                report_length=length,
            )
            assert plan_topic(topic.pk)
            run_topic(topic.pk)
            report = Report.objects.get(topic=topic)
            body = report_body(report.markdown)
            checked = Citation.objects.filter(report=report)
            figures[length] = {
                "pages read": Document.objects.filter(topic=topic).count(),
                "words": len(body.split()),
                "facts": len(question.facts_in(body)),
                "repeated": _repeated(body),
                "unsupported": checked.filter(verdict="unsupported").count() / max(1, checked.count()),
            }
    short, long = figures["short"], figures["long"]
    # Long reads twice the pages per sub-query (read.pages_per_subquery): the more it says comes
    # from more pages.
    assert long["pages read"] > short["pages read"], figures
    assert long["words"] >= 1.5 * short["words"], figures
    assert long["facts"] >= short["facts"] and long["repeated"] == short["repeated"] == 0, figures
    assert long["unsupported"] <= short["unsupported"], figures


@pytest.mark.django_db(transaction=True)
def test_a_section_the_model_answers_empty_says_it_has_nothing_new(alice: User, settings: Any) -> None:
    """A model that finishes a section without a word found nothing worth saying in its
    passages: the section says so, rather than have the extractive engine quote the sentences
    the model passed over (a digest's other abstracts, a page's date line), and the run does not
    count it as the LLM failing. It is asked once — the client does not retry it as a failure
    (each retry a prompt paid for) — and its tokens are counted as the endpoint told them."""
    from tests.support.evidence_world import Mistakes, evidence_world

    asked: list[str] = []
    with evidence_world(mistakes=Mistakes.none()) as world:
        for name, value in world.settings().items():
            setattr(settings, name, value)
        question = next(q for q in world.web.questions if q.id == "malaria")
        write = world.script.section

        def section(user: str, system: str) -> str:
            if "Раздел: Conclusions" in user:
                asked.append(user)
                return ""
            return write(user, system)

        world.script.section = section  # type: ignore[method-assign]
        topic = Topic.objects.create(
            owner=alice, question=question.text, auto_approve=True, report_kind="detailed"
        )
        assert plan_topic(topic.pk)
        run_topic(topic.pk)
    report = Report.objects.get(topic=topic)
    bodies = section_bodies(report.markdown.split("\n## Sources")[0])
    assert bodies["Conclusions"].strip() == sections.nothing_new(question.text), bodies["Conclusions"]
    assert re.search(r"\[\d+\]", bodies["Overview"]), bodies  # the other sections as they were
    assert not RunEvent.objects.filter(topic=topic, message__contains="could not write a section").exists()
    assert len(asked) == 1, len(asked)
    # Its call is one call paid like the others: no failed row of no tokens among them.
    calls = LLMCall.objects.filter(topic=topic, stage="answer", cache_hit=False)
    assert calls.count() >= len(bodies), calls.count()  # a call per section at least
    assert [(c.error, c.attempts, c.prompt_tokens > 0) for c in calls] == [("", 1, True)] * calls.count()


def test_a_plan_in_one_pass_proposes_no_sections_and_the_user_may_add_them(alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC, status=Topic.Status.AWAITING_APPROVAL)
    workflow.set_outline(topic, ["Что это", "Где применяется"], "1500")
    topic.refresh_from_db()
    assert topic.outline == ["Что это", "Где применяется"] and topic.report_length == "1500"


def test_bad_outlines_and_lengths_are_refused_with_nothing_saved(alice: User) -> None:
    topic = Topic.objects.create(
        owner=alice, question=TOPIC, status=Topic.Status.AWAITING_APPROVAL, outline=["A", "B"]
    )
    for titles, length in (
        (["A", "a"], None),
        (["x" * 201], None),
        ([f"s{i}" for i in range(13)], None),
        (None, "huge"),
        (None, "5"),
    ):
        with pytest.raises(workflow.BadOutline):
            workflow.set_outline(topic, titles, length)
    topic.refresh_from_db()
    assert topic.outline == ["A", "B"] and topic.report_length == ""


def test_the_outline_is_part_of_the_plan_version(alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC, status=Topic.Status.AWAITING_APPROVAL)
    before = topic.plan_version()
    workflow.set_outline(topic, ["A", "B"])
    topic.refresh_from_db()
    assert topic.plan_version() != before
    with pytest.raises(workflow.PlanChanged):
        workflow.approve_plan(topic, workflow.ShownPlan(version=before), queue=False)


def test_outline_kinds_propose_titles_in_the_question_language() -> None:
    assert outline.propose("", "What is X?", ["a"]) == []
    english = outline.propose("review", "What is known about X?", ["What is X?"])
    assert english == [
        "Background",
        "What is X",
        "Where the studies agree and disagree",
        "Gaps and open questions",
    ]
    assert outline.propose("comparison", "Сравни X и Y", ["X"])[0] == "Что сравнивается"
    assert outline.scale_of("3000").words == 3000 and outline.scale_of("long").pool == 2.0


# --- API, console, archive --------------------------------------------------------------------------


def test_the_api_takes_and_shows_the_outline_and_length(alice: User, alice_client: Client) -> None:
    created = alice_client.post(
        "/api/topics",
        {
            "question": "What is MoT?",
            "sources": "docs",
            "report_kind": "comparison",
            "outline": ["Что это", "Где применяется"],
            "report_length": "long",
        },
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["report_kind"], body["outline"], body["report_length"]) == (
        "comparison",
        ["Что это", "Где применяется"],
        "long",
    )
    bad = alice_client.post(
        "/api/topics",
        {"question": "What is MoT?", "sources": "docs", "report_length": "huge"},
        content_type="application/json",
    )
    assert bad.status_code == 422 and "report_length" in bad.content.decode()
    topic = Topic.objects.get(pk=body["id"])
    Topic.objects.filter(pk=topic.pk).update(status=Topic.Status.AWAITING_APPROVAL)
    sq = topic.subqueries.create(text="Что такое MoT?", position=0)
    plan = alice_client.put(
        f"/api/topics/{topic.pk}/plan",
        {
            "subqueries": [{"id": sq.pk, "text": sq.text}],
            "outline": ["Где применяется", "Что это", "Итог"],
            "report_length": "900",
        },
        content_type="application/json",
    )
    assert plan.status_code == 200, plan.content
    assert (
        plan.json()["outline"] == ["Где применяется", "Что это", "Итог"]
        and plan.json()["report_length"] == "900"
    )
    refused = alice_client.put(
        f"/api/topics/{topic.pk}/plan",
        {"subqueries": [{"text": "другое"}], "outline": ["A", "a"]},
        content_type="application/json",
    )
    assert refused.status_code == 422 and "outline" in refused.content.decode()
    assert list(topic.subqueries.values_list("text", flat=True)) == ["Что такое MoT?"]  # nothing saved


def test_the_console_takes_sections_and_length(alice: User, loopback: World) -> None:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command(
        "research",
        TOPIC,
        user="alice",
        yes=True,
        section=["Где применяется", "Что это"],
        length="short",
        stdout=out,
    )
    topic = Topic.objects.get(owner=alice)
    assert topic.outline == ["Где применяется", "Что это"] and topic.report_length == "short"
    assert headings(topic.report.markdown) == ["Где применяется", "Что это", "Источники"]


def test_archives_keep_the_outline_and_refuse_a_bad_one(alice: User, bob: User) -> None:
    from research import archive
    from research.archive import ArchiveError

    topic = Topic.objects.create(
        owner=alice,
        question="Small",
        status=Topic.Status.COMPLETED,
        report_kind="review",
        outline=["Background", "Gaps"],
        report_length="1200",
    )
    data = json.loads(archive.dumps(archive.topic_data(topic)))
    copy = archive.import_topic(data, bob)
    assert (copy.report_kind, copy.outline, copy.report_length) == ("review", ["Background", "Gaps"], "1200")
    for name, value in (
        ("outline", ["A", "a"]),
        ("outline", [3]),
        ("report_length", "-site:x"),
        ("report_kind", "x"),
    ):
        hostile = {**data, "topic": {**data["topic"], name: value}}
        with pytest.raises(ArchiveError):
            archive.import_topic(hostile, bob)


def reviewable(owner: User, titles: list[str]) -> Topic:
    topic = Topic.objects.create(
        owner=owner, question=TOPIC, status=Topic.Status.AWAITING_APPROVAL, outline=titles
    )
    topic.subqueries.create(text="Что такое MoT?", position=0)
    return topic


def test_the_section_buttons_move_delete_and_add_through_the_workflow(
    alice: User, alice_client: Client
) -> None:
    topic = reviewable(alice, ["A", "B", "C"])
    url = reverse("outline_edit", args=[topic.pk])
    base = {"outline_shown": "1", "report_length": ""}
    steps = (
        ({"section": ["A", "B", "C"], "op": "down-0"}, ["B", "A", "C"]),
        ({"section": ["B", "A", "C"], "op": "delete-2"}, ["B", "A"]),
        ({"section": ["B", "A edited"], "op": "up-1", "new_section": ""}, ["A edited", "B"]),
        ({"section": ["A edited", "B"], "op": "add", "new_section": "D"}, ["A edited", "B", "D"]),
    )
    for form, expected in steps:
        answer = alice_client.post(url, {**base, **form}, headers={"HX-Request": "true"})
        assert answer.status_code == 200, answer.content.decode()[:500]
        topic.refresh_from_db()
        assert topic.outline == expected
        assert f'value="{expected[-1]}"' in answer.content.decode()


def test_a_bad_outline_at_approval_is_shown_again_and_nothing_is_approved(
    alice: User, alice_client: Client
) -> None:
    topic = reviewable(alice, ["A", "B"])
    form = {
        "plan_version": topic.plan_version(),
        "outline_shown": "1",
        "section": ["Same", "same"],
        "report_length": "short",
    }
    answer = alice_client.post(reverse("plan_approve", args=[topic.pk]), form)
    assert answer.status_code == 400
    page = answer.content.decode()
    assert 'value="Same"' in page and 'value="same"' in page  # what was typed is not lost
    assert "Раздел повторяется" in page or "A section appears twice" in page
    topic.refresh_from_db()
    assert topic.status == Topic.Status.AWAITING_APPROVAL and topic.outline == ["A", "B"]
    assert topic.report_length == ""


def test_a_report_in_one_pass_is_asked_for_its_length_only_when_one_is_set() -> None:
    from research.pipeline.stages.answer import report_writer

    assert report_writer.length_note(Topic(question="q")) == ""  # the request stays as it was
    assert "около 400 слов" in report_writer.length_note(Topic(question="q", report_kind="brief"))
    assert "около 2500 слов" in report_writer.length_note(Topic(question="q", report_length="long"))
    assert "около 1200 слов" in report_writer.length_note(Topic(question="q", report_length="1200"))


def test_the_russian_names_of_the_lengths_are_taken_as_the_interface_shows_them() -> None:
    assert outline.read_length("«Длинная»") == "long"
    assert outline.read_length("короткий") == "short"
    assert outline.read_length(" Стандартная ") == "standard"
    assert outline.read_length("800") == "800"
    with pytest.raises(outline.OutlineError):
        outline.read_length("огромная")


def test_a_section_is_given_fresh_passages_before_those_an_earlier_section_had() -> None:
    from research.models import Document
    from research.pipeline.stages.answer import sections

    both = "Tokens mixing groups. " * 6
    documents = [
        Document(text=both),
        Document(text="Groups of experts route tokens between many different layers and devices."),
        *(Document(text=f"Unrelated filler page number {i} about weather.") for i in range(4)),
    ]
    one = outline.Scale(words=100, evidence_chars=1, sources=1, sentences=1, pool=1.0)
    first, second = sections.evidence("tokens mixing", documents, ["mixing", "groups"], one)
    assert list(first) == [0]
    assert list(second) == [1]  # not the first section's passage again, though it ranks higher


def test_a_sentence_said_in_an_earlier_section_is_not_said_again() -> None:

    said = sections.sentence_keys("Mixture of Tokens mixes tokens in groups. [1] Too short. [2]")
    body = (
        "Mixture of tokens mixes tokens in groups [3]. A new fact about the model is here. [2] "
        "Too short. [1]\n\n- Mixture of Tokens mixes tokens in groups. [4]\n- Another new listed "
        "fact stands here. [1]\n\n### Its own heading\n\nA new fact about the model is here. [5]"
    )
    assert sections.unsaid(body, said) == (
        "A new fact about the model is here. [2] Too short. [1]\n\n"
        "- Another new listed fact stands here. [1]\n\n### Its own heading"
    )
    # Nothing new at all: nothing is left (the section then says it has nothing new to add).
    assert sections.unsaid("Mixture of Tokens mixes tokens in groups. [2]", said) == ""
    assert "nothing" in sections.nothing_new("What is it?") and "ничего" in sections.nothing_new("Что это?")


def test_a_number_with_a_decimal_point_is_not_two_sentences() -> None:

    said = sections.sentence_keys("Four groups had an incidence of 0.1, 0.4, 1.7 and 2.2 per year. [6]")
    # Said again from another page: the whole sentence goes, not all but "1, 0. 4, 1. 7 …".
    body = (
        "Four groups had an incidence of 0.1, 0.4, 1.7 and 2.2 per year. [2] A new fact is stated here. [3]"
    )
    assert sections.unsaid(body, said) == "A new fact is stated here. [3]"


def test_a_later_section_is_not_given_the_source_sentences_earlier_ones_drew_on() -> None:
    from research.pipeline.passages import Passage

    text = (
        "# Trial\n\nThe trial enrolled 512 women aged 40 to 64. Screening cut mortality by 25% after "
        "18 years. Women were invited for three annual reexaminations.\n\nThe benefit was smaller "
        "under 50."
    )
    other = "A second page says one thing only about screening programmes."
    evidence = {1: [Passage(0, len(text), "", text)], 2: [Passage(0, len(other), "", other)]}
    verdict = citecheck.Verdict(
        index=0,
        sentence="Screening lowered mortality by a quarter over 18 years.",
        n=1,
        verdict=citecheck.SUPPORTED,
        score=0.9,
        coverage=0.8,
        similarity=0.9,
        passage="The trial enrolled 512 women aged 40 to 64. Screening cut mortality by 25% after 18 years.",
        method=citecheck.LOCAL,
    )
    unsupported = citecheck.Verdict(
        **{
            **verdict.__dict__,
            "verdict": citecheck.UNSUPPORTED,
            "passage": "The benefit was smaller under 50.",
        }
    )
    # The sentence of the best window that holds the claim's words, not its neighbour; an
    # unsupported claim drew on nothing.
    backed = sections.backing_keys([verdict, unsupported])
    assert backed == {sections.sentence_key("Screening cut mortality by 25% after 18 years.")}
    said = backed | sections.sentence_keys(other)
    left = sections.unused(evidence, said)
    assert list(left) == [1]  # the second page had nothing left
    assert left[1][0].text == (
        "# Trial\n\nThe trial enrolled 512 women aged 40 to 64. Women were invited for three annual "
        "reexaminations.\n\nThe benefit was smaller under 50."
    )
    assert (left[1][0].start, left[1][0].end) == (0, len(text))  # its place on the page is kept
    assert sections.unused(evidence, set()) == evidence


def test_no_section_is_given_more_than_twice_its_share_of_the_passages() -> None:
    from research.models import Document

    documents = [
        Document(text=f"Tokens are mixed in groups, page {i} says, in its own words.") for i in range(6)
    ]
    long = outline.scale_of("long")
    chosen = sections.evidence("tokens mixed groups", documents, ["A", "B", "C"], long)
    # A long budget is more than all six pages: each section gets four, not all six.
    assert [len(section) for section in chosen] == [4, 4, 4]
    assert set().union(*chosen) == set(range(6))  # fresh pages first: every page is used


def test_the_extractive_engine_quotes_no_passage_heading_or_gap() -> None:
    from research.pipeline import extractive

    text = "§ A heading of the page\n\nCats sleep a lot.\n\n[…]\n\n§ Another heading\n\nDogs bark at night."
    # Nothing matches the query, so every sentence would do: but only sentences are quoted.
    assert extractive.extractive_summary(text, "weather", 5) == "Cats sleep a lot. Dogs bark at night."
