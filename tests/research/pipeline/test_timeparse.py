"""Time phrases → a period, SearXNG's time_range and the years named (pure, no database)."""

from __future__ import annotations

from datetime import date

import pytest

from research.pipeline.timeparse import Period, calendar_years, parse_period, strip_period, window_for

TODAY = date(2025, 11, 21)  # a Friday


def period_of(question: str, today: date = TODAY) -> Period:
    """The period of a question that names one."""
    period = parse_period(question, today)
    assert period is not None, question
    return period


@pytest.mark.parametrize(
    ("question", "start", "end", "time_range"),
    [
        ("Новости о выборах за последние 3 дня", date(2025, 11, 18), TODAY, "week"),
        ("за последние сутки", date(2025, 11, 20), TODAY, "day"),
        ("Что изменилось за последнюю неделю?", date(2025, 11, 14), TODAY, "week"),
        ("курс рубля за последний месяц", date(2025, 10, 21), TODAY, "month"),
        ("за последние полгода", date(2025, 5, 21), TODAY, "year"),
        ("на протяжении последних 5 лет", date(2020, 11, 21), TODAY, ""),
        ("за 3 дня", date(2025, 11, 18), TODAY, "week"),
        ("AI chip market in the past 6 months", date(2025, 5, 21), TODAY, "year"),
        ("layoffs over the last two weeks", date(2025, 11, 7), TODAY, "month"),
        ("revenue in the last year", date(2024, 11, 21), TODAY, "year"),
        ("last 30 days of outages", date(2025, 10, 22), TODAY, "month"),
    ],
)
def test_relative_phrases_count_back_from_today(
    question: str, start: date, end: date, time_range: str
) -> None:
    period = parse_period(question, TODAY)
    assert period is not None
    assert (period.start, period.end, period.time_range, period.years) == (start, end, time_range, ())


def test_a_calendar_year_gets_no_window_that_would_cut_it_short() -> None:
    # SearXNG's "year" is the last 365 days: it would hide January–November of 2024.
    period = period_of("Что произошло в прошлом году в ИИ?")
    assert (period.start, period.end, period.time_range) == (date(2024, 1, 1), date(2024, 12, 31), "")
    assert period.years == (2024,)
    assert period_of("What happened last year?").years == (2024,)
    this_year = period_of("выручка в этом году")
    assert (this_year.start, this_year.end, this_year.time_range) == (date(2025, 1, 1), TODAY, "year")


@pytest.mark.parametrize(
    "question",
    [
        "QS ranking of CUHK 2015–2023",
        "QS ranking of CUHK 2015-2023 гг.",
        "рейтинг CUHK с 2015 по 2023 год",
        "the CUHK ranking between 2015 and 2023",
        "CUHK ranking from 2015 to 2023",
    ],
)
def test_year_ranges_name_every_year(question: str) -> None:
    period = period_of(question)
    assert (period.start, period.end, period.time_range) == (date(2015, 1, 1), date(2023, 12, 31), "")
    assert period.years == tuple(range(2015, 2024))
    assert "2015" not in strip_period(question, period) and "CUHK" in strip_period(question, period)


def test_single_years_and_since() -> None:
    assert period_of("инфляция в 2021 году").years == (2021,)
    assert period_of("inflation in 2021").years == (2021,)
    since = period_of("курс рубля с 2020 года")
    assert (since.start, since.end, since.years) == (
        date(2020, 1, 1),
        TODAY,
        (2020, 2021, 2022, 2023, 2024, 2025),
    )
    assert strip_period("курс рубля с 2020 года", since) == "курс рубля"


@pytest.mark.parametrize(
    "question",
    [
        "Mixture of Tokens",
        "iPhone 15 review",
        "the state of quantum computing today",  # "today" as "nowadays"
        "сколько стоит подписка за год",  # "per year", not a period
        "что изменилось в последние годы",  # too vague to filter by
        "прогноз на 2030 год",  # a future year is a subject, not a filter
        "What happened in 2031?",
        "population 1850-1860",  # before MIN_YEAR
    ],
)
def test_no_period_where_there_is_none(question: str) -> None:
    assert parse_period(question, TODAY) is None


def test_calendar_spans() -> None:
    yesterday = period_of("что случилось вчера")
    assert (yesterday.start, yesterday.end, yesterday.time_range) == (
        date(2025, 11, 20),
        date(2025, 11, 20),
        "week",
    )
    last_week = period_of("на прошлой неделе")
    assert (last_week.start, last_week.end) == (date(2025, 11, 10), date(2025, 11, 16))
    this_month = period_of("this month")
    assert (this_month.start, this_month.time_range) == (date(2025, 11, 1), "month")
    news = period_of("сегодняшние новости")
    assert (news.start, news.time_range) == (TODAY, "day")


def test_explicit_years_win_over_relative_phrases() -> None:
    assert period_of("в 2021 году за последние 3 месяца").years == (2021,)


def test_month_arithmetic_clamps_to_the_month_end() -> None:
    period = period_of("за последний месяц", date(2025, 3, 31))
    assert period.start == date(2025, 2, 28)


def test_window_for_and_calendar_years() -> None:
    assert [window_for(date(2025, 11, d), TODAY) for d in (21, 14, 1)] == ["day", "week", "month"]
    assert window_for(date(2025, 1, 1), TODAY) == "year"
    assert window_for(date(2024, 1, 1), TODAY) == ""
    assert calendar_years(date(2023, 5, 1), date(2025, 2, 1)) == (2023, 2024, 2025)


@pytest.mark.parametrize(
    ("question", "base"),
    [
        ("What methods have been proposed since 2023?", "What methods have been proposed"),
        ("What were the results in 2020-2022?", "What were the results"),
        ("What changed between 2019 and 2022?", "What changed"),
        ("Inflation in 2021, and what followed?", "Inflation, and what followed"),
        ("Rock and roll in 2021", "Rock and roll"),
        ("Какой курс рубля в 2023 и 2024 годах?", "Какой курс рубля"),
        ("Какой был курс рубля в прошлом году?", "Какой был курс рубля"),
        ("Что произошло с 2019 по 2022 год?", "Что произошло"),
        ("Какие новости за 2024 год?", "Какие новости"),
        (
            "Что такое Mixture of Tokens в 2024 году и где используется?",
            "Что такое Mixture of Tokens и где используется",
        ),
    ],
)
def test_a_per_year_sub_query_leaves_no_question_mark_or_dangling_preposition(
    question: str, base: str
) -> None:
    """The words a per-year sub-query searches for with its year (issue 29: "…have been proposed
    ? 2023", "курс рубля в ? 2023")."""
    from research.pipeline.stages.years import without_years

    assert without_years(strip_period(question, period_of(question))) == base
