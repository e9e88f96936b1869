"""The report in the question's language: an LLM answer in the other language is asked for once
more with an explicit instruction, the event log says so (in English and Russian), and when the
second answer misses too, the one with more of the question's language is kept."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.utils import translation

from research.models import LLMCall, RunEvent, Topic
from research.pipeline.replies import language_share, report_language
from tests.research.pipeline.test_citation_report import researched, script_answers
from tests.support.world import World

pytestmark = pytest.mark.django_db

# The question (tests.support.world.TOPIC) is Russian.
ENGLISH = (
    "# Mixture of Tokens\n\n## Introduction\n\nMixture of Tokens mixes tokens from different examples "
    "in groups [1].\n\n## Conclusion\n\nMixture of Tokens avoids discrete routing [1]."
)
RUSSIAN = (
    "# Mixture of Tokens\n\n## Введение\n\nMixture of Tokens смешивает токены (Tokens) разных примеров "
    "в группы [1].\n\n## Заключение\n\nМетод Mixture of Tokens обходится без дискретной маршрутизации [1]."
)
# Wrong again, but with a Russian closing: more of the question's language than ENGLISH.
ENGLISH_MOSTLY = (
    "# Mixture of Tokens\n\n## Introduction\n\nMixture of Tokens mixes tokens from different examples "
    "in groups [1].\n\n## What the sources show\n\nMixture of Tokens avoids discrete routing [1]. "
    "Итог: метод Mixture of Tokens развивается [1]."
)
ASKED_AGAIN = "The report came back in another language than the question's"


def answer_events(topic: Topic) -> list[str]:
    return list(RunEvent.objects.filter(topic=topic, stage="answer").values_list("message", flat=True))


# --- Telling the report's language --------------------------------------------------------------------


def test_a_russian_report_quoting_english_sources_is_russian() -> None:
    """Quoted abstracts, English terms, titles, URLs and citations do not make a report English:
    its own words do."""
    report = (
        "# CRISPR\n\n## Введение\n\nЭтот обзор собран по 4 источникам.\n\n## Что показывают источники\n\n"
        "Here we show that CRISPR interference prevents conjugation and plasmid transformation in "
        "S. epidermidis [1]. Reliable genome editing via CRISPR/Cas9 may provide a means to correct "
        "inherited diseases [2]. See https://example.org/crispr-cas9-gene-editing-in-vivo-results.\n\n"
        "## Заключение\n\nИсточники согласуются не во всем."
    )
    assert report_language(report) == "ru"
    assert report_language(report.replace("Введение", "Introduction").replace("Заключение", "Conclusion")
                           .replace("Что показывают источники", "What the sources show")) == "en"  # fmt: skip


def test_without_headings_the_own_words_decide_and_quotations_do_not_count() -> None:
    prose = (
        "Метод CRISPR-Cas9 позволяет редактировать геном [1]; авторы пишут: «Reliable genome editing "
        "via CRISPR may provide a means to correct inherited diseases in patients» [2]. "
        "Подробнее — в [Genome editing review](https://example.org/a-very-long-english-path-name)."
    )
    assert report_language(prose) == "ru"
    assert report_language("Mixture of Tokens mixes tokens from different examples in groups [1].") == "en"
    assert report_language("# CRISPR-Cas9\n\n[1] [2]") is None  # too few letters to tell
    assert language_share(ENGLISH_MOSTLY, "ru") > language_share(ENGLISH, "ru") == 0.0


# --- In the run -------------------------------------------------------------------------------------------


def test_an_answer_in_the_wrong_language_is_asked_again_with_an_explicit_instruction(
    alice: User, loopback: World
) -> None:
    requests = script_answers(loopback, ENGLISH, RUSSIAN)
    topic = researched(alice)
    assert len(requests) == 2
    assert "на языке: русский" in requests[1] and "на языке: русский" not in requests[0]
    markdown = topic.report.markdown
    assert "## Введение" in markdown and "## Introduction" not in markdown
    lines = answer_events(topic)
    assert any(line.startswith(ASKED_AGAIN) for line in lines), lines
    assert "The second answer is in the question's language: it is kept" in lines
    warned = RunEvent.objects.get(topic=topic, stage="answer", message__startswith=ASKED_AGAIN)
    assert warned.level == RunEvent.Level.WARNING
    assert (warned.data["question_language"], warned.data["report_language"]) == ("ru", "en")
    assert LLMCall.objects.filter(topic=topic, stage="answer").count() == 2


def test_when_the_second_answer_misses_too_the_one_with_more_of_the_language_is_kept(
    alice: User, loopback: World
) -> None:
    requests = script_answers(loopback, ENGLISH, ENGLISH_MOSTLY)
    topic = researched(alice)
    assert len(requests) == 2  # one retry, never more
    assert "Итог: метод Mixture of Tokens развивается" in topic.report.markdown
    lines = answer_events(topic)
    assert "The second answer is not in the question's language either: kept the one with more of it" in lines


def test_a_less_wrong_first_answer_stays(alice: User, loopback: World) -> None:
    requests = script_answers(loopback, ENGLISH_MOSTLY, ENGLISH)
    topic = researched(alice)
    assert len(requests) == 2
    assert "Итог: метод Mixture of Tokens развивается" in topic.report.markdown


def test_an_answer_in_the_question_s_language_is_not_asked_again(alice: User, loopback: World) -> None:
    requests = script_answers(loopback, RUSSIAN, ENGLISH)
    topic = researched(alice)
    assert len(requests) == 1
    assert not any(line.startswith(ASKED_AGAIN) for line in answer_events(topic))


def test_the_event_lines_read_in_russian() -> None:
    msgids = (
        "The report came back in another language than the question's: asking the LLM once more, "
        "in the question's language",
        "The second answer is in the question's language: it is kept",
        "The second answer is not in the question's language either: kept the one with more of it",
    )
    with translation.override("ru"):
        for msgid in msgids:
            assert translation.gettext(msgid) != msgid, msgid
