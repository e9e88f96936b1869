"""Search over a user's own chunks: owner scoping, BM25, fusion, MMR, exact and HNSW paths."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test.utils import CaptureQueriesContext

from retrieval import search
from retrieval.ingest import index_documents
from retrieval.models import Chunk, KeywordStats, Posting, TermStat, UploadedDocument
from retrieval.parsing import ParsedDocument
from retrieval.search import (
    dense_search,
    fuse,
    hybrid_search,
    keyword_search,
    mmr_order,
    nearest_chunks,
    reciprocal_rank_fusion,
)


def new_upload(owner, name: str) -> UploadedDocument:
    sha256 = hashlib.sha256(f"{owner.pk}/{name}".encode()).hexdigest()
    return UploadedDocument.objects.create(owner=owner, file=f"x/{sha256}", original_name=name, sha256=sha256)


def add_documents(owner, texts: dict[str, str]) -> dict[str, UploadedDocument]:
    """Index each text as one document (real chunking and the real model)."""
    uploads = {name: new_upload(owner, name) for name in texts}
    index_documents([(uploads[name], ParsedDocument(text)) for name, text in texts.items()])
    return uploads


def names(passages) -> list[str]:
    return [passage.document_name for passage in passages]


def unit(vector) -> list[float]:
    array = np.asarray(vector, dtype=np.float64)
    return (array / np.linalg.norm(array)).tolist()


def add_vectors(owner, vectors: list[list[float]], name: str = "vectors") -> list[int]:
    upload = new_upload(owner, name)
    chunks = Chunk.objects.bulk_create(
        Chunk(
            document=upload, owner=owner, position=n, text=f"v{n}", char_start=0, char_end=2, embedding=vector
        )
        for n, vector in enumerate(vectors)
    )
    return [item.pk for item in chunks]


NOTES = {
    "quokka.md": "Quokkas live on Rottnest Island and are known for their smiles.",
    "routing.md": "Mixture of Tokens routes every token to all experts with learned weights.",
    "cat.md": "The feline rested on the rug all afternoon.",
    "error.md": "Billing log entry XQ-7781 was archived last night.",
    "decoy.md": "Error XQ-7871 occurred while copying files.",
    "tokens_ru.md": "Смесь токенов направляет токены ко всем экспертам сразу.",
}


@pytest.fixture
def alices_notes(alice):
    return add_documents(alice, NOTES)


# --- Owner scoping ---------------------------------------------------------------------------------


@pytest.mark.parametrize("search_function", [dense_search, keyword_search, hybrid_search])
def test_bob_never_sees_alices_chunks(alices_notes, bob, search_function):
    add_documents(bob, {"bobs.md": "Bob's own note about quokkas and their island."})
    for query in ("quokka smiles on Rottnest Island", "mixture of tokens experts", "XQ-7781"):
        assert set(names(search_function(bob, query, k=10))) <= {"bobs.md"}
    assert "quokka.md" in names(search_function(alices_notes["quokka.md"].owner, "quokka", k=10))


@pytest.mark.parametrize("search_function", [dense_search, keyword_search, hybrid_search])
def test_anonymous_and_empty_queries_find_nothing(alices_notes, search_function):
    assert search_function(AnonymousUser(), "quokka") == []
    assert search_function(alices_notes["quokka.md"].owner, "   ") == []


def test_passages_carry_their_document_and_ranks(alices_notes, alice):
    [top] = hybrid_search(alice, "quokka smiles", k=1)
    chunk = Chunk.objects.get(pk=top.chunk_id)
    assert top.document_id == alices_notes["quokka.md"].pk
    assert top.document_name == "quokka.md"
    assert top.text == chunk.text
    assert top.page is None
    assert top.dense_rank == 1
    assert top.keyword_rank == 1
    assert 0 < top.score <= 1


# --- Keyword leg -----------------------------------------------------------------------------------


def test_keyword_search_matches_stems_in_english_and_russian(alices_notes, alice):
    assert names(keyword_search(alice, "routing tokens"))[0] == "routing.md"
    assert names(keyword_search(alice, "токены экспертов")) == ["tokens_ru.md"]


def test_keyword_search_finds_nothing_for_stop_words_only(alices_notes, alice):
    assert keyword_search(alice, "the of and") == []


def test_bm25_beats_ts_rank_where_saturation_and_length_matter(alice):
    # A long note repeats "quokka" and mentions "habitat" once among many other words; a short
    # one says "quokka habitat" once each. ts_rank (no length normalisation, no idf) prefers the
    # repetition; BM25 saturates the repeated term and discounts the long note's length.
    texts = {
        "long.md": "Quokka " * 8 + f"habitat, {FILLER}.",
        "short.md": "The quokka habitat is scrub on small islands.",
        **{f"other{n}.md": f"Quokka sighting number {n} near the ferry." for n in range(4)},
    }
    add_documents(alice, texts)
    query = "quokka habitat"
    assert names(keyword_search(alice, query))[:2] == ["short.md", "long.md"]
    assert ts_rank_order(alice, query)[:2] == ["long.md", "short.md"]


FILLER = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike oscar papa quebec"
    " romeo sierra tango uniform victor whiskey yankee zulu red orange yellow green blue indigo violet"
    " black white grey brown pink january february march april june july august september october"
    " december monday tuesday wednesday thursday friday saturday sunday river mountain forest desert"
    " ocean valley canyon meadow glacier volcano bridge castle harbour market garden library museum"
)


def ts_rank_order(owner, query: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH q AS (SELECT replace(plainto_tsquery('simple', %s)::text, ' & ', ' | ')::tsquery AS q)
            SELECT d.original_name
            FROM retrieval_chunk c JOIN retrieval_uploadeddocument d ON d.id = c.document_id, q
            WHERE c.owner_id = %s AND to_tsvector('simple', c.text) @@ q.q
            ORDER BY ts_rank(to_tsvector('simple', c.text), q.q) DESC
            """,
            [query, owner.pk],
        )
        return [row[0] for row in cursor.fetchall()]


def test_keyword_index_follows_inserts_and_deletes(alices_notes, alice):
    stats = KeywordStats.objects.get(owner=alice)
    assert stats.chunk_count == Chunk.objects.filter(owner=alice).count() == len(NOTES)
    assert TermStat.objects.get(owner=alice, term="token").df == 1
    assert TermStat.objects.get(owner=alice, term="xq").df == 2
    decoy = Chunk.objects.get(document=alices_notes["decoy.md"])
    # PostgreSQL's parser reads "XQ-7871" as the word "xq" and the signed number "-7871".
    terms = {p.term for p in Posting.objects.filter(chunk=decoy)}
    assert terms == {"error", "xq", "-7871", "occur", "copi", "file"}
    alices_notes["decoy.md"].delete()
    assert KeywordStats.objects.get(owner=alice).chunk_count == len(NOTES) - 1
    assert TermStat.objects.get(owner=alice, term="xq").df == 1
    assert not TermStat.objects.filter(owner=alice, term="occur").exists()
    assert not Posting.objects.filter(chunk_id=decoy.pk).exists()
    assert Posting.objects.filter(owner=alice).count() == sum(
        TermStat.objects.filter(owner=alice).values_list("df", flat=True)
    )


def test_keyword_index_follows_an_edited_chunk(alices_notes, alice):
    chunk = Chunk.objects.get(document=alices_notes["quokka.md"])
    chunk.text = "Wombats dig burrows."
    chunk.save()
    assert names(keyword_search(alice, "wombat burrows")) == ["quokka.md"]
    assert keyword_search(alice, "Rottnest") == []
    assert KeywordStats.objects.get(owner=alice).chunk_count == len(NOTES)


def test_a_term_repeated_in_a_chunk_counts_in_its_posting(alice):
    add_documents(alice, {"repeat.md": "Quokka quokka quokka, and one wallaby."})
    counts = dict(Posting.objects.filter(owner=alice).values_list("term", "tf"))
    assert counts == {"quokka": 3, "one": 1, "wallabi": 1}


# --- Hybrid ----------------------------------------------------------------------------------------


def test_hybrid_finds_what_only_the_dense_leg_finds(alices_notes, alice):
    passages = hybrid_search(alice, "a cat sleeping on a mat", k=3, candidates=3)
    cat = next(p for p in passages if p.document_name == "cat.md")
    assert cat.keyword_rank is None
    assert cat.dense_rank == 1


def test_hybrid_finds_what_only_the_keyword_leg_finds(alice):
    # Codes that look alike to the embedding model; only the exact one shares the query's words.
    decoys = {
        f"decoy{n}.md": f"Error {code} occurred while copying files." for n, code in enumerate(DECOY_CODES)
    }
    # The code is a small part of what the passage is about, so its embedding barely shows it.
    billing = (
        "Quarterly billing summary: invoices were reconciled, payments posted, refunds issued to three "
        "customers, and the ledger was closed for the month; the auditors signed off on Friday and the "
        "archive job, entry XQ-7781, ran last night."
    )
    add_documents(alice, {"error.md": billing, **decoys})
    passages = hybrid_search(alice, "XQ-7781", k=3, candidates=3)
    error = next(p for p in passages if p.document_name == "error.md")
    assert error.dense_rank is None
    assert error.keyword_rank is not None


DECOY_CODES = ["XQ-7871", "XQ-7187", "XQ-1778", "QX-7781 and XQ-8177", "XR-7781"]


def test_fuse_is_a_convex_combination_of_min_max_scores():
    dense = [(1, 0.9), (2, 0.5), (3, 0.1)]
    keyword = [(3, 12.0), (4, 2.0)]
    assert fuse(dense, keyword, 1.0)[:3] == [(1, 1.0), (2, 0.5), (3, 0.0)]
    assert fuse(dense, keyword, 0.0)[0] == (3, 1.0)
    fused = dict(fuse(dense, keyword, 0.5))
    assert fused == pytest.approx({1: 0.5, 2: 0.25, 3: 0.5, 4: 0.0})


def test_reciprocal_rank_fusion_adds_up_the_legs():
    fused = dict(reciprocal_rank_fusion([[1, 2], [2]], k=60))
    assert fused == pytest.approx({1: 1 / 61, 2: 1 / 62 + 1 / 61})


# --- MMR -------------------------------------------------------------------------------------------


def test_mmr_skips_near_duplicates():
    vectors = {1: unit([1, 0, 0]), 2: unit([1, 0.01, 0]), 3: unit([0.6, 0.8, 0])}
    ranked = [(1, 0.9), (2, 0.89), (3, 0.8)]
    as_arrays = {key: np.asarray(value) for key, value in vectors.items()}
    assert [chunk_id for chunk_id, _ in mmr_order(ranked, as_arrays, 2, relevance_weight=1.0)] == [1, 2]
    assert [chunk_id for chunk_id, _ in mmr_order(ranked, as_arrays, 2, relevance_weight=0.5)] == [1, 3]


def test_hybrid_search_with_mmr_spreads_over_documents(alice, settings):
    settings.RETRIEVAL_RELEVANCE_FLOOR = 0.0  # about diversity: the loosely related note stays
    # e5's similarities sit in a narrow band (unrelated text ≈ 0.75), so redundancy separates
    # duplicates from the rest by less than MiniLM's did: it takes a low λ to prefer the other.
    duplicate = "Quokkas smile at tourists on Rottnest Island."
    add_documents(alice, {f"copy{n}.md": duplicate for n in range(3)})
    add_documents(alice, {"other.md": "Quokka populations on the mainland are declining."})
    plain = names(hybrid_search(alice, "quokka island smiles", k=2))
    diverse = names(hybrid_search(alice, "quokka island smiles", k=2, mmr=0.1))
    assert plain[1].startswith("copy")
    assert diverse[1] == "other.md"


# --- Dense leg: exact scan and HNSW ----------------------------------------------------------------


@pytest.fixture
def vectors_of_two_owners(alice, bob):
    rng = np.random.default_rng(0)
    alices = [unit(rng.normal(size=384)) for _ in range(300)]
    bobs = [unit(rng.normal(size=384)) for _ in range(3)]
    return add_vectors(alice, alices), add_vectors(bob, bobs), alices


def test_exact_and_hnsw_paths_agree(vectors_of_two_owners, alice):
    alice_ids, _, alices = vectors_of_two_owners
    for query in alices[:5]:
        exact = nearest_chunks(alice.pk, query, 10, exact=True)
        approximate = nearest_chunks(alice.pk, query, 10, exact=False)
        assert [chunk_id for chunk_id, _ in approximate] == [chunk_id for chunk_id, _ in exact]
        assert exact[0][1] == pytest.approx(1.0, abs=1e-5)
        assert {chunk_id for chunk_id, _ in exact} <= set(alice_ids)


def test_hnsw_path_uses_the_index(vectors_of_two_owners, alice):
    _, _, alices = vectors_of_two_owners
    with connection.cursor() as cursor:
        # On a table this small the planner would rather sort; forbid that to see the index plan.
        cursor.execute("SET enable_seqscan = off")
        cursor.execute("SET enable_sort = off")
        try:
            with CaptureQueriesContext(connection) as queries:
                nearest_chunks(alice.pk, alices[0], 10, exact=False)
            [sql] = [query["sql"] for query in queries.captured_queries if "nearest AS" in query["sql"]]
            cursor.execute("EXPLAIN " + sql)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")
            cursor.execute("RESET enable_sort")
    assert "chunk_embedding_hnsw" in plan


def test_hnsw_owner_filter_does_not_starve_a_small_owner(vectors_of_two_owners, bob):
    _, bob_ids, alices = vectors_of_two_owners
    found = nearest_chunks(bob.pk, alices[0], 10, exact=False, ef_search=10)
    assert sorted(chunk_id for chunk_id, _ in found) == sorted(bob_ids)


def test_small_owners_get_an_exact_scan_and_large_ones_the_index(vectors_of_two_owners, alice, monkeypatch):
    _, _, alices = vectors_of_two_owners

    def sql_of_search() -> str:
        with CaptureQueriesContext(connection) as queries:
            nearest_chunks(alice.pk, alices[0], 5)
        return " ".join(query["sql"] for query in queries.captured_queries)

    assert "hnsw.ef_search" not in sql_of_search()
    monkeypatch.setattr(search, "EXACT_SEARCH_MAX_CHUNKS", 100)
    assert "hnsw.iterative_scan" in sql_of_search()
