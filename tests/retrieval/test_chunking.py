"""Chunking is pure: offsets, overlap, the token cap, pages and headings, with a word counter."""

from __future__ import annotations

import itertools
import re

import pytest

from retrieval.chunking import ChunkSpan, chunk


def words(text: str) -> int:
    return len(text.split())


def sentences(count: int, prefix: str = "Sentence") -> str:
    return " ".join(f"{prefix} number {n} talks about routing tokens to experts." for n in range(count))


def chunks_of(text: str, **options) -> list[ChunkSpan]:
    return chunk(text, options.pop("pages", None), count_tokens=words, **options)


def assert_exact(text: str, spans: list[ChunkSpan]) -> None:
    for span in spans:
        assert text[span.start : span.end] == span.text


def covered(text: str, spans: list[ChunkSpan]) -> bool:
    inside: set[int] = set()
    for span in spans:
        inside.update(range(span.start, span.end))
    return all(index in inside for index, char in enumerate(text) if not char.isspace())


def test_empty_text_has_no_chunks():
    assert chunks_of("") == []
    assert chunks_of(" \n\n \t") == []


def test_short_text_is_one_chunk_trimmed():
    text = "\n\n  A short note about tokens.  \n"
    [span] = chunks_of(text)
    assert span.text == "A short note about tokens."
    assert_exact(text, [span])


def test_long_text_offsets_are_exact_and_cover_everything():
    text = "\n\n".join(sentences(6, f"Paragraph {n}") for n in range(12))
    spans = chunks_of(text)
    assert len(spans) > 5
    assert_exact(text, spans)
    assert covered(text, spans)
    assert all(len(span.text) <= 1000 for span in spans)


def test_small_paragraphs_are_merged_up_to_the_target():
    text = "\n\n".join(f"Short paragraph {n}." for n in range(40))
    spans = chunks_of(text, target=200, overlap=0, whole_section=0)
    assert all(len(span.text) <= 200 for span in spans)
    assert len(spans) < 40 / 3
    assert all("\n\n" in span.text for span in spans[:-1])


def test_consecutive_chunks_overlap_by_whole_sentences():
    text = sentences(60)
    spans = chunks_of(text, target=400, overlap=150)
    assert len(spans) > 3
    for before, after in itertools.pairwise(spans):
        shared = before.end - after.start
        assert 0 < shared <= 150
        assert after.text.startswith("Sentence number")


def test_no_overlap_when_asked_for_none():
    spans = chunks_of(sentences(60), target=400, overlap=0)
    assert all(after.start >= before.end for before, after in itertools.pairwise(spans))


def test_chunks_prefer_to_end_at_a_paragraph_break():
    first = sentences(5, "First")  # about 300 characters
    second = sentences(5, "Second")
    text = f"{first}\n\n{second}"
    spans = chunks_of(text, target=500, overlap=0, whole_section=0)
    assert spans[0].text == first


def test_a_section_the_model_reads_whole_stays_one_chunk():
    # An abstract of about 1,500 characters: cut at the 1,000-character target, its second half
    # would lose the title and what the first half says.
    text = "# A study of routing\n\n" + sentences(24)
    assert 1000 < len(text) <= 2500
    spans = chunks_of(text, max_tokens=512)
    assert [span.text for span in spans] == [text]
    assert spans[0].heading == "A study of routing"


def test_each_short_section_is_whole_and_a_long_one_is_cut():
    short = "# Short\n\n" + sentences(20)
    long = "# Long\n\n" + sentences(60)  # over 2,500 characters
    text = f"{short}\n\n{long}"
    spans = chunks_of(text, max_tokens=512)
    assert spans[0].text == short
    assert len(spans) > 2
    assert all(len(span.text) <= 1000 for span in spans[1:])
    assert_exact(text, spans)
    assert covered(text, spans)


def test_a_section_over_the_token_cap_is_cut_even_when_short():
    text = "# Dense\n\n" + sentences(24)  # about 230 words
    spans = chunks_of(text, max_tokens=128)
    assert len(spans) > 1
    assert all(words(span.text) <= 128 for span in spans)


def test_every_chunk_is_within_the_token_cap():
    text = "\n\n".join(sentences(8, f"Part {n}") for n in range(5))
    spans = chunks_of(text, max_tokens=30)
    assert all(words(span.text) <= 30 for span in spans)
    assert covered(text, spans)


def test_a_sentence_longer_than_the_cap_is_cut_between_words():
    text = " ".join(f"word{n}" for n in range(500))  # no sentence end at all
    spans = chunks_of(text, max_tokens=64)
    assert all(words(span.text) <= 64 for span in spans)
    assert all(re.fullmatch(r"word\d+( word\d+)*", span.text) for span in spans)
    assert covered(text, spans)


def test_a_word_longer_than_a_chunk_is_sliced():
    text = "start " + "x" * 5000 + " end"
    spans = chunks_of(text, target=1000)
    assert all(len(span.text) <= 1000 for span in spans)
    assert_exact(text, spans)
    assert covered(text, spans)


def test_the_tokenizers_fixed_overhead_counts_against_the_cap():
    def with_cls_sep(text: str) -> int:
        return len(text.split()) + 2

    spans = chunk(sentences(40), count_tokens=with_cls_sep, max_tokens=50)
    assert all(with_cls_sep(span.text) <= 50 for span in spans)


def test_chunks_never_span_two_headings():
    text = f"# Introduction\n\n{sentences(3)}\n\n## Methods\n\n{sentences(3)}\n\n## Results\n\nIt works."
    spans = chunks_of(text)
    assert [span.heading for span in spans] == ["Introduction", "Methods", "Results"]
    assert spans[1].text.startswith("## Methods")
    assert spans[2].text == "## Results\n\nIt works."


def test_heading_is_the_nearest_one_above_the_chunk():
    text = f"Preamble without a heading.\n\n# Part one\n\n{sentences(30)}"
    spans = chunks_of(text, target=400)
    assert spans[0].heading == ""
    assert all(span.heading == "Part one" for span in spans[1:])


def test_a_heading_with_no_text_of_its_own_joins_the_next_section():
    text = f"# Title\n\n## Abstract\n\n{sentences(2)}"
    [span] = chunks_of(text)
    assert span.text.startswith("# Title\n\n## Abstract")
    assert span.heading == "Title"


def test_chunks_stay_on_one_page():
    pages_text = [sentences(10, f"Page {n}") for n in (1, 2, 3)]
    text = "\n\n".join(pages_text)
    pages, offset = [], 0
    for number, page_text in enumerate(pages_text, start=1):
        pages.append((number, offset, offset + len(page_text)))
        offset += len(page_text) + 2
    spans = chunks_of(text, pages=pages, target=300)
    for span in spans:
        [(number, _, end)] = [page for page in pages if page[1] <= span.start < page[2]]
        assert span.page == number
        assert span.end <= end
    assert [span.page for span in spans] == sorted(span.page for span in spans)
    assert {span.page for span in spans} == {1, 2, 3}
    assert covered(text, spans)


def test_a_short_page_is_a_chunk_of_its_own():
    text = f"{sentences(3)}\n\nPage two."
    spans = chunks_of(text, pages=[(1, 0, len(text) - 11), (2, len(text) - 9, len(text))])
    assert [(span.text, span.page) for span in spans][-1] == ("Page two.", 2)


def test_no_pages_means_page_none():
    assert all(span.page is None for span in chunks_of(sentences(30)))


@pytest.mark.parametrize("ending", [".", "!", "?", "…"])
def test_russian_sentences_split_too(ending):
    text = " ".join(f"Предложение номер {n} рассказывает о маршрутизации токенов{ending}" for n in range(40))
    spans = chunks_of(text, target=300, overlap=0)
    assert all(len(span.text) <= 300 for span in spans)
    assert all(span.text.endswith(ending) for span in spans)
    assert_exact(text, spans)
