"""Every report file carries its citation check (issue 29): the Markdown, DOCX and PDF downloads
and the share page mark each unsupported or weakly supported citation in the text, say why in a
numbered note that quotes the closest passage, and give the summary line — in the report's
language, whatever the reader's interface language; the plan is a list and a follow-up's own
search is not in it."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from docx import Document
from pdfminer.high_level import extract_text

from research.models import Citation, FollowUp, Report, ShareLink, SubQuery, Topic
from tests.research.test_views import completed

pytestmark = pytest.mark.django_db

RUSSIAN = (
    "# Смесь токенов\n\n## Введение\n\nМетод смешивает токены разных примеров в группы [1]. "
    "Его придумали в 2019 году на Марсе [1]. Группы обрабатываются экспертами целиком [1].\n"
)
ENGLISH = (
    "# Mixture of Tokens\n\n## Introduction\n\nThe method mixes tokens of different examples in groups [1]. "
    "It was invented on Mars in 2019 [1]. Groups are processed by experts as a whole [1].\n"
)


def checked(owner: User, body: str, question: str, answer: str = "Дальше ничего.") -> Topic:
    topic = completed(owner, body)
    Topic.objects.filter(pk=topic.pk).update(question=question)
    topic.refresh_from_db()
    report = topic.report
    verdicts = [Citation.Verdict.SUPPORTED, Citation.Verdict.UNSUPPORTED, Citation.Verdict.WEAK]
    for index, verdict in enumerate(verdicts):
        Citation.objects.create(
            report=report, sentence_index=index, sentence=f"sentence {index}", n=1, verdict=verdict,
            local_verdict=verdict, method="local", score=0.5,
            passage="Tokens are mixed across examples before the experts see them.",
            note="not in the source: 2019" if verdict == Citation.Verdict.UNSUPPORTED else "",
        )  # fmt: skip
    followup = FollowUp.objects.create(
        topic=topic, position=1, question="Что дальше?", status=FollowUp.Status.COMPLETED,
        answer=answer, searched=True,
        subquery=SubQuery.objects.create(topic=topic, text="поиск для уточнения", origin="followup", round=2),
    )  # fmt: skip
    assert followup.subquery
    return topic


def docx_text(content: bytes) -> tuple[Any, str]:
    document = Document(io.BytesIO(content))
    return document, "\n".join(p.text for p in document.paragraphs)


@pytest.mark.parametrize("interface", ["en", "ru"])
def test_a_russian_report_carries_its_check_in_russian_into_every_file(
    alice_client: Client, alice: User, interface: str
) -> None:
    topic = checked(alice, RUSSIAN, "Что такое смесь токенов?")
    alice_client.cookies["django_language"] = interface
    markdown = alice_client.get(reverse("report_markdown", args=[topic.pk])).content.decode()
    assert "Его придумали в 2019 году на Марсе [1] **(не подтверждено, примечание 1)**." in markdown
    assert "экспертами целиком [1] **(слабо подтверждено, примечание 2)**." in markdown
    assert "в группы [1]. " in markdown  # a supported citation is left as it is
    assert "**Источники подтверждают 1 из 3 ссылок · 1 не подтверждена, 1 подтверждена слабо**" in markdown
    assert "## Ссылки, которые источники подтверждают не полностью" in markdown
    assert (
        "1. **Не подтверждено**, \\[1\\]: “sentence 1” (Слова и эмбеддинги; нет в источнике: 2019)"
        in markdown
    )
    assert "Ближайший фрагмент источника: “Tokens are mixed across examples" in markdown
    # The frame is Russian too, the plan a list without the follow-up's own search.
    assert "Исследование выполнено в MindSearch" in markdown and "Подзапросы:\n>\n> - What is it?" in markdown
    assert "Researched with" not in markdown and "Sub-queries" not in markdown
    plan = markdown.split("Подзапросы:")[1].split("\n\n")[0]
    assert "поиск для уточнения" not in plan
    assert "*Найдено по запросу: поиск для уточнения*" in markdown.split("## Уточняющие вопросы")[1]

    document, text = docx_text(alice_client.get(reverse("report_docx", args=[topic.pk])).content)
    assert "на Марсе [1] (не подтверждено, примечание 1)." in text
    assert "Источники подтверждают 1 из 3 ссылок · 1 не подтверждена, 1 подтверждена слабо" in text
    numbered = [p.text for p in document.paragraphs if p.style.name == "List Number"]
    notes = [text for text in numbered if text.startswith(("Не подтверждено", "Подтверждено слабо"))]
    assert (
        notes[0].startswith("Не подтверждено, [1]: “sentence 1”")
        and "Ближайший фрагмент источника" in notes[0]
    )
    assert notes[1].startswith("Подтверждено слабо, [1]: “sentence 2”")
    bullets = [p.text for p in document.paragraphs if p.style.name == "List Bullet"]
    assert bullets[:3] == ["What is it?", "Where is it used?", "How was it improved?"]  # one paragraph each

    pdf = extract_text(io.BytesIO(alice_client.get(reverse("report_pdf", args=[topic.pk])).content))
    flat = " ".join(pdf.split())
    assert "на Марсе [1] (не подтверждено, примечание 1)" in flat
    assert "[1]не" not in flat and "[1]not" not in flat  # the verdict is not glued onto the number
    assert "Источники подтверждают 1 из 3 ссылок · 1 не подтверждена, 1 подтверждена слабо" in flat
    assert "Ближайший фрагмент источника: “Tokens are mixed" in flat
    assert "Sources" not in flat and "Follow-up" not in flat


def test_an_english_report_downloads_in_english_from_the_russian_interface(
    alice_client: Client, alice: User
) -> None:
    topic = checked(alice, ENGLISH, "What is Mixture of Tokens?")
    alice_client.cookies["django_language"] = "ru"
    markdown = alice_client.get(reverse("report_markdown", args=[topic.pk])).content.decode()
    assert "on Mars in 2019 [1] **(not supported, note 1)**." in markdown
    assert "**1 of 3 citations supported by their sources · 1 not supported, 1 weakly supported**" in markdown
    assert "(Words and embeddings; not in the source: 2019)" in markdown
    assert "Researched with MindSearch" in markdown and "Исследование" not in markdown
    pdf = " ".join(
        extract_text(io.BytesIO(alice_client.get(reverse("report_pdf", args=[topic.pk])).content)).split()
    )
    assert "on Mars in 2019 [1] (not supported, note 1)" in pdf
    assert "1 of 3 citations supported by their sources" in pdf and "Sources" in pdf


def test_the_share_page_shows_the_marks_and_the_summary(alice: User) -> None:
    topic = checked(alice, ENGLISH, "What is Mixture of Tokens?")
    _link, token = ShareLink.issue(topic)
    page = Client().get(reverse("shared_report", args=[token])).content.decode()
    assert "1 of 3 citations supported by their sources" in page
    assert "citation-flag-unsupported" in page and "not in the source: 2019" in page
    assert "Tokens are mixed across examples before the experts see them." in page


def test_a_report_without_a_check_has_no_summary_or_notes(alice_client: Client, alice: User) -> None:
    topic = completed(alice)
    Report.objects.filter(topic=topic).update(created_at=timezone.now())
    markdown = alice_client.get(reverse("report_markdown", args=[topic.pk])).content.decode()
    assert "citations supported" not in markdown and "note 1" not in markdown


RUSSIAN_ANSWER = "Токены смешивают до экспертов [1]. Метод придумали на Луне [2]."
ENGLISH_ANSWER = "Tokens are mixed before the experts [1]. The method was invented on the Moon [2]."


def answered_with_check(owner: User, body: str, question: str, answer: str) -> Topic:
    """A checked report whose follow-up's answer is checked too: [1] supported, its new source
    [2] not (a made-up claim)."""
    topic = checked(owner, body, question, answer)
    followup = topic.followups.get()
    followup.sources = [{"n": 2, "title": "Moon paper", "url": "https://example.org/moon", "document_id": 0}]
    row = {"local_verdict": "supported", "method": "local", "score": 0.5, "coverage": 0.5, "similarity": None}
    followup.citations = [
        {**row, "sentence_index": 0, "sentence": "answer sentence 0", "n": 1, "verdict": "supported",
         "passage": "Tokens are mixed across examples.", "note": ""},
        {**row, "sentence_index": 1, "sentence": "answer sentence 1", "n": 2, "verdict": "unsupported",
         "passage": "The Moon paper says nothing of the method.", "note": "not in the source: 1969"},
    ]  # fmt: skip
    followup.save()
    return topic


def test_a_followups_check_is_carried_into_every_file_in_the_reports_language(
    alice_client: Client, alice: User
) -> None:
    topic = answered_with_check(alice, RUSSIAN, "Что такое смесь токенов?", RUSSIAN_ANSWER)
    alice_client.cookies["django_language"] = "en"
    markdown = alice_client.get(reverse("report_markdown", args=[topic.pk])).content.decode()
    thread = markdown.split("## Уточняющие вопросы")[1]
    # Marked as the report's are, its notes numbered on from the report's two.
    assert "экспертов [1]. Метод придумали на Луне [2] **(не подтверждено, примечание 3)**." in thread
    assert "**Источники подтверждают 1 из 2 ссылок · 1 не подтверждена**" in thread
    assert (
        "- 3\\. **Не подтверждено**, \\[2\\]: “answer sentence 1” "
        "(Слова и эмбеддинги; нет в источнике: 1969). "
        "Ближайший фрагмент источника: “The Moon paper says nothing of the method.”" in thread
    )
    assert "not supported" not in markdown and "citations supported" not in markdown

    _document, text = docx_text(alice_client.get(reverse("report_docx", args=[topic.pk])).content)
    answer = text.split("Уточняющие вопросы")[1]
    assert "на Луне [2] (не подтверждено, примечание 3)." in answer
    assert "Источники подтверждают 1 из 2 ссылок · 1 не подтверждена" in answer
    assert "3. Не подтверждено, [2]: “answer sentence 1”" in answer
    assert "Ближайший фрагмент источника: “The Moon paper says nothing of the method.”" in answer

    pdf = extract_text(io.BytesIO(alice_client.get(reverse("report_pdf", args=[topic.pk])).content))
    flat = " ".join(pdf.split()).split("Уточняющие вопросы")[1]
    assert "на Луне [2] (не подтверждено, примечание 3)" in flat
    assert "[2]не" not in flat and "[2]not" not in flat
    assert "Источники подтверждают 1 из 2 ссылок · 1 не подтверждена" in flat
    assert "Не подтверждено, [2]: “answer sentence 1”" in flat
    assert "Ближайший фрагмент источника: “The Moon paper says nothing of the method.”" in flat


def test_an_english_followups_check_downloads_in_english_from_the_russian_interface(
    alice_client: Client, alice: User
) -> None:
    topic = answered_with_check(alice, ENGLISH, "What is Mixture of Tokens?", ENGLISH_ANSWER)
    alice_client.cookies["django_language"] = "ru"
    markdown = alice_client.get(reverse("report_markdown", args=[topic.pk])).content.decode()
    thread = markdown.split("## Follow-up questions")[1]
    assert "on the Moon [2] **(not supported, note 3)**." in thread
    assert "**1 of 2 citations supported by their sources · 1 not supported**" in thread
    assert "(Words and embeddings; not in the source: 1969)" in thread
    _document, text = docx_text(alice_client.get(reverse("report_docx", args=[topic.pk])).content)
    assert "on the Moon [2] (not supported, note 3)." in text.split("Follow-up questions")[1]
    pdf = " ".join(
        extract_text(io.BytesIO(alice_client.get(reverse("report_pdf", args=[topic.pk])).content)).split()
    )
    thread = pdf.split("Follow-up questions")[1]
    assert "on the Moon [2] (not supported, note 3)" in thread
    assert "1 of 2 citations supported by their sources · 1 not supported" in thread
