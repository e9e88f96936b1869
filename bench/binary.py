"""Benchmark: binary-quantised vectors with re-scoring against the plain HNSW index.

The option RETRIEVAL_BINARY_QUANTIZATION (retrieval/quantized.py) searches an HNSW index over
each embedding's 384 sign bits by Hamming distance, then re-scores `rescore` × k candidates
with their full-precision vectors. Measured, on a database of its own:

- real embeddings: SciFact's 5,183 abstracts (title + text, from ../shared/benchmarks/scifact as
  bench/retrieval.py reads them) embedded with the configured model (`model` in the output), as
  one owner's chunks among 200k others;
- scale: 200,000 synthetic vectors made from them the way bench/retrieval.py makes its own
  (interpolations between neighbouring embeddings, plus noise), for two owners (180k, 20k);

recall@10 against exact search and query latency p50/p95 for the plain index (ef_search 200,
as in retrieval/search.py) and for the binary index at several re-scoring factors; index
sizes and build times. Queries are SciFact's, embedded as queries. Prints JSON.

    nice -n 19 .venv/bin/python bench/binary.py [--queries 200] [--documents N] [--reuse]

--documents N embeds only the first N abstracts (a short run that goes through every step;
its figures are not the benchmark's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, argument_parser, setup_django
from bench.retrieval import (
    BENCHMARKS,
    SCALE_OWNERS,
    copy_vectors,
    load_corpus,
    load_queries,
    percentiles,
    rebuild_hnsw,
    rnd,
    synthetic_vectors,
)

DATABASE = "mindsearch_bench_binary"
SCIFACT = BENCHMARKS / "scifact"
REAL_OWNER = "bench-binary-scifact"
RESCORE_SWEEP = (1, 2, 4, 8, 16)
PLAIN_EF_SEARCH = 200
K = 10


def main() -> None:
    args = parse_args()
    reused = open_database(args.reuse)
    from django.contrib.auth.models import User

    from retrieval.embeddings import embed, embed_queries, model_id

    owners = {name: User.objects.get_or_create(username=name)[0] for name in (REAL_OWNER, *SCALE_OWNERS)}
    queries = list(load_queries(SCIFACT / "queries.jsonl").values())[: args.queries]
    query_vectors = embed_queries(queries)
    result: dict[str, Any] = {"model": model_id(), "queries": len(query_vectors), "reused": reused}
    if not reused:
        result.update(load_vectors(owners, embed, args.documents))
    for name, user in owners.items():
        vectors = owner_vectors(user)
        label = f"{name} ({len(vectors)} vectors)"
        result[label] = compare(user.pk, query_vectors)
        result[label]["binary, exact Hamming scan (no index) rescore=16"] = quantisation_only(
            vectors, query_vectors, 16
        )
    print(json.dumps(result, indent=2))


def open_database(reuse: bool) -> bool:
    """A fresh bench database, or with --reuse the one a previous run loaded (True then)."""
    if reuse and not os.environ.get("DATABASE_URL") and (url := existing_database_url(DATABASE)):
        os.environ["DATABASE_URL"] = url
        setup_django(DATABASE)
        from retrieval import quantized

        return quantized.index_exists()
    setup_django(DATABASE)
    return False


def existing_database_url(name: str) -> str | None:
    import psycopg

    from mindsearch import embedded_db

    data_dir = Path(os.environ.get("MINDSEARCH_DATA_DIR") or ROOT / "var").resolve()
    host = embedded_db.start(data_dir)["HOST"]
    with psycopg.connect(host=host, user="postgres", dbname="postgres", autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
    return f"postgres://postgres@{quote(host, safe='')}/{name}" if found else None


def load_vectors(owners: dict[str, Any], embed: Any, documents: int | None) -> dict[str, Any]:
    corpus = list(load_corpus(SCIFACT / "corpus.jsonl").values())[:documents]
    started = time.perf_counter()
    real = np.asarray(embed(corpus), dtype=np.float32)
    embedding_seconds = time.perf_counter() - started
    copy_vectors(owners[REAL_OWNER], real)
    rng = np.random.default_rng(7)
    for name, count in SCALE_OWNERS.items():
        copy_vectors(owners[name], synthetic_vectors(real, count, rng))
    return {
        "vectors": len(real) + sum(SCALE_OWNERS.values()),
        "embedding_seconds": rnd(embedding_seconds),
        "indexes": build_indexes(),
    }


def owner_vectors(owner: Any) -> np.ndarray:
    from retrieval.models import Chunk

    rows = Chunk.objects.filter(owner=owner).order_by("id").values_list("embedding", flat=True)
    return np.asarray([np.asarray(vector, dtype=np.float32) for vector in rows])


def quantisation_only(vectors: np.ndarray, query_vectors: list[list[float]], rescore: int) -> dict[str, Any]:
    """Recall@10 of exact Hamming search on the sign bits plus re-scoring, without any index:
    what quantisation alone loses, apart from the approximate index."""
    bits = vectors > 0
    recalls = []
    for query in np.asarray(query_vectors, dtype=np.float32):
        truth = set(np.argsort(-(vectors @ query))[:K])
        hamming = np.count_nonzero(bits != (query > 0), axis=1)
        candidates = np.argsort(hamming, kind="stable")[: K * rescore]
        best = candidates[np.argsort(-(vectors[candidates] @ query))[:K]]
        recalls.append(len(truth & set(best)) / K)
    return {"recall@10": rnd(statistics.mean(recalls), 4)}


def parse_args() -> argparse.Namespace:
    parser = argument_parser(__doc__)
    parser.add_argument("--queries", type=int, default=200, help="SciFact queries to search with")
    parser.add_argument(
        "--documents", type=int, default=None, help="embed only the first N abstracts (a short run)"
    )
    parser.add_argument("--reuse", action="store_true", help="keep the vectors and indexes of a previous run")
    return parser.parse_args()


def build_indexes() -> dict[str, Any]:
    from django.db import connection

    from retrieval import quantized

    plain = rebuild_hnsw()
    started = time.perf_counter()
    quantized.create_index(concurrently=False)
    binary = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE retrieval_chunk")
        sizes = {}
        for name in ("chunk_embedding_hnsw", quantized.INDEX_NAME):
            cursor.execute("SELECT pg_relation_size(%s::regclass)", [name])
            sizes[name] = cursor.fetchone()[0]
    return {
        "plain_hnsw": {"build_seconds": rnd(plain), "size_mb": rnd(sizes["chunk_embedding_hnsw"] / 2**20)},
        "binary_hnsw": {"build_seconds": rnd(binary), "size_mb": rnd(sizes[quantized.INDEX_NAME] / 2**20)},
    }


def compare(owner_id: int, query_vectors: list[list[float]]) -> dict[str, Any]:
    """Recall@10 against exact search and latency, plain index and binary at each re-scoring."""
    from retrieval import quantized, search

    truth, exact_times = [], []
    for vector in query_vectors:
        seconds, found = timed(lambda vector=vector: search.nearest_chunks(owner_id, vector, K, exact=True))
        truth.append({i for i, _ in found})
        exact_times.append(seconds)
    result: dict[str, Any] = {"exact_ms": percentiles(exact_times)}
    result[f"plain_hnsw ef_search={PLAIN_EF_SEARCH}"] = measure(
        query_vectors,
        truth,
        lambda vector: search.nearest_chunks(owner_id, vector, K, exact=False, ef_search=PLAIN_EF_SEARCH),
    )
    for rescore in RESCORE_SWEEP:
        result[f"binary rescore={rescore}"] = measure(
            query_vectors,
            truth,
            lambda vector, r=rescore: quantized.nearest_chunks_binary(
                owner_id, literal(vector), K, rescore=r
            ),
        )
    result["binary rescore=16 ef_search=400"] = measure(
        query_vectors,
        truth,
        lambda vector: quantized.nearest_chunks_binary(
            owner_id, literal(vector), K, rescore=16, ef_search=400
        ),
    )
    return result


def literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{value:.8g}" for value in vector) + "]"


def measure(vectors: list[list[float]], truth: list[set[int]], search_one: Any) -> dict[str, Any]:
    recalls, times = [], []
    search_one(vectors[0])  # warm the index pages
    for vector, expected in zip(vectors, truth, strict=True):
        seconds, found = timed(lambda vector=vector: search_one(vector))
        times.append(seconds)
        recalls.append(len({i for i, _ in found} & expected) / len(expected))
    return {"recall@10": rnd(statistics.mean(recalls), 4), "ms": percentiles(times)}


def timed(work: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    found = work()
    return time.perf_counter() - started, found


if __name__ == "__main__":
    main()
