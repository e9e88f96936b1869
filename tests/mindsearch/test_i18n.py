"""The Russian interface: chosen by the browser or the language switch, and a catalogue in which
every message is translated and compiled (the .mo is committed, so CI needs no gettext)."""

from __future__ import annotations

import gettext
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import translation

from research.models import SubQuery, Topic

LOCALE_DIR = Path(settings.BASE_DIR) / "locale" / "ru" / "LC_MESSAGES"
PO_FILE = LOCALE_DIR / "django.po"
MO_FILE = LOCALE_DIR / "django.mo"


@pytest.fixture(autouse=True)
def back_to_default_language() -> Iterator[None]:
    """A request in Russian leaves Russian active in this thread; later tests expect English."""
    yield
    translation.activate(settings.LANGUAGE_CODE)


# --- The pages --------------------------------------------------------------------------------


def test_sign_in_page_follows_accept_language(db: None) -> None:
    russian = Client().get("/accounts/login/", headers={"accept-language": "ru"}).content.decode()
    assert '<html lang="ru">' in russian
    assert "Ещё нет учётной записи?" in russian
    assert "Зарегистрироваться" in russian
    assert "Перейти к содержимому" in russian
    assert "Пароль" in russian  # Django's own catalogue, for the form's labels
    assert "No account yet?" not in russian

    english = Client().get("/accounts/login/", headers={"accept-language": "en"}).content.decode()
    assert '<html lang="en">' in english
    assert "No account yet?" in english


def test_empty_workspace_in_russian(alice_client: Client) -> None:
    html = alice_client.get("/", headers={"accept-language": "ru"}).content.decode()
    assert "Новая тема" in html
    assert "Ваш вопрос" in html
    assert "Интернет и мои документы" in html  # a choice label from the model
    assert "Тем пока нет" in html
    assert "Выйти" in html
    assert "Start a topic" not in html


def test_topic_list_in_russian(alice_client: Client, alice: User) -> None:
    Topic.objects.create(owner=alice, question="Как работает pgvector?", status=Topic.Status.COMPLETED)
    html = alice_client.get("/", headers={"accept-language": "ru"}).content.decode()
    assert "Мои темы" in html
    assert "Любое состояние" in html
    assert "Завершено" in html
    assert "Completed" not in html


def test_plan_review_in_russian(alice_client: Client, alice: User) -> None:
    topic = Topic.objects.create(
        owner=alice, question="Как работает pgvector?", status=Topic.Status.AWAITING_APPROVAL
    )
    SubQuery.objects.create(topic=topic, position=0, text="индексы HNSW")
    html = alice_client.get(f"/topics/{topic.pk}/", headers={"accept-language": "ru"}).content.decode()
    assert "Ждёт утверждения плана" in html
    assert "Подзапрос 1" in html
    assert "Утвердить и начать исследование" in html
    assert "Журнал событий" in html
    assert "Approve and research" not in html


def test_status_page_in_russian(alice_client: Client) -> None:
    html = alice_client.get("/status/", headers={"accept-language": "ru"}).content.decode()
    assert "Состояние системы" in html
    assert "База данных" in html
    assert "Сервер LLM" in html
    assert "Не настроено" in html


def test_language_switch_and_back(alice_client: Client) -> None:
    response = alice_client.post("/i18n/setlang/", {"language": "ru", "next": "/"})
    assert response.status_code == 302
    assert response["Location"] == "/"
    html = alice_client.get("/").content.decode()
    assert '<html lang="ru">' in html
    assert "Новая тема" in html

    alice_client.post("/i18n/setlang/", {"language": "en", "next": "/"})
    html = alice_client.get("/").content.decode()
    assert '<html lang="en">' in html
    assert "Start a topic" in html
    assert "Новая тема" not in html


def test_language_switch_works_signed_out(db: None) -> None:
    client = Client()
    response = client.post("/i18n/setlang/", {"language": "ru", "next": "/accounts/login/"})
    assert response.status_code == 302
    assert "Ещё нет учётной записи?" in client.get("/accounts/login/").content.decode()


# --- The catalogue ----------------------------------------------------------------------------


@dataclass
class Entry:
    msgid: str = ""
    msgctxt: str | None = None
    msgid_plural: str | None = None
    msgstr: dict[int, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    obsolete: bool = False


def _unquote(text: str) -> str:
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
    return re.sub(r"\\(.)", lambda m: escapes[m.group(1)], text)


def parse_po(path: Path) -> list[Entry]:
    """Just enough of the PO format for a catalogue written by makemessages."""
    entries: list[Entry] = []
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        entry, current = Entry(), None
        for line in block.strip().splitlines():
            if line.startswith("#~"):
                entry.obsolete = True
            elif line.startswith("#,"):
                entry.flags |= {flag.strip() for flag in line[2:].split(",")}
            elif line.startswith("#"):
                continue
            elif match := re.match(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?) "(.*)"$', line):
                keyword, index, value = match.groups()
                current = ("msgstr", int(index or 0)) if keyword.startswith("msgstr") else (keyword, 0)
                _append(entry, current, _unquote(value), start=True)
            elif match := re.match(r'^"(.*)"$', line):
                _append(entry, current, _unquote(match.group(1)), start=False)
        if current is not None:
            entries.append(entry)
    return entries


def _append(entry: Entry, where: tuple[str, int] | None, value: str, *, start: bool) -> None:
    assert where is not None
    name, index = where
    if name == "msgstr":
        entry.msgstr[index] = ("" if start else entry.msgstr[index]) + value
    else:
        setattr(entry, name, ("" if start else getattr(entry, name)) + value)


@pytest.fixture(scope="module")
def entries() -> list[Entry]:
    return parse_po(PO_FILE)


def messages(entries: list[Entry]) -> list[Entry]:
    return [entry for entry in entries if entry.msgid and not entry.obsolete]


def label(entry: Entry) -> str:
    return f"{entry.msgctxt}|{entry.msgid}" if entry.msgctxt else entry.msgid


def test_catalogue_has_the_interface(entries: list[Entry]) -> None:
    assert len(messages(entries)) > 150
    ids = {entry.msgid for entry in entries}
    assert {"Sign in", "My topics", "Report", "Share link", "Worker"} <= ids


def test_header_declares_russian_plurals(entries: list[Entry]) -> None:
    header = next(entry for entry in entries if entry.msgid == "")
    assert "fuzzy" not in header.flags
    assert "Language: ru\n" in header.msgstr[0]
    assert (
        "Plural-Forms: nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4"
        " && (n%100<10 || n%100>=20) ? 1 : 2);"
    ) in header.msgstr[0]


def test_every_message_is_translated_and_none_is_fuzzy(entries: list[Entry]) -> None:
    fuzzy = [label(entry) for entry in entries if "fuzzy" in entry.flags]
    assert fuzzy == []
    obsolete = [label(entry) for entry in entries if entry.obsolete]
    assert obsolete == []
    untranslated = []
    for entry in messages(entries):
        forms = 3 if entry.msgid_plural is not None else 1
        if any(not entry.msgstr.get(index, "").strip() for index in range(forms)):
            untranslated.append(label(entry))
    assert untranslated == []


PLACEHOLDER = re.compile(r"%(?:\([a-z_]+\))?[-+ #0]*\d*(?:\.\d+)?[sdifr]|%%")


def test_translations_keep_their_placeholders(entries: list[Entry]) -> None:
    wrong = []
    for entry in messages(entries):
        if "python-format" not in entry.flags:
            continue
        expected = sorted(PLACEHOLDER.findall(entry.msgid_plural or entry.msgid))
        for text in entry.msgstr.values():
            found = sorted(PLACEHOLDER.findall(text))
            # A singular form may leave the count out (e.g. "один"), but never add or rename one.
            if found != expected and not (entry.msgid_plural and set(found) <= set(expected)):
                wrong.append((label(entry), text))
    assert wrong == []


def test_compiled_catalogue_matches_the_po(entries: list[Entry]) -> None:
    """The committed .mo is what Django reads: it must hold every translation of the .po."""
    with MO_FILE.open("rb") as mo:
        compiled = gettext.GNUTranslations(mo)
    stale = []
    for entry in messages(entries):
        if entry.msgid_plural is None:
            if entry.msgctxt is None:
                got = compiled.gettext(entry.msgid)
            else:
                got = compiled.pgettext(entry.msgctxt, entry.msgid)
            if got != entry.msgstr[0]:
                stale.append(label(entry))
            continue
        # 1, 2 and 5 select Russian's three plural forms.
        for index, n in enumerate((1, 2, 5)):
            if entry.msgctxt is None:
                got = compiled.ngettext(entry.msgid, entry.msgid_plural, n)
            else:
                got = compiled.npgettext(entry.msgctxt, entry.msgid, entry.msgid_plural, n)
            if got != entry.msgstr[index]:
                stale.append(f"{label(entry)}[{index}]")
    assert stale == [], "run `manage.py compilemessages -l ru` and commit django.mo"
