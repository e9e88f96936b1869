from __future__ import annotations

import pytest

from research.pipeline.replies import (
    CRITERIA,
    default_scores,
    is_russian,
    match_scores,
    parse_prefixed_lines,
    split_by_language,
)

PLAN_ANSWER = """
ПОДЗАПРОС: Что такое Mixture of Tokens в машинном обучении?
ПОДЗАПРОС: Где используется Mixture of Tokens и какие задачи решает?
ПОДЗАПРОС: Какие есть улучшения Mixture of Tokens и их преимущества?
"""


def test_a_plan_answer_reads_as_three_subqueries() -> None:
    assert parse_prefixed_lines(PLAN_ANSWER, "ПОДЗАПРОС:") == [
        "Что такое Mixture of Tokens в машинном обучении?",
        "Где используется Mixture of Tokens и какие задачи решает?",
        "Какие есть улучшения Mixture of Tokens и их преимущества?",
    ]


@pytest.mark.parametrize(
    "line",
    [
        "ПОДЗАПРОС: Что такое MoT?",
        "  ПОДЗАПРОС:   Что такое MoT?  ",
        "- ПОДЗАПРОС: Что такое MoT?",
        "* ПОДЗАПРОС: Что такое MoT?",
        "1. ПОДЗАПРОС: Что такое MoT?",
        "2) ПОДЗАПРОС: Что такое MoT?",
        "**ПОДЗАПРОС:** Что такое MoT?",
        "**ПОДЗАПРОС**: Что такое MoT?",
        "- **Подзапрос 2:** Что такое MoT?",
        "_ПОДЗАПРОС_: Что такое MoT?",
        "Подзапрос: Что такое MoT?",
        "подзапрос 1: Что такое MoT?",
        "ПОДЗАПРОС: «Что такое MoT?»",
        'ПОДЗАПРОС: "Что такое MoT?"',
        "ПОДЗАПРОС: **Что такое MoT?**",
        "### ПОДЗАПРОС: Что такое MoT?",
    ],
)
def test_prefixed_line_variants(line: str) -> None:
    assert parse_prefixed_lines(line, "ПОДЗАПРОС:") == ["Что такое MoT?"]


@pytest.mark.parametrize(
    "line",
    [
        "Что такое MoT?",
        "ПОДЗАПРОС:",
        "ПОДЗАПРОС: «»",
        "ПОДЗАПРОСЫ: Что такое MoT?",
        "Вот ПОДЗАПРОС: Что такое MoT?",
    ],
)
def test_lines_without_a_usable_prefix_are_ignored(line: str) -> None:
    assert parse_prefixed_lines(line, "ПОДЗАПРОС:") == []


def test_zapros_and_podzapros_do_not_match_each_other() -> None:
    text = "ПОДЗАПРОС: под\nЗАПРОС: просто\n- **Запрос 2:** ещё"
    assert parse_prefixed_lines(text, "ЗАПРОС:") == ["просто", "ещё"]
    assert parse_prefixed_lines(text, "ПОДЗАПРОС:") == ["под"]


def test_prefix_given_without_colon() -> None:
    assert parse_prefixed_lines("ЗАПРОС: a query", "ЗАПРОС") == ["a query"]


def test_duplicates_dropped_case_insensitively_order_kept_and_limit() -> None:
    text = "ЗАПРОС: B\nЗАПРОС: a\nЗАПРОС: b\nЗАПРОС:  A \nЗАПРОС: c\nЗАПРОС: d"
    assert parse_prefixed_lines(text, "ЗАПРОС:") == ["B", "a", "c", "d"]
    assert parse_prefixed_lines(text, "ЗАПРОС:", limit=3) == ["B", "a", "c"]
    assert parse_prefixed_lines(text, "ЗАПРОС:", limit=0) == []


def test_chatter_around_the_lines_is_ignored() -> None:
    text = "Конечно! Вот подзапросы:\n\n1. ПОДЗАПРОС: Первый\n\nНадеюсь, это поможет.\n2. ПОДЗАПРОС: Второй"
    assert parse_prefixed_lines(text, "ПОДЗАПРОС:") == ["Первый", "Второй"]


@pytest.mark.parametrize(
    ("text", "russian"),
    [
        ("Что такое Mixture of Tokens в машинном обучении?", True),
        ("Применение Mixture of Tokens в NLP задачах", True),
        ("Mixture of Tokens in machine learning – explanation and examples.", False),
        ("Recent improvements in Mixture of Tokens arxiv papers", False),
        ("", False),
        ("2024", False),
    ],
)
def test_is_russian(text: str, russian: bool) -> None:
    assert is_russian(text) is russian


def test_split_by_language_keeps_order() -> None:
    queries = ["Что такое MoT?", "MoT explained", "Применение MoT в NLP", "MoT benchmarks"]
    assert split_by_language(queries) == (
        ["Что такое MoT?", "Применение MoT в NLP"],
        ["MoT explained", "MoT benchmarks"],
    )


def test_default_scores() -> None:
    assert default_scores() == dict.fromkeys(CRITERIA, 5.0)
    assert default_scores(3) == dict.fromkeys(CRITERIA, 3.0)


# --- match_scores ---------------------------------------------------------------------------

TITLES = [
    "Mixture of Tokens: Efficient LLMs through Cross-Example Aggregation",
    "Где используется Mixture of Tokens",
    "Mixture of Experts Explained",
]


def ru(title: str, *values: object) -> dict[str, object]:
    keys = ("соответствие_запросу", "соответствие_направлению", "полнота", "точность", "структура")
    return {"заголовок": title, **dict(zip(keys, values, strict=False))}


def scores(*values: float) -> dict[str, float]:
    return dict(zip(CRITERIA, map(float, values), strict=True))


def test_the_prompts_format_in_order() -> None:
    answer = [
        {**ru(TITLES[0], 9, 8, 7, 6, 5), "итоговый_рейтинг": 7},
        ru(TITLES[1], 1, 2, 3, 4, 5),
        ru(TITLES[2], 5, 5, 5, 5, 5),
    ]
    assert match_scores(TITLES, answer) == [
        scores(9, 8, 7, 6, 5),
        scores(1, 2, 3, 4, 5),
        scores(5, 5, 5, 5, 5),
    ]


@pytest.mark.parametrize(
    ("answer_title", "index"),
    [
        ("  mixture of experts explained  ", 2),
        ("MIXTURE OF EXPERTS EXPLAINED", 2),
        ("«Mixture of Experts Explained»", 2),
        ('"Mixture of Experts Explained."', 2),
        ("Mixture of Tokens: Efficient…", 0),
        ("Mixture of Tokens: Efficient LLMs through...", 0),
        ("Mixture of Experts Explaned", 2),
        ("Mixture of Tokens: Eficient LLMs…", 0),
        ("Где используется Mixture of Tokens?", 1),
        ("где используетса mixture of tokens", 1),
    ],
)
def test_title_matching_is_tolerant(answer_title: str, index: int) -> None:
    result = match_scores(TITLES, [ru(answer_title, 7, 7, 7, 7, 7)])
    assert result[index] == scores(7, 7, 7, 7, 7)
    assert sum(item is not None for item in result) == 1


def test_reordered_answer_matches_by_title() -> None:
    answer = [ru(TITLES[2], 3, 3, 3, 3, 3), ru(TITLES[0], 9, 9, 9, 9, 9), ru(TITLES[1], 6, 6, 6, 6, 6)]
    assert match_scores(TITLES, answer) == [
        scores(9, 9, 9, 9, 9),
        scores(6, 6, 6, 6, 6),
        scores(3, 3, 3, 3, 3),
    ]


def test_skipped_title_is_none() -> None:
    answer = [ru(TITLES[0], 9, 9, 9, 9, 9), ru(TITLES[2], 3, 3, 3, 3, 3)]
    assert match_scores(TITLES, answer) == [scores(9, 9, 9, 9, 9), None, scores(3, 3, 3, 3, 3)]


@pytest.mark.parametrize(
    "answer_title", ["Рецепт борща", "Mixture…", "Mix", "Mixture of Tokens: Inefficient"]
)
def test_unrelated_or_too_short_title_matches_nothing(answer_title: str) -> None:
    assert match_scores(TITLES, [ru(answer_title, 9, 9, 9, 9, 9)]) == [None, None, None]


def test_exact_title_wins_over_a_longer_one_it_prefixes() -> None:
    titles = ["Mixture of Tokens: Efficient LLMs", "Mixture of Tokens"]
    answer = [ru("Mixture of Tokens", 2, 2, 2, 2, 2), ru("Mixture of Tokens: Efficient LLMs", 8, 8, 8, 8, 8)]
    assert match_scores(titles, answer) == [scores(8, 8, 8, 8, 8), scores(2, 2, 2, 2, 2)]


def test_duplicate_titles_take_answer_objects_in_order() -> None:
    titles = ["Same title", "Other", "Same title"]
    answer = [ru("Same title", 1, 1, 1, 1, 1), ru("Other", 5, 5, 5, 5, 5), ru("same title", 9, 9, 9, 9, 9)]
    assert match_scores(titles, answer) == [
        scores(1, 1, 1, 1, 1),
        scores(5, 5, 5, 5, 5),
        scores(9, 9, 9, 9, 9),
    ]


def test_one_answer_object_is_used_at_most_once() -> None:
    titles = ["Same title", "Same title"]
    assert match_scores(titles, [ru("Same title", 4, 4, 4, 4, 4)]) == [scores(4, 4, 4, 4, 4), None]


@pytest.mark.parametrize("wrapper", ["results", "оценки", "items"])
def test_wrapped_list(wrapper: str) -> None:
    answer = {wrapper: [ru(TITLES[1], 6, 6, 6, 6, 6)]}
    assert match_scores(TITLES, answer) == [None, scores(6, 6, 6, 6, 6), None]


def test_single_object_instead_of_a_list() -> None:
    assert match_scores(TITLES, ru(TITLES[2], 4, 4, 4, 4, 4)) == [None, None, scores(4, 4, 4, 4, 4)]


def test_object_keyed_by_title() -> None:
    answer = {TITLES[1]: {"полнота": 6, "точность": 8}}
    assert match_scores(TITLES, answer)[1] == scores(7, 7, 6, 8, 7)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (8, 8.0),
        (8.5, 8.5),
        ("8", 8.0),
        ("8.5", 8.5),
        ("8,5", 8.5),
        ("8/10", 8.0),
        ("7 из 10", 7.0),
        ("80/100", 8.0),
        (" 9 ", 9.0),
        (12, 10.0),
        (-3, 0.0),
        ("11", 10.0),
    ],
)
def test_score_values_are_read_and_clamped(raw: object, expected: float) -> None:
    answer = [{"title": "X", "relevance_to_question": raw, **dict.fromkeys(CRITERIA[1:], 5)}]
    assert match_scores(["X"], answer) == [
        {**dict.fromkeys(CRITERIA, 5.0), "relevance_to_question": expected}
    ]


def test_english_keys_and_alternative_names() -> None:
    answer = [
        {
            "Title": "X",
            "query_relevance": 9,
            "direction_relevance": 8,
            "completeness": 7,
            "accuracy": 6,
            "structure": 5,
        },
        {"title": "Y", **dict(zip(CRITERIA, (1, 2, 3, 4, 5), strict=True))},
    ]
    assert match_scores(["Y", "X"], answer) == [scores(1, 2, 3, 4, 5), scores(9, 8, 7, 6, 5)]


def test_missing_criteria_take_the_mean_of_present_ones() -> None:
    assert match_scores(["X"], [ru("X", 9, None, "7", "n/a")]) == [scores(9, 8, 7, 8, 8)]


def test_object_without_any_criterion_is_none() -> None:
    assert match_scores(["X"], [{"заголовок": "X", "комментарий": "хорошо"}]) == [None]


def test_object_with_only_a_total_uses_it_for_every_criterion() -> None:
    assert match_scores(["X"], [{"заголовок": "X", "итоговый_рейтинг": "6.5"}]) == [
        scores(6.5, 6.5, 6.5, 6.5, 6.5)
    ]


def test_untitled_objects_fall_back_to_position_when_counts_agree() -> None:
    answer = [{"соответствие_запросу": n, "полнота": n} for n in (1, 2, 3)]
    assert match_scores(TITLES, answer) == [
        scores(1, 1, 1, 1, 1),
        scores(2, 2, 2, 2, 2),
        scores(3, 3, 3, 3, 3),
    ]


def test_position_fallback_never_takes_a_title_already_matched() -> None:
    answer = [
        {"соответствие_запросу": 1, "полнота": 1},
        ru(TITLES[0], 9, 9, 9, 9, 9),
        {"соответствие_запросу": 3, "полнота": 3},
    ]
    assert match_scores(TITLES, answer) == [scores(9, 9, 9, 9, 9), None, scores(3, 3, 3, 3, 3)]


def test_untitled_objects_are_unusable_when_counts_differ() -> None:
    answer = [{"соответствие_запросу": 1}, {"соответствие_запросу": 2}]
    assert match_scores(TITLES, answer) == [None, None, None]


@pytest.mark.parametrize("answer", [None, "not json", 42, [], {}, ["a", 1, None], {"results": "none"}])
def test_unusable_answers_give_all_none(answer: object) -> None:
    assert match_scores(TITLES, answer) == [None, None, None]


def test_no_titles() -> None:
    assert match_scores([], [ru("X", 1, 1, 1, 1, 1)]) == []
