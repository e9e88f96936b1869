"""The report's shape, part of the plan (issue 30): its kind, its sections and its target length.

A topic with an outline (`Topic.outline`, section titles in order) gets a report written section by
section (`stages/answer/sections.py`), each from the passages most about that section; a topic
without one gets the report written in one pass, as before. The plan stage proposes an outline for
the kinds that have one (`propose`): the sub-queries become the middle sections, framed by the
kind's own sections, in the question's language. The user edits, reorders, adds and deletes
sections on the plan review page, through `research.workflow` like every other plan edit.

The target length is "short", "standard" (the default, also ""), "long" or a number of words
(`read_length`). It sets the words asked of each section and how much evidence each section is
given (`Scale`): a long report is long because each section is given more to say.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_lazy as _

from research.pipeline.replies import is_russian

# The kinds a user picks from; "" is the report in one pass, as before.
KINDS: dict[str, object] = {
    "": _("Report in one pass"),
    "brief": _("Brief answer"),
    "detailed": _("Detailed report"),
    "review": _("Literature review"),
    "comparison": _("Comparison"),
}
# The kinds whose report is written section by section from a proposed outline.
SECTIONED_KINDS = ("detailed", "review", "comparison")
LENGTHS: dict[str, object] = {
    "short": _("Short"),
    "standard": _("Standard"),
    "long": _("Long"),
}
MAX_SECTIONS = 12
MAX_TITLE_CHARS = 200
MIN_WORDS, MAX_WORDS = 100, 20_000

# The kind's own sections around the sub-queries: (before, after), Russian and English.
_FRAMES: dict[str, dict[bool, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "detailed": {
        True: (("Обзор",), ("Выводы",)),
        False: (("Overview",), ("Conclusions",)),
    },
    "review": {
        True: (
            ("Предыстория вопроса",),
            ("В чём исследования сходятся и расходятся", "Пробелы и открытые вопросы"),
        ),
        False: (("Background",), ("Where the studies agree and disagree", "Gaps and open questions")),
    },
    "comparison": {
        True: (("Что сравнивается",), ("Сравнение по пунктам", "Выводы")),
        False: (("What is compared",), ("Point by point", "Conclusions")),
    },
}


class OutlineError(ValueError):
    """An outline or a length that cannot be used; the message is for the user (translated)."""


@dataclass(frozen=True)
class Scale:
    """What a target length asks of a report: its words in all, and per section the passages'
    characters and the sources it is given (the extractive engine: sentences per source)."""

    words: int
    evidence_chars: int
    sources: int
    sentences: int
    pool: float  # the sources chosen for the whole report, as a multiple of the mode's own count


_SCALES = {
    "short": Scale(words=400, evidence_chars=3_000, sources=3, sentences=2, pool=1.0),
    "standard": Scale(words=1_000, evidence_chars=6_000, sources=5, sentences=3, pool=1.0),
    "long": Scale(words=2_500, evidence_chars=12_000, sources=8, sentences=5, pool=2.0),
}


# The Russian interface names the lengths in Russian; they are stored by their English names.
_RUSSIAN_SCALES = {
    **dict.fromkeys(("короткий", "короткая", "короткое", "кратко"), "short"),
    **dict.fromkeys(("стандартный", "стандартная", "стандартное", "обычный", "обычная"), "standard"),
    **dict.fromkeys(("длинный", "длинная", "длинное", "подробно"), "long"),
}


def read_length(typed: str | int | None) -> str:
    """The length as stored: "" (standard), short, standard, long or a number of words as digits;
    OutlineError for anything else."""
    text = (
        str(typed if typed is not None else "")
        .strip()
        .lower()
        .replace(" ", "")
        .replace("\u00a0", "")
        .strip("«»\"'")
    )
    text = _RUSSIAN_SCALES.get(text, text)
    if text in ("", "standard"):
        return "" if text == "" else "standard"
    if text in _SCALES:
        return text
    if text.isdigit() and MIN_WORDS <= int(text) <= MAX_WORDS:
        return str(int(text))
    raise OutlineError(
        _("The length is short, standard, long or a number of words from %(low)s to %(high)s.")
        % {"low": MIN_WORDS, "high": MAX_WORDS}
    )


def read_kind(typed: str | None) -> str:
    kind = (typed or "").strip().lower()
    if kind not in KINDS:
        raise OutlineError(_("Unknown kind of report: %(kind)s.") % {"kind": kind[:40]})
    return kind


def scale_of(length: str) -> Scale:
    """The scale of a stored length; a number of words takes the nearest named scale's evidence,
    stretched in proportion (within short's and twice long's)."""
    if not length.isdigit():
        return _SCALES.get(length or "standard", _SCALES["standard"])
    words = int(length)
    base = _SCALES["short"] if words <= 600 else _SCALES["long"] if words >= 1_800 else _SCALES["standard"]
    ratio = max(0.5, min(2.0, words / base.words))
    return Scale(
        words=words,
        evidence_chars=int(base.evidence_chars * ratio),
        sources=max(2, min(12, round(base.sources * ratio))),
        sentences=max(1, min(8, round(base.sentences * ratio))),
        pool=base.pool,
    )


def read_outline(titles: list[str] | tuple[str, ...] | str | None) -> list[str]:
    """The sections as stored: titles one a line (or a list), blank ones dropped, each on one line;
    OutlineError for too many, too long or repeated titles."""
    if titles is None:
        return []
    lines = titles.splitlines() if isinstance(titles, str) else list(titles)
    cleaned = [" ".join(str(line).split()).lstrip("#").strip() for line in lines]
    cleaned = [title for title in cleaned if title]
    if len(cleaned) > MAX_SECTIONS:
        raise OutlineError(_("A report has at most %(count)s sections.") % {"count": MAX_SECTIONS})
    if any(len(title) > MAX_TITLE_CHARS for title in cleaned):
        raise OutlineError(
            _("A section's title is at most %(count)s characters.") % {"count": MAX_TITLE_CHARS}
        )
    if len({title.casefold() for title in cleaned}) != len(cleaned):
        raise OutlineError(_("A section appears twice in the outline."))
    return cleaned


def propose(kind: str, question: str, subqueries: list[str]) -> list[str]:
    """The outline the plan proposes for a kind: the sub-queries between the kind's own sections,
    in the question's language; [] for the kinds written in one pass."""
    frame = _FRAMES.get(kind)
    if frame is None:
        return []
    before, after = frame[is_russian(question)]
    middle = [" ".join(text.split()).rstrip("?").strip() for text in subqueries]
    titles = list(dict.fromkeys([*before, *(m for m in middle if m), *after]))
    return titles[:MAX_SECTIONS]


def words_per_section(length: str, sections: int) -> int:
    """The words asked of one section: the report's target shared out, at least 80."""
    return max(80, scale_of(length).words // max(1, sections))


def effective_length(kind: str, length: str) -> str:
    """A brief answer is short unless the user set a length."""
    return length or ("short" if kind == "brief" else "")
