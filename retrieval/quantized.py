"""Binary-quantised vectors for large private corpora: search 384 bits, then re-score exactly.

Each embedding's signs (`binary_quantize`) make a 48-byte bit string, 32 times smaller than the
1,536-byte vector, and Hamming distance between bit strings is far cheaper than a cosine. An
HNSW index over the bit strings finds `rescore` × k candidates; their full-precision vectors,
read from the table, pick the k nearest by cosine. bench/binary.py measures recall and
latency against the plain HNSW index on the same vectors.

It is an option (RETRIEVAL_BINARY_QUANTIZATION=1), for corpora where the float index no longer
fits in memory: `manage.py binary_index` builds its index once (concurrently, without locking
uploads out); until then the option falls back to the plain index.
"""

from __future__ import annotations

from django.db import connection, transaction

from retrieval.embeddings import EMBEDDING_DIMENSIONS, model_id

INDEX_NAME = "chunk_embedding_binary_hnsw"
# Candidates per result re-scored at full precision. 384 sign bits are coarse: bench/binary.py
# measured recall@10 0.88 at 4 and 0.98 at 16 on SciFact's MiniLM embeddings (0.77 and 0.90 on
# 180k synthetic near-duplicates, where even an exact Hamming scan reaches only 0.92 at 16).
RESCORE = 16
EF_SEARCH = 200
_BITS = f"binary_quantize(embedding)::bit({EMBEDDING_DIMENSIONS})"


def index_exists() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [INDEX_NAME])
        return bool(cursor.fetchone()[0])


def create_index(*, concurrently: bool = True) -> None:
    """The HNSW index over the bit strings (m and ef_construction as the float index's)."""
    how = "CONCURRENTLY " if concurrently else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE INDEX {how}IF NOT EXISTS {INDEX_NAME} ON retrieval_chunk"
            f" USING hnsw (({_BITS}) bit_hamming_ops) WITH (m = 16, ef_construction = 64)"
        )


def drop_index(*, concurrently: bool = True) -> None:
    how = "CONCURRENTLY " if concurrently else ""
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX {how}IF EXISTS {INDEX_NAME}")


def nearest_chunks_binary(
    owner_id: int,
    literal: str,
    limit: int,
    *,
    rescore: int = RESCORE,
    ef_search: int = EF_SEARCH,
    model: str | None = None,
) -> list[tuple[int, float]]:
    """The owner's `limit` chunks of `model` (the configured one by default) nearest to the
    vector `literal`, as (id, cosine similarity).

    The bit-string index brings `rescore` × `limit` candidates by Hamming distance (with an
    iterative scan, so the owner filter cannot starve it); their float vectors decide.
    """
    candidates = max(limit * rescore, limit)
    model = model or model_id()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('hnsw.ef_search', %s, true),"
            " set_config('hnsw.iterative_scan', 'relaxed_order', true)",
            [str(max(ef_search, candidates))],
        )
        cursor.execute(
            f"""
            WITH candidates AS MATERIALIZED (
                SELECT id, embedding FROM retrieval_chunk
                WHERE owner_id = %(owner)s AND embedding_model = %(model)s AND embedding IS NOT NULL
                ORDER BY {_BITS} <~> binary_quantize(%(vector)s::vector)
                LIMIT %(candidates)s
            )
            SELECT id, 1 - (embedding <=> %(vector)s::vector) AS similarity FROM candidates
            ORDER BY embedding <=> %(vector)s::vector, id LIMIT %(limit)s
            """,  # noqa: S608 — only constants are formatted in
            {"vector": literal, "owner": owner_id, "model": model, "candidates": candidates, "limit": limit},
        )
        return cursor.fetchall()
