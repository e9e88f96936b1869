"""Time phrases in a question ("за последние 3 дня", "past 6 months", "2015–2023") as a period.

A `Period` says which dates the question is about (the date filter for private documents), the
SearXNG `time_range` that covers it, and the calendar years it names (which get a search of
their own when the first search misses them).

SearXNG only knows windows that end now: day, week, month, year. A period gets the narrowest
window that holds all of it, or none when it starts more than a year ago ("в прошлом году",
"2015–2023"): a window that cut such a period short would hide most of what was asked for, so
the years go into the queries instead.
"""

from __future__ import annotations

import re
from calendar import monthrange
from dataclasses import dataclass
from datetime import date, timedelta

MIN_YEAR = 1900
MAX_YEARS = 30  # a longer span is history, not a filter


@dataclass(frozen=True)
class Period:
    start: date
    end: date
    time_range: str  # SearXNG: "day", "week", "month", "year" or "" (no window covers it)
    phrase: str  # the words of the question that said it
    years: tuple[int, ...] = ()  # calendar years named outright, oldest first


_NUMBER_WORDS = {
    "один": 1, "одну": 1, "одна": 1, "одного": 1, "one": 1, "a": 1, "an": 1,
    "два": 2, "две": 2, "двух": 2, "пару": 2, "пара": 2, "two": 2, "couple": 2,
    "три": 3, "трех": 3, "three": 3, "четыре": 4, "четырех": 4, "four": 4,
    "пять": 5, "пяти": 5, "five": 5, "шесть": 6, "шести": 6, "six": 6,
    "семь": 7, "семи": 7, "seven": 7, "восемь": 8, "восьми": 8, "eight": 8,
    "девять": 9, "девяти": 9, "nine": 9, "десять": 10, "десяти": 10, "ten": 10,
    "одиннадцать": 11, "eleven": 11, "двенадцать": 12, "двенадцати": 12, "twelve": 12,
}  # fmt: skip
_UNITS = (
    ("day", r"дн[еяи]й?|день|сут(?:ки|ок)|days?"),
    ("week", r"недел[юиьяе]|weeks?"),
    ("month", r"месяц(?:а|ев)?|months?"),
    ("year", r"год(?:а)?|лет|years?"),
)
_NUMBER = r"\d{1,3}|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))
_UNIT = "|".join(f"(?P<{name}>{pattern})" for name, pattern in _UNITS)
_YEAR = r"(?:19|20)\d\d"
_DASH = r"\s*(?:-|–|—|по|до|to|through|until|and|и)\s*"

# "за последние 3 дня", "за последний месяц", "последние 2 недели", "past 6 months", "the past
# year", "over the last two weeks": the count may be left out ("the last month" is one).
_RELATIVE = re.compile(
    rf"(?:(?:\bза|\bв|\bна\s+протяжении)\s+(?:последн\w*|прошедш\w*)|\bпоследн\w*"
    rf"|(?:\b(?:in|over|during|within)\s+)?\bthe\s+(?:last|past)|\bpast)"
    rf"\s+(?:(?P<n>{_NUMBER})\s+)?(?:{_UNIT})\b",
    re.IGNORECASE,
)
# "за 3 дня", "last 6 months": without the count these mean something else ("за год" is often
# "per year"; a bare "last year" is the calendar year before this one).
_COUNTED = re.compile(rf"(?:\bза|\blast)\s+(?P<n>{_NUMBER})\s+(?:{_UNIT})\b", re.IGNORECASE)
_HALF_YEAR = re.compile(r"(?:за|в)\s+(?:последн\w+\s+)?полгода|(?:last|past)\s+half[\s-]year", re.IGNORECASE)
_CALENDAR = (
    # A bare "today" / "сегодня" usually means "nowadays", not the last 24 hours.
    (
        "today",
        re.compile(
            r"\bза\s+сегодня\b|\bсегодняшн\w+|\btoday's\s+(?:news|headlines|results|scores|matches)"
            r"|\b(?:news|headlines|results|scores|matches)\s+(?:for\s+)?today\b",
            re.IGNORECASE,
        ),
    ),
    ("yesterday", re.compile(r"\b(?:вчера|вчерашн\w*|yesterday)\b", re.IGNORECASE)),
    ("this_week", re.compile(r"\b(?:на\s+этой\s+неделе|this\s+week)\b", re.IGNORECASE)),
    ("last_week", re.compile(r"\b(?:на\s+прошлой\s+неделе|last\s+week)\b", re.IGNORECASE)),
    ("this_month", re.compile(r"\b(?:в\s+этом\s+месяце|this\s+month)\b", re.IGNORECASE)),
    ("last_month", re.compile(r"\b(?:в\s+прошлом\s+месяце|last\s+month)\b", re.IGNORECASE)),
    ("this_year", re.compile(r"\b(?:в\s+этом\s+году|в\s+текущем\s+году|this\s+year)\b", re.IGNORECASE)),
    ("last_year", re.compile(r"\b(?:в\s+прошлом\s+году|за\s+прошлый\s+год|last\s+year)\b", re.IGNORECASE)),
)
# "2015–2023", "с 2015 по 2023 год", "from 2015 to 2023", "between 2015 and 2023", "2015-2023 гг."
_YEAR_RANGE = re.compile(
    rf"(?:(?:с|from|between)\s+)?(?P<a>{_YEAR})(?:\s*(?:года?|г\.))?{_DASH}(?P<b>{_YEAR})"
    rf"(?:\s*(?:годы|годах|года|год|гг\.?|г\.))?",
    re.IGNORECASE,
)
# "с 2020 года", "since 2020"
_SINCE_YEAR = re.compile(
    rf"(?:\bс|\bsince|\bstarting\s+(?:in|from))\s+(?P<a>{_YEAR})(?:\s*(?:года|г\.))?", re.IGNORECASE
)
# "в 2021 году", "за 2021 год", "in 2021", "during 2021"
_ONE_YEAR = re.compile(
    rf"(?:\b(?:в|за)\s+(?P<a>{_YEAR})\s*(?:году|год|г\.)|\b(?:in|during|of)\s+(?P<b>{_YEAR})\b(?![-–—]))",
    re.IGNORECASE,
)


def parse_period(text: str, today: date) -> Period | None:
    """The period the question asks about, or None when it names none.

    Explicit years win over relative phrases ("в 2021 году за последние…" is about 2021).
    """
    text = (text or "").replace("ё", "е").replace("Ё", "Е")
    for parse in (_year_range, _since_year, _one_year, _relative, _counted, _half_year, _calendar):
        period = parse(text, today)
        if period is not None:
            return period
    return None


def strip_period(text: str, period: Period | None) -> str:
    """The question without its time phrase, for queries that add a year of their own."""
    if period is None or not period.phrase:
        return " ".join(text.split())
    return tidy_query(text.replace(period.phrase, " "))


# What a time phrase taken out of a question can leave dangling: a preposition or conjunction
# that led into it ("курс рубля в ?", "results in ?", "between and"), Russian and English.
_DANGLING = (
    "в|во|на|за|с|со|до|по|от|к|ко|о|об|про|из|для|между|после|перед|около|начиная|и|или|а|"
    "in|on|at|since|from|to|for|during|between|of|by|after|before|until|till|through|over|and|or|the"
)
_DANGLING_BEFORE_STOP = re.compile(
    rf"(?<![\w-])(?:(?:{_DANGLING})\s+)*(?:{_DANGLING})\s*(?=[,;:?!.]|$)", re.I
)
_SPACE_BEFORE_STOP = re.compile(r"\s+([,;:?!.])")
_REPEATED_STOPS = re.compile(r"([,;:])(?:\s*[,;:])+")


def tidy_query(text: str) -> str:
    """A question with a phrase taken out, as words to search for with a year added: no space
    before punctuation, no preposition left dangling before it or at the end ("What methods
    have been proposed since 2023?" → "What methods have been proposed"), no closing "?"."""
    text = " ".join(text.split())
    for _ in range(3):  # a removal can leave another word dangling ("in and")
        before = text
        text = _DANGLING_BEFORE_STOP.sub("", text)
        text = _SPACE_BEFORE_STOP.sub(r"\1", text)
        text = _REPEATED_STOPS.sub(r"\1", text)
        text = " ".join(text.split()).strip(" ,.;:?!-–—")
        if text == before:
            break
    return text


def window_for(start: date, today: date) -> str:
    """The narrowest SearXNG window that still reaches back to `start`."""
    days_back = (today - start).days
    for window, days in (("day", 0), ("week", 7), ("month", 30), ("year", 365)):
        if days_back <= days:
            return window
    return ""


def calendar_years(start: date, end: date) -> tuple[int, ...]:
    return tuple(range(start.year, end.year + 1))


# --- the phrase kinds, each returning a Period or None ----------------------------------------


def _year_range(text: str, today: date) -> Period | None:
    for match in _YEAR_RANGE.finditer(text):
        first, last = int(match.group("a")), int(match.group("b"))
        if MIN_YEAR <= first < last <= today.year and last - first < MAX_YEARS:
            return _years_period(first, last, match.group(0).strip(), today)
    return None


def _since_year(text: str, today: date) -> Period | None:
    match = _SINCE_YEAR.search(text)
    if match is None or not MIN_YEAR <= int(match.group("a")) <= today.year:
        return None
    first = int(match.group("a"))
    if today.year - first >= MAX_YEARS:
        return None
    return _years_period(first, today.year, match.group(0).strip(), today)


def _one_year(text: str, today: date) -> Period | None:
    for match in _ONE_YEAR.finditer(text):
        year = int(match.group("a") or match.group("b"))
        if MIN_YEAR <= year <= today.year:
            return _years_period(year, year, match.group(0).strip(), today)
    return None


def _years_period(first: int, last: int, phrase: str, today: date) -> Period:
    start, end = date(first, 1, 1), min(date(last, 12, 31), today)
    return Period(start, end, window_for(start, today), phrase, calendar_years(start, end))


def _relative(text: str, today: date) -> Period | None:
    return _back_from_today(_RELATIVE.search(text), today)


def _counted(text: str, today: date) -> Period | None:
    return _back_from_today(_COUNTED.search(text), today)


def _back_from_today(match: re.Match[str] | None, today: date) -> Period | None:
    if match is None:
        return None
    unit = next(name for name, _ in _UNITS if match.group(name))
    raw = (match.group("n") or "1").lower()
    count = int(raw) if raw.isdigit() else _NUMBER_WORDS[raw]
    if count <= 0:
        return None
    start = _back(today, unit, count)
    return Period(start, today, _relative_window(unit, count), match.group(0).strip())


def _half_year(text: str, today: date) -> Period | None:
    match = _HALF_YEAR.search(text)
    if match is None:
        return None
    return Period(_back(today, "month", 6), today, "year", match.group(0).strip())


def _relative_window(unit: str, count: int) -> str:
    """SearXNG's windows are counted back from now, so "the last N units" fit them exactly."""
    days = {"day": 1, "week": 7, "month": 30, "year": 365}[unit] * count
    for window, limit in (("day", 1), ("week", 7), ("month", 31), ("year", 366)):
        if days <= limit:
            return window
    return ""


def _back(today: date, unit: str, count: int) -> date:
    if unit == "day":
        return today - timedelta(days=count)
    if unit == "week":
        return today - timedelta(weeks=count)
    months = count * (12 if unit == "year" else 1)
    year, month = divmod(today.year * 12 + today.month - 1 - months, 12)
    month += 1
    return date(year, month, min(today.day, monthrange(year, month)[1]))


def _calendar(text: str, today: date) -> Period | None:
    for name, pattern in _CALENDAR:
        match = pattern.search(text)
        if match is not None:
            start, end = _calendar_span(name, today)
            # "в прошлом году" names a calendar year as surely as "в 2024 году" does.
            years = (start.year,) if name in ("this_year", "last_year") else ()
            return Period(start, end, window_for(start, today), match.group(0).strip(), years)
    return None


def _calendar_span(name: str, today: date) -> tuple[date, date]:
    monday = today - timedelta(days=today.weekday())
    first_of_month = today.replace(day=1)
    last_month_end = first_of_month - timedelta(days=1)
    spans = {
        "today": (today, today),
        "yesterday": (today - timedelta(days=1), today - timedelta(days=1)),
        "this_week": (monday, today),
        "last_week": (monday - timedelta(weeks=1), monday - timedelta(days=1)),
        "this_month": (first_of_month, today),
        "last_month": (last_month_end.replace(day=1), last_month_end),
        "this_year": (date(today.year, 1, 1), today),
        "last_year": (date(today.year - 1, 1, 1), date(today.year - 1, 12, 31)),
    }
    return spans[name]
