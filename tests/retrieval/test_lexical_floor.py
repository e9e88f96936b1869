"""Issue 28, finding 4: a sentence pasted from the user's own file is never "nothing matches".

The relevance floor judges a passage's embedding similarity against background passages; e5's
similarities sit in a narrow band, and a long bureaucratic sentence can stand below the floor
although the passage holds every one of its words. Words count as evidence too.
"""

from __future__ import annotations

import hashlib

from retrieval import search
from retrieval.ingest import index_documents
from retrieval.models import UploadedDocument
from retrieval.parsing import ParsedDocument
from retrieval.search import hybrid_search

# Written for this test, in the manner of an order's clauses.
ORDER_RU = (
    "# Порядок хранения\n\n"
    "Журнал учёта выдачи ключей от служебных помещений ведётся дежурным администратором в "
    "электронном виде и хранится не менее трёх лет после последней записи.\n\n"
    "Копии журнала передаются в архив организации ежегодно до первого февраля."
)
SENTENCE = (
    "Журнал учёта выдачи ключей от служебных помещений ведётся дежурным администратором в "
    "электронном виде и хранится не менее трёх лет после последней записи."
)
BREAD_EN = "Sourdough bread rises slowly because wild yeast and lactic bacteria ferment the dough for hours."


def add_documents(owner, texts: dict[str, str]) -> None:
    uploads = []
    for name, text in texts.items():
        sha256 = hashlib.sha256(f"{owner.pk}/{name}".encode()).hexdigest()
        upload = UploadedDocument(owner=owner, original_name=name, sha256=sha256)
        upload.file.name = f"x/{sha256}"
        upload.save()
        uploads.append((upload, ParsedDocument(text)))
    index_documents(uploads)


def below_every_floor(monkeypatch) -> None:
    """Every passage's similarity stands where the floor hides it (as the 21-word sentence of
    the issue did), whatever the model says today."""
    monkeypatch.setattr(search, "relevance_floor", lambda: search.Floor(3.5, 4.5, 3.5))
    monkeypatch.setattr(search, "passage_floor", lambda: search.Floor(2.5, 3.5, 2.5))
    monkeypatch.setattr(
        search, "standings", lambda vector, similarity, languages: dict.fromkeys(similarity, 1.0)
    )


def test_a_pasted_sentence_finds_its_passage_below_the_similarity_floor(alice, monkeypatch):
    add_documents(alice, {"order.md": ORDER_RU, "bread.md": BREAD_EN})
    below_every_floor(monkeypatch)
    found = hybrid_search(alice, SENTENCE, k=5)
    assert [passage.document_name for passage in found] == ["order.md"]
    assert SENTENCE in found[0].text
    # The dense leg alone applies the same rule.
    assert [passage.document_name for passage in search.dense_search(alice, SENTENCE, k=5)] == ["order.md"]


def test_words_count_only_for_a_query_of_enough_words_most_of_them_present(alice, monkeypatch):
    add_documents(alice, {"order.md": ORDER_RU, "bread.md": BREAD_EN})
    below_every_floor(monkeypatch)
    # Two words, both present: left to the similarity floor (two words can meet by chance).
    assert hybrid_search(alice, "журнал ключей", k=5) == []
    # A long query sharing only some of its words with the passage is not evidence either.
    unrelated = "Журнал посещений бассейна ведёт тренер, записывая время тренировок и число пловцов."
    assert hybrid_search(alice, unrelated, k=5) == []


def test_word_evidence_counts_the_share_of_the_query_stems(alice):
    add_documents(alice, {"order.md": ORDER_RU, "bread.md": BREAD_EN})
    matched = search.word_evidence(alice.pk, SENTENCE).evidence
    assert len(matched) == 1
    assert search.word_evidence(alice.pk, "журнал ключей").evidence == set()
    assert search.word_evidence(alice.pk, SENTENCE, []).evidence == set()
    # Within the candidates given only.
    assert search.word_evidence(alice.pk, SENTENCE, [max(matched) + 1000]).evidence == set()


def test_word_evidence_comes_before_a_passage_in_another_language():
    """Issue 28, finding 1: an unrelated passage in the other language, ranked by meaning alone
    with its offset, came before the passage holding the pasted sentence's own words."""
    dense = [(1, 0.86), (2, 0.84), (3, 0.83)]  # 1: another language, closest by the model
    keyword = [(2, 40.0), (3, 12.0)]  # 2 holds the sentence
    languages = {1: "ru", 2: "en", 3: "en"}
    plain = search.fuse_by_language(dense, keyword, languages, "en", 0.5, 1.0, 0.05)
    assert plain[0][0] == 1
    evidence = search.fuse_by_language(dense, keyword, languages, "en", 0.5, 1.0, 0.05, lexical={2})
    assert [chunk_id for chunk_id, _ in evidence] == [2, 1, 3]


def test_hybrid_search_puts_the_file_holding_the_sentence_first(alice, monkeypatch):
    add_documents(alice, {"order.md": ORDER_RU, "bread.md": BREAD_EN})
    # The dense leg is made to prefer the other language's passage, as it did in the issue.
    real = search.nearest_chunks

    def english_first(owner_id, vector, limit, **kwargs):
        ranked = real(owner_id, vector, limit, **kwargs)
        return sorted(
            ((c, s + (0.3 if search.chunk_languages({c})[c] == "en" else 0.0)) for c, s in ranked),
            key=lambda item: -item[1],
        )

    monkeypatch.setattr(search, "nearest_chunks", english_first)
    found = hybrid_search(alice, SENTENCE, k=5)
    assert found[0].document_name == "order.md"
    monkeypatch.setattr(search, "WORD_EVIDENCE_FIRST", False)
    assert hybrid_search(alice, SENTENCE, k=5)[0].document_name == "bread.md"


def standing_between_the_floors(monkeypatch) -> None:
    """Every passage stands above the passage floor and below the relevance floor: what a
    relevant passage does when the question is worded unlike it (SciFact's DESMOND claims)."""
    monkeypatch.setattr(search, "relevance_floor", lambda: search.Floor(3.5, 4.5, 3.5))
    monkeypatch.setattr(search, "passage_floor", lambda: search.Floor(2.5, 3.5, 2.5))
    monkeypatch.setattr(
        search, "standings", lambda vector, similarity, languages: dict.fromkeys(similarity, 3.0)
    )


# Five stems, three of them (ключ, журнал, хран-) in the order's first passage: the subject, not
# the sentence.
ABOUT_THE_ORDER = "Где хранится журнал ключей спортивного клуба?"


def test_a_passage_holding_half_of_the_question_s_words_opens_the_floor(alice, monkeypatch):
    add_documents(alice, {"order.md": ORDER_RU, "bread.md": BREAD_EN})
    standing_between_the_floors(monkeypatch)
    held, stems = search.stems_held(alice.pk, ABOUT_THE_ORDER)
    best = max(held.values())
    assert stems >= search.SUBJECT_MIN_STEMS
    assert search.SUBJECT_MIN_SHARE * stems <= best < search.LEXICAL_MIN_SHARE * stems, (held, stems)
    found = hybrid_search(alice, ABOUT_THE_ORDER, k=5)
    assert found and found[0].document_name == "order.md"
    assert "bread.md" in {passage.document_name for passage in found}  # shown down to the passage floor
    # Without the subject's words nothing reached the relevance floor: "nothing matches".
    monkeypatch.setattr(search, "SUBJECT_MIN_SHARE", 1.0)
    assert hybrid_search(alice, ABOUT_THE_ORDER, k=5) == []


def test_the_subject_needs_four_words_and_a_passage_among_the_first_three(alice, monkeypatch):
    add_documents(alice, {"order.md": ORDER_RU, "bread.md": BREAD_EN})
    standing_between_the_floors(monkeypatch)
    # Two words, both present: two words can meet by chance.
    assert hybrid_search(alice, "журнал ключей", k=5) == []
    # The passage holding the words is not among the first SUBJECT_TOP of the ranking.
    monkeypatch.setattr(search, "SUBJECT_TOP", 0)
    assert hybrid_search(alice, ABOUT_THE_ORDER, k=5) == []


def test_most_words_pass_the_floors_but_only_nearly_all_come_first(alice):
    add_documents(alice, {"order.md": ORDER_RU, "bread.md": BREAD_EN})
    # Ten stems; the order's first passage holds eight of them (not бассейн, тренер).
    query = "Журнал учёта выдачи ключей ведётся администратором бассейна и тренером в электронном виде"
    held, stems = search.stems_held(alice.pk, query)
    words = search.word_evidence(alice.pk, query)
    best = max(held, key=held.__getitem__)
    assert search.LEXICAL_MIN_SHARE * stems <= held[best] < search.FIRST_MIN_SHARE * stems, (held, stems)
    assert best in words.evidence and best in words.subject
    assert best not in words.first
    # The pasted sentence holds all of its own.
    assert search.word_evidence(alice.pk, SENTENCE).first == search.word_evidence(alice.pk, SENTENCE).evidence
