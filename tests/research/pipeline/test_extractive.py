from __future__ import annotations

import re

import pytest

from research.pipeline.extractive import (
    extractive_report,
    extractive_summary,
    keyword_queries,
    keyword_subqueries,
    score_texts,
)
from research.pipeline.replies import CRITERIA
from research.pipeline.text import BM25, tokenize

EXAMPLE_QUESTION = "Расскажи об Mixture of Tokens, в том числе где используется и какие есть улучшения"


# --- tokenize ---------------------------------------------------------------------------


def test_tokenize_drops_stop_words_and_lowercases() -> None:
    assert tokenize("Что такое Mixture of Tokens в машинном обучении?") == [
        "mixture",
        "token",
        "машинн",
        "обучен",
    ]


@pytest.mark.parametrize(
    "forms",
    [
        ("токенов", "токены", "токен", "токенами"),
        ("модель", "модели", "моделей", "моделями"),
        ("технология", "технологии", "технологий"),
        ("обучение", "обучения", "обучении"),
        ("ёлка", "елки"),
        ("tokens", "token", "Tokens"),
        ("studies", "study"),
    ],
)
def test_inflected_forms_share_a_token(forms: tuple[str, ...]) -> None:
    assert len({tuple(tokenize(form)) for form in forms}) == 1


@pytest.mark.parametrize("word", ["process", "analysis", "bus"])
def test_english_words_ending_in_s_that_are_not_plurals_keep_it(word: str) -> None:
    assert tokenize(word) == [word]


def test_tokenize_keeps_numbers_and_drops_single_letters() -> None:
    assert tokenize("GPT-4 и 2024 год, x y") == ["gpt", "4", "2024", "год"]


def test_tokenize_empty() -> None:
    assert tokenize("") == []
    assert tokenize("и в на the of") == []


# --- BM25 -------------------------------------------------------------------------------


def test_bm25_ranks_the_relevant_document_first() -> None:
    documents = [
        tokenize("Рецепт борща со свёклой и капустой"),
        tokenize("Mixture of Tokens смешивает токены разных примеров перед экспертами"),
        tokenize("Токены в NLP: токенизация текста"),
    ]
    scores = BM25(documents).scores(tokenize("Mixture of Tokens эксперты"))
    assert max(range(3), key=scores.__getitem__) == 1
    assert scores[0] == 0.0


def test_bm25_idf_is_never_negative_even_for_terms_in_every_document() -> None:
    bm25 = BM25([["a", "b"], ["a", "c"], ["a"]])
    assert all(value > 0 for value in bm25.idf.values())
    assert all(score > 0 for score in bm25.scores(["a"]))


def test_bm25_rarer_terms_weigh_more_and_length_is_normalised() -> None:
    bm25 = BM25([["common", "rare"], ["common", "other"], ["common", "x", "y", "z", "rare"]])
    assert bm25.idf["rare"] > bm25.idf["common"]
    scores = bm25.scores(["rare"])
    assert scores[0] > scores[2] > scores[1] == 0.0


def test_bm25_handles_empty_input() -> None:
    assert BM25([]).scores(["a"]) == []
    assert BM25([[], []]).scores(["a"]) == [0.0, 0.0]
    assert BM25([["a"]]).scores([]) == [0.0]


# --- keyword sub-queries and queries ----------------------------------------------------


def test_keyword_subqueries_on_the_readme_example() -> None:
    subqueries = keyword_subqueries(EXAMPLE_QUESTION)
    assert 1 <= len(subqueries) <= 3
    assert len({query.casefold() for query in subqueries}) == len(subqueries)
    assert all("Mixture of Tokens" in query for query in subqueries)
    assert not any(query.lower().startswith("расскажи") for query in subqueries)
    joined = " ".join(subqueries).lower()
    assert "используется" in joined
    assert "улучшения" in joined


def test_keyword_subqueries_makes_one_per_aspect() -> None:
    assert keyword_subqueries(EXAMPLE_QUESTION) == [
        "Mixture of Tokens, в том числе где используется и какие есть улучшения",
        "Где используется Mixture of Tokens",
        "Какие есть улучшения Mixture of Tokens",
    ]


@pytest.mark.parametrize(
    "question",
    [
        "Tell me about BM25 ranking and its variants",
        "расскажи о квантовых компьютерах и их применении в медицине",
        "Что такое BM25?",
        "что это?",
        "x",
    ],
)
def test_keyword_subqueries_are_few_distinct_and_never_empty(question: str) -> None:
    subqueries = keyword_subqueries(question, limit=2)
    assert 1 <= len(subqueries) <= 2
    assert len(set(subqueries)) == len(subqueries)


def test_keyword_subqueries_strip_english_filler() -> None:
    assert (
        keyword_subqueries("Tell me about BM25 ranking and its variants")[0]
        == "BM25 ranking and its variants"
    )


def test_keyword_subqueries_empty_question() -> None:
    assert keyword_subqueries("   ") == []


def test_keyword_queries_for_a_russian_subquery() -> None:
    russian, english = keyword_queries("Что такое Mixture of Tokens в машинном обучении?")
    assert russian == [
        "Что такое Mixture of Tokens в машинном обучении?",
        "Mixture of Tokens машинном обучении",
    ]
    assert english == ["Mixture of Tokens"]


def test_keyword_queries_collects_every_latin_term() -> None:
    _russian, english = keyword_queries("Применение Mixture of Tokens в NLP задачах")
    assert english == ["Mixture of Tokens NLP", "Mixture of Tokens", "NLP"]


def test_keyword_queries_for_an_english_subquery() -> None:
    russian, english = keyword_queries("Where is Mixture of Tokens used in practice?")
    assert russian == []
    assert english[0] == "Where is Mixture of Tokens used in practice?"
    assert english[1] == "Mixture Tokens used practice"


def test_keyword_queries_for_pure_russian_has_no_english() -> None:
    russian, english = keyword_queries("Где применяют квантовые компьютеры?")
    assert russian[0] == "Где применяют квантовые компьютеры?"
    assert english == []


def test_keyword_queries_respect_limit() -> None:
    russian, english = keyword_queries(
        "Применение Mixture of Tokens и Mixture of Experts в NLP задачах", limit=1
    )
    assert len(russian) == 1
    assert len(english) == 1


# --- score_texts ------------------------------------------------------------------------

ON_TOPIC = (
    "Mixture of Tokens: Efficient LLMs",
    "# Mixture of Tokens\n\nMixture of Tokens (MoT) is a continuous alternative to sparse Mixture of "
    "Experts. It was proposed in 2023 by Antoniak et al. [1].\n\n- Tokens from different examples are "
    "mixed\n- Each expert processes a mixture\n\nMoT improves training stability and efficiency.",
)
OFF_TOPIC = ("Cooking pasta", "Boil water, add salt and cook the pasta until it is soft enough to eat")
PARTIAL = ("Tokens in NLP", "Tokenization splits text into tokens. Tokens are used by language models.")


def test_score_texts_shape_and_range() -> None:
    results = score_texts(
        "What is Mixture of Tokens?", "Mixture of Tokens improvements", [ON_TOPIC, OFF_TOPIC]
    )
    assert len(results) == 2
    for result in results:
        assert set(result) == set(CRITERIA)
        assert all(0.0 <= value <= 10.0 for value in result.values())


def test_score_texts_relevance_ranks_on_topic_first_and_scales_to_the_batch() -> None:
    on, off, partial = score_texts("What is Mixture of Tokens?", "", [ON_TOPIC, OFF_TOPIC, PARTIAL])
    assert on["relevance_to_question"] >= 9
    assert off["relevance_to_question"] <= 2
    assert off["relevance_to_question"] < partial["relevance_to_question"] < on["relevance_to_question"]
    # With no direction the question stands in for it.
    assert on["relevance_to_direction"] == on["relevance_to_question"]


def test_score_texts_completeness_accuracy_structure() -> None:
    on, off = score_texts("Mixture of Tokens experts", "MoT", [ON_TOPIC, OFF_TOPIC])
    assert on["completeness"] > off["completeness"]
    assert on["accuracy"] > off["accuracy"] == 5.0
    assert on["structure"] > off["structure"]


def test_score_texts_is_deterministic_and_handles_empty_batches() -> None:
    items = [ON_TOPIC, OFF_TOPIC, PARTIAL]
    assert score_texts("Mixture of Tokens", "MoT", items) == score_texts("Mixture of Tokens", "MoT", items)
    assert score_texts("Mixture of Tokens", "MoT", []) == []


def test_score_texts_when_nothing_matches() -> None:
    (result,) = score_texts("квантовые компьютеры", "", [OFF_TOPIC])
    assert result["relevance_to_question"] == 0.0
    assert result["relevance_to_direction"] == 0.0


# --- extractive_summary -----------------------------------------------------------------

ARTICLE = """# Notes

The weather was pleasant that week. Mixture of Tokens mixes tokens from different examples before
feeding them to experts. The cat sat on the mat all afternoon.
![diagram](https://example.com/diagram.png)
See [the paper](https://arxiv.org/abs/2310.15961) for the details of the method.
Unlike sparse Mixture of Experts, Mixture of Tokens is fully differentiable[3]. Bananas are yellow.

```python
print("Mixture of Tokens")
```
"""


def test_summary_picks_the_on_topic_sentences_in_order() -> None:
    summary = extractive_summary(ARTICLE, "Mixture of Tokens", max_sentences=2)
    assert summary == (
        "Mixture of Tokens mixes tokens from different examples before feeding them to experts. "
        "Unlike sparse Mixture of Experts, Mixture of Tokens is fully differentiable."
    )


def test_summary_strips_markdown_noise() -> None:
    summary = extractive_summary(ARTICLE, "paper details method", max_sentences=5)
    assert "See the paper for the details of the method." in summary
    for noise in ("](", "![", "```", "print(", "https://", "[3]", "#"):
        assert noise not in summary


def test_summary_of_a_short_text_is_the_cleaned_text() -> None:
    assert extractive_summary("**Short** text with a [link](https://x.y). Second.", "unrelated") == (
        "Short text with a link. Second."
    )


def test_a_title_on_a_line_of_its_own_is_not_quoted_as_a_sentence() -> None:
    """A plain-text document's first line ran into its first sentence: "…в Германии Доля…"."""
    text = (
        "Энергетический переход в Германии\n\n"
        "Доля возобновляемых источников в Германии выросла с 30 процентов в 2015 году до 50 в 2023 году. "
        "Угольная генерация сократилась."
    )
    summary = extractive_summary(text, "доля возобновляемой энергии в Германии", max_sentences=3)
    assert summary.startswith("Доля возобновляемых источников")
    # Only a first line can be a title: a short line further on is a fact to quote.
    facts = "Inflation report\n\nPrices rose in spring. Wages did not.\n\nInflation in 2023 was 7.4%"
    assert extractive_summary(facts, "inflation 2023") == "Inflation in 2023 was 7.4%"


def test_summary_without_any_match_prefers_the_lead() -> None:
    text = "First point here. Second point here. Third point here. Fourth point here."
    assert extractive_summary(text, "квантовые компьютеры", max_sentences=2) == (
        "First point here. Second point here."
    )


@pytest.mark.parametrize(
    ("text", "question", "first"),
    [
        (
            "Метод описан в статье, т. е. в работе о токенах. Авторы из Польши. Статья вышла. Её цитируют.",
            "метод токены",
            "Метод описан в статье, т. е. в работе о токенах.",
        ),
        (
            "Поэт А. С. Пушкин не писал о токенах. Он писал стихи. Его читают до сих пор. Конец.",
            "Пушкин токены",
            "Поэт А. С. Пушкин не писал о токенах.",
        ),
        (
            "Dr. Smith studied tokens, e.g. Mixture of Tokens. It is short. Another one. The end.",
            "Smith tokens",
            "Dr. Smith studied tokens, e.g. Mixture of Tokens.",
        ),
    ],
)
def test_summary_keeps_abbreviations_inside_sentences(text: str, question: str, first: str) -> None:
    assert extractive_summary(text, question, max_sentences=1) == first


def test_summary_turns_list_items_into_sentences() -> None:
    text = "Intro about tokens.\n\n- first item about experts\n- second item about tokens\n- third item"
    assert (
        extractive_summary(text, "tokens", max_sentences=2) == "Intro about tokens. second item about tokens."
    )


# --- extractive_report ------------------------------------------------------------------

SOURCES = [
    (1, "Mixture of Tokens [paper]", "https://arxiv.org/abs/2310.15961"),
    (2, "MoT overview", "https://example.com/mot overview"),
    (4, "Untitled", ""),
]


def citations(report: str) -> set[int]:
    body = report.split("## Источники")[0].split("## Sources")[0]
    return {int(number) for number in re.findall(r"\[(\d+)\]", body)}


def test_report_structure_in_russian() -> None:
    report = extractive_report(
        EXAMPLE_QUESTION,
        [
            ("Что такое Mixture of Tokens", [(1, ARTICLE)]),
            ("Улучшения", [(2, "MoT улучшает стабильность обучения.")]),
        ],
        SOURCES,
    )
    headings = re.findall(r"^#+ .*$", report, re.MULTILINE)
    assert headings == [
        f"# {EXAMPLE_QUESTION}",
        "## Введение",
        "## Что такое Mixture of Tokens",
        "## Улучшения",
        "## Заключение",
        "## Источники",
    ]
    assert "из 3 источников без языковой модели" in report
    assert "Mixture of Tokens mixes tokens from different examples" in report
    assert "MoT улучшает стабильность обучения. [2]" in report
    assert "1. [Mixture of Tokens \\[paper\\]](https://arxiv.org/abs/2310.15961)" in report
    assert "2. [MoT overview](https://example.com/mot%20overview)" in report
    assert "4. Untitled" in report


def test_report_cites_only_listed_sources() -> None:
    report = extractive_report(
        "What is Mixture of Tokens?",
        [("Definition", [(1, ARTICLE), (9, "Mixture of Tokens from an unlisted source."), (2, "")])],
        SOURCES,
    )
    used = citations(report)
    assert used == {1}
    assert used <= {number for number, _title, _url in SOURCES}
    # The article's own footnote "[3]" must not pass for a citation.
    assert "[3]" not in report


@pytest.mark.parametrize(
    "footnoted",
    [
        "Mixture of Tokens is differentiable[7]. It mixes tokens[ 8 ]. Experts see mixtures[1, 9].",
        "Mixture of Tokens is differentiable[[7]](https://w.org/#c7). It mixes tokens. Experts see mixtures.",
        "Mixture of Tokens is differentiable[7](#cite-7). It mixes tokens[8–9]. Experts see mixtures.",
    ],
)
def test_report_drops_footnote_marks_of_the_source(footnoted: str) -> None:
    report = extractive_report("What is Mixture of Tokens?", [("Definition", [(2, footnoted)])], SOURCES)
    assert citations(report) == {2}
    assert "Mixture of Tokens is differentiable" in report


def test_report_in_english() -> None:
    report = extractive_report("What is Mixture of Tokens?", [("Definition", [(1, ARTICLE)])], SOURCES[:1])
    headings = re.findall(r"^## .*$", report, re.MULTILINE)
    assert headings == ["## Introduction", "## Definition", "## Conclusion", "## Sources"]
    assert "assembled from 1 source without a language model" in report


def test_the_conclusion_lists_a_question_title_without_a_second_stop() -> None:
    title = "Как изменилась доля возобновляемой энергии с 2015 года?"
    report = extractive_report(title, [(title, [(1, ARTICLE)])], SOURCES[:1])
    assert f"исследования: {title} Он составлен" in report
    english = extractive_report("What is MoT?", [("Definition", [(1, ARTICLE)])], SOURCES[:1])
    assert "1 research direction: Definition. It quotes" in english


def test_report_section_without_usable_text_says_so() -> None:
    report = extractive_report("Что такое MoT?", [("Пусто", [])], [])
    assert "## Пусто\n\nПодходящих сведений в источниках не нашлось." in report
    assert "из 0 источников" in report
    assert citations(report) == set()
