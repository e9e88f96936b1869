"""The event log is written once by the worker, in English, and read in the reader's language."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import translation

from research.archive.checks import _event_data_ok
from research.event_text import choice_phrase, phrase
from research.models import RunEvent, Topic
from research.pipeline.run import plan_topic, run_topic
from research.pipeline.stages.route import category_phrases
from research.progress import record_event
from research.watchers import TopicWatchers
from tests.research.test_views import awaiting
from tests.support.world import TOPIC, World

pytestmark = pytest.mark.django_db

PLANNED = "Planned %(count)s sub-queries"


def page(client: Client, topic: Topic, language: str) -> str:
    response = client.get(reverse("topic_detail", args=[topic.pk]), headers={"accept-language": language})
    assert response.status_code == 200
    return response.content.decode()


def test_an_event_with_arguments_shows_in_the_reader_s_language(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    event = record_event(topic, "plan", PLANNED, args={"count": 3}, done=1, total=1, data={"subqueries": []})
    assert event.message == "Planned 3 sub-queries"  # the admin, API and archives read this
    assert event.data["subqueries"] == []
    assert "Запланировано подзапросов: 3" in page(alice_client, topic, "ru")
    english = page(alice_client, topic, "en")
    assert "Planned 3 sub-queries" in english and "Запланировано" not in english


def test_fixed_phrases_among_the_arguments_are_translated_too(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    why = phrase("round %(round)s is the last allowed", round=2)
    record_event(
        topic, "deep", "Stopped searching after round %(round)s: %(why)s", args={"round": 2, "why": why}
    )
    args = {"domain": choice_phrase(Topic.Domain.FINANCE), "how": phrase("by keywords"), "categories": "news"}
    event = record_event(
        topic, "route", "Domain: %(domain)s (%(how)s); search categories: %(categories)s", args=args
    )
    assert event.message == "Domain: Finance (by keywords); search categories: news"
    html = page(alice_client, topic, "ru")
    assert "Поиск остановлен после раунда 2: раунд 2 — последний допустимый" in html
    assert "Область: Финансы (определено по ключевым словам); категории поиска: news" in html


def test_the_domain_is_stored_as_its_msgid_whatever_language_is_active() -> None:
    with translation.override("ru"):
        assert choice_phrase(Topic.Domain.FINANCE) == {"msgid": "Finance", "args": {}}


def test_old_events_without_a_msgid_still_show(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    record_event(topic, "plan", "Planned 3 sub-queries (written before translation)")
    record_event(topic, "plan", "A row whose data is not ours", data={"i18n": "not a phrase"})
    html = page(alice_client, topic, "ru")
    assert "Planned 3 sub-queries (written before translation)" in html
    assert "A row whose data is not ours" in html


def test_a_broken_translation_falls_back_to_the_english_line(
    alice_client: Client, alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = awaiting(alice)
    record_event(topic, "plan", PLANNED, args={"count": 3})
    gettext = translation.gettext
    for broken in ("Подзапросов: %(число)s", "Подзапросов: %(count)d%", "Подзапросов: %(count)"):
        monkeypatch.setattr(
            translation, "gettext", lambda msgid, b=broken: b if msgid == PLANNED else gettext(msgid)
        )
        html = page(alice_client, topic, "ru")
        assert "Planned 3 sub-queries" in html and "Подзапросов:" not in html


def test_live_lines_are_rendered_in_each_watcher_s_language(alice: User) -> None:
    topic = awaiting(alice)
    event = record_event(topic, "done", "The report is ready", args={})
    watched = TopicWatchers(topic.pk)
    assert "Отчёт готов" in watched.lines([event], "ru")
    assert "The report is ready" in watched.lines([event], "en")


def test_a_whole_run_translates_every_line_it_writes(
    alice_client: Client, alice: User, loopback: World
) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC)
    assert plan_topic(topic.pk) is False
    html = page(alice_client, topic, "ru")
    assert "Запланировано подзапросов: 3" in html
    assert "План ждёт вашей проверки и утверждения" in html
    topic.set_status(Topic.Status.QUEUED)
    assert run_topic(topic.pk) == Topic.Status.COMPLETED
    untranslated = [
        event.message for event in RunEvent.objects.filter(topic=topic) if "i18n" not in event.data
    ]
    assert untranslated == []
    html = page(alice_client, topic, "ru")
    assert "Отчёт готов" in html and "The report is ready" not in html


def test_a_list_of_phrases_is_shown_translated_and_joined(alice_client: Client, alice: User) -> None:
    topic = awaiting(alice)
    categories = category_phrases("news,science,general")
    args = {
        "domain": choice_phrase(Topic.Domain.FINANCE),
        "how": phrase("by keywords"),
        "categories": categories,
    }
    event = record_event(
        topic, "route", "Domain: %(domain)s (%(how)s); search categories: %(categories)s", args=args
    )
    assert event.message == "Domain: Finance (by keywords); search categories: news, science, general"
    assert "категории поиска: новости, наука, общие" in page(alice_client, topic, "ru")
    assert category_phrases("") == [{"msgid": "general", "args": {}}]  # SearXNG's default
    assert _event_data_ok(event.data)  # an archive carries it back in
    assert not _event_data_ok(
        {"i18n": {"msgid": "%(x)s", "args": {"x": [{"msgid": "a", "args": {"b": [1]}}]}}}
    )
