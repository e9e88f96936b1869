"""Mark the query's words in passages, by the stems the keyword index uses.

A word in a passage is marked when it shares a stem with the query (English and Russian
Snowball, stop words dropped, as `mindsearch_stem` makes them), so "routing" finds "routes" and
"токенов" finds "токены". The text is escaped piece by piece before any mark is added.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from django.db import connection
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from retrieval.models import KEYWORD_CONFIG

WORD = re.compile(r"\w+")
HEADING = re.compile(r"^#{1,6}[ \t]+(.*)$")


def highlight_all(query: str, texts: list[str]) -> list[SafeString]:
    """Each text as safe HTML with the words that match the query in <mark>."""
    query_stems = stems_of_text(query)
    if not query_stems:
        return [mark_words(text, lambda _word: False) for text in texts]
    words = {word.lower() for text in texts for word in WORD.findall(text)}
    word_stems = stems_of_words(words)

    def matches(word: str) -> bool:
        return not word_stems.get(word.lower(), set()).isdisjoint(query_stems)

    return [mark_words(text, matches) for text in texts]


def mark_words(text: str, is_match: Callable[[str], bool]) -> SafeString:
    """`text` escaped, every word that `is_match` accepts wrapped in <mark>, and Markdown
    heading lines (as the parsers write DOCX and HTML headings) shown bold without their #s."""
    lines = []
    for line in text.split("\n"):
        heading = HEADING.match(line)
        if heading:
            lines.append(f"<strong>{_mark_line(heading.group(1), is_match)}</strong>")
        else:
            lines.append(_mark_line(line, is_match))
    return mark_safe("\n".join(lines))  # noqa: S308 - every piece was escaped by _mark_line


def _mark_line(line: str, is_match: Callable[[str], bool]) -> str:
    parts: list[str] = []
    position = 0
    for found in WORD.finditer(line):
        parts.append(escape(line[position : found.start()]))
        word = escape(found.group())
        parts.append(f"<mark>{word}</mark>" if is_match(found.group()) else word)
        position = found.end()
    parts.append(escape(line[position:]))
    return "".join(parts)


def stems_of_text(text: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tsvector_to_array(to_tsvector(%s::regconfig, %s))", [KEYWORD_CONFIG, text])
        return set(cursor.fetchone()[0])


def stems_of_words(words: Iterable[str]) -> dict[str, set[str]]:
    """Each (lower-case) word's stems; stop words have none. One query for all of them."""
    words = sorted(words)
    if not words:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT word, tsvector_to_array(to_tsvector(%s::regconfig, word))"
            " FROM unnest(%s::text[]) AS word",
            [KEYWORD_CONFIG, words],
        )
        return {word: set(stems) for word, stems in cursor.fetchall()}
