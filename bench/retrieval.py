"""Benchmark: private-document retrieval on SciFact, ingestion speed, and HNSW at scale.

Loads SciFact's 5,183 abstracts for a bench user through retrieval.ingest's chunk → embed →
store path (one document per abstract, "# title" then the abstract), in a database of its own,
then prints one JSON object:

- quality: nDCG@10 and recall@100 of the dense, keyword (BM25) and hybrid searches, per
  document (a document scores as its best chunk), on the judgments given (train by default);
- fusion: the hybrid's dense weight swept over 0…1, and RRF, on the same judgments — tune on
  train only; the hybrid row above always uses the weight in retrieval/search.py;
- ingestion: chunks/s through the ingestion path against the raw model's `encode` of the same
  texts (alternating runs on a sample, so load from other processes hits both alike);
- latency: hybrid_search p50/p95 at the SciFact scale, and HNSW recall@10 against exact search;
- scale: 200,000 synthetic vectors (interpolations between neighbouring SciFact embeddings,
  plus noise) bulk-loaded with COPY for two owners (180k and 20k chunks), the HNSW index
  rebuilt, then recall@10 against exact search and latency per ef_search.

    nice -n 19 .venv/bin/python bench/retrieval.py [--qrels PATH] [--queries-subset N|FILE]
        [--skip-scale] [--reuse]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, setup_django

DATABASE = "mindsearch_bench_retrieval"
SCIFACT = ROOT.parent / "shared" / "benchmarks" / "scifact"
BENCH_USER = "bench-retrieval"
EVALUATION_DEPTH = 200  # chunks per leg; more than 100 documents survive the max-per-document
INGEST_BATCH = 256  # documents per index_documents call
SCALE_OWNERS = {"bench-scale-a": 180_000, "bench-scale-b": 20_000}
SCALE_QUERIES = 100
EF_SEARCH_SWEEP = (40, 64, 100, 200, 400)
HYBRID_CANDIDATES = 100  # hybrid_search's default
Qrels = dict[str, dict[str, int]]
Ranked = list[tuple[int, float]]
Run = dict[str, Ranked]


def main() -> None:
    args = parse_args()
    reused = open_database(args.reuse)
    from django.contrib.auth.models import User

    corpus = load_corpus(SCIFACT / "corpus.jsonl")
    qrels = load_qrels(Path(args.qrels))
    queries = select_queries(load_queries(SCIFACT / "queries.jsonl"), qrels, args.queries_subset)
    owner, _ = User.objects.get_or_create(username=BENCH_USER)
    result: dict[str, Any] = {"qrels": str(args.qrels), "queries": len(queries), "corpus": len(corpus)}
    if not reused:
        result["ingestion"] = ingest_corpus(owner, corpus)
        result["ingestion"]["vs_raw_encode"] = throughput(corpus, args.throughput_docs)
    result.update(evaluate(owner, queries, qrels))
    result["latency_scifact"] = latency(owner, queries)
    if not args.skip_scale:
        result["scale_200k"] = scale_run(owner, queries)
    print(json.dumps(result, indent=2))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--qrels", default=str(SCIFACT / "qrels" / "train.tsv"), help="judgments (BEIR tsv)")
    parser.add_argument(
        "--queries-subset", default="", help="N (the first N judged queries) or a file of query ids"
    )
    parser.add_argument("--skip-scale", action="store_true", help="skip the 200k synthetic-vector run")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the bench database if SciFact is already loaded in it"
    )
    parser.add_argument("--throughput-docs", type=int, default=300, help="abstracts in the speed sample")
    return parser.parse_args()


# --- Database and data ---------------------------------------------------------------------------


def open_database(reuse: bool) -> bool:
    """Set Django up on the bench database; True when a loaded one was kept."""
    if reuse and not os.environ.get("DATABASE_URL") and (url := _existing_database_url()):
        os.environ["DATABASE_URL"] = url
        setup_django(DATABASE)
        return _scifact_loaded()
    setup_django(DATABASE)
    return False


def _existing_database_url() -> str | None:
    import psycopg

    from mindsearch import embedded_db

    data_dir = Path(os.environ.get("MINDSEARCH_DATA_DIR") or ROOT / "var").resolve()
    host = embedded_db.start(data_dir)["HOST"]
    with psycopg.connect(host=host, user="postgres", dbname="postgres", autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
    return f"postgres://postgres@{quote(host, safe='')}/{DATABASE}" if found else None


def _scifact_loaded() -> bool:
    from retrieval.models import UploadedDocument

    ready = UploadedDocument.objects.filter(owner__username=BENCH_USER, status="ready").count()
    return ready == sum(1 for _ in open(SCIFACT / "corpus.jsonl", encoding="utf-8"))


def load_corpus(path: Path) -> dict[str, str]:
    corpus = {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            corpus[row["_id"]] = f"# {row['title'].strip()}\n\n{row['text'].strip()}"
    return corpus


def load_queries(path: Path) -> dict[str, str]:
    with path.open(encoding="utf-8") as lines:
        return {row["_id"]: row["text"] for row in map(json.loads, lines)}


def load_qrels(path: Path) -> Qrels:
    qrels: Qrels = defaultdict(dict)
    with path.open(encoding="utf-8") as lines:
        for row in csv.DictReader(lines, delimiter="\t"):
            if int(row["score"]) > 0:
                qrels[row["query-id"]][row["corpus-id"]] = int(row["score"])
    return dict(qrels)


def select_queries(queries: dict[str, str], qrels: Qrels, subset: str) -> dict[str, str]:
    judged = [query_id for query_id in queries if query_id in qrels]
    if subset.isdigit():
        judged = judged[: int(subset)]
    elif subset:
        wanted = set(Path(subset).read_text(encoding="utf-8").split())
        judged = [query_id for query_id in judged if query_id in wanted]
    return {query_id: queries[query_id] for query_id in judged}


# --- Ingestion -----------------------------------------------------------------------------------


def ingest_corpus(owner: Any, corpus: dict[str, str]) -> dict[str, Any]:
    from retrieval.ingest import index_documents

    items = make_uploads(owner, corpus)
    started = time.perf_counter()
    chunks = sum(index_documents(batch) for batch in batches(items, INGEST_BATCH))
    elapsed = time.perf_counter() - started
    return {
        "documents": len(items),
        "chunks": chunks,
        "seconds": round(elapsed, 1),
        "chunks_per_s": rnd(chunks / elapsed),
    }


def make_uploads(owner: Any, corpus: dict[str, str]) -> list[tuple[Any, Any]]:
    from retrieval.models import UploadedDocument
    from retrieval.parsing import ParsedDocument

    uploads = UploadedDocument.objects.bulk_create(
        UploadedDocument(
            owner=owner,
            file=f"bench/{doc_id}",
            original_name=doc_id,
            sha256=hashlib.sha256(f"{owner.pk}/{doc_id}".encode()).hexdigest(),
            status=UploadedDocument.Status.EMBEDDING,
        )
        for doc_id in corpus
    )
    return [(upload, ParsedDocument(corpus[upload.original_name])) for upload in uploads]


def throughput(corpus: dict[str, str], documents: int) -> dict[str, Any]:
    """Ingestion against the bare model on the same texts, alternating (A B A B), same batch size."""
    from django.contrib.auth.models import User

    from retrieval.chunking import chunk
    from retrieval.embeddings import count_tokens, local_model
    from retrieval.ingest import embedding_text, index_documents

    sample = dict(list(corpus.items())[:documents])
    texts = [
        embedding_text(span) for text in sample.values() for span in chunk(text, count_tokens=count_tokens)
    ]
    owner, _ = User.objects.get_or_create(username="bench-throughput")
    raw, ingested = [], []
    for _ in range(2):
        raw.append(
            len(texts) / timed(lambda: local_model().encode(texts, batch_size=64, normalize_embeddings=True))
        )
        items = make_uploads(owner, sample)
        ingested.append(len(texts) / timed(lambda items=items: index_documents(items)))
        owner.uploads.all().delete()
    return {
        "sample_documents": len(sample),
        "sample_chunks": len(texts),
        "raw_encode_chunks_per_s": [rnd(value) for value in raw],
        "ingestion_chunks_per_s": [rnd(value) for value in ingested],
        "ratio": rnd(sum(ingested) / sum(raw)),
    }


def batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for first in range(0, len(items), size):
        yield items[first : first + size]


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


# --- Quality -------------------------------------------------------------------------------------


def evaluate(owner: Any, queries: dict[str, str], qrels: Qrels) -> dict[str, Any]:
    from retrieval import search
    from retrieval.embeddings import embed

    names = chunk_documents(owner)
    vectors = dict(zip(queries, embed(list(queries.values())), strict=True))
    runs: dict[str, Run] = {"dense": {}, "keyword": {}}
    for query_id, text in queries.items():
        runs["dense"][query_id] = search.nearest_chunks(owner.pk, vectors[query_id], EVALUATION_DEPTH)
        runs["keyword"][query_id] = search.bm25_chunks(owner.pk, text, EVALUATION_DEPTH)

    def fused(fusion: Callable[[Ranked, Ranked], Ranked]) -> Run:
        # As hybrid_search does by default: each leg brings HYBRID_CANDIDATES chunks.
        legs = {
            q: (runs["dense"][q][:HYBRID_CANDIDATES], runs["keyword"][q][:HYBRID_CANDIDATES]) for q in queries
        }
        return {q: fusion(*legs[q]) for q in queries}

    hybrid = fused(lambda dense, keyword: search.fuse(dense, keyword, search.DENSE_WEIGHT))
    quality = {
        "dense": metrics(runs["dense"], names, qrels),
        "keyword_bm25": metrics(runs["keyword"], names, qrels),
        "hybrid": {**metrics(hybrid, names, qrels), "dense_weight": search.DENSE_WEIGHT},
        "keyword_ts_rank": metrics(ts_rank_run(owner, queries), names, qrels),
    }
    best_leg = max(("dense", "keyword"), key=lambda leg: statistics.mean(ndcgs(runs[leg], names, qrels)))
    quality["hybrid_minus_best_leg"] = paired_difference(
        ndcgs(hybrid, names, qrels), ndcgs(runs[best_leg], names, qrels)
    )
    sweep = {
        f"{weight:.2f}": metrics(fused(lambda d, k, w=weight: search.fuse(d, k, w)), names, qrels)["ndcg@10"]
        for weight in np.linspace(0, 1, 21)
    }
    fusion = {
        "convex_ndcg@10_by_dense_weight": sweep,
        "best_dense_weight": float(max(sweep, key=sweep.get)),
        "rrf_k60": metrics(fused(search.reciprocal_rank_fusion), names, qrels),
        "bm25": {"k1": search.BM25_K1, "b": search.BM25_B},
    }
    return {"quality": quality, "fusion": fusion, "chunks": len(names)}


def paired_difference(ours: list[float], theirs: list[float]) -> dict[str, float]:
    """Mean per-query nDCG@10 difference with a 95% bootstrap interval, and wins/losses."""
    differences = np.asarray(ours) - np.asarray(theirs)
    rng = np.random.default_rng(1)
    samples = rng.choice(differences, (2000, len(differences))).mean(axis=1)
    low, high = np.percentile(samples, [2.5, 97.5])
    return {
        "mean": rnd(float(differences.mean()), 4),
        "ci95": [rnd(float(low), 4), rnd(float(high), 4)],
        "queries_better": int((differences > 0).sum()),
        "queries_worse": int((differences < 0).sum()),
    }


def chunk_documents(owner: Any) -> dict[int, str]:
    from retrieval.models import Chunk

    return dict(Chunk.objects.filter(owner=owner).values_list("id", "document__original_name"))


def ts_rank_run(owner: Any, queries: dict[str, str]) -> Run:
    """PostgreSQL's ts_rank on the 'simple' column, OR of the query's words: the usual baseline."""
    from django.db import connection

    run = {}
    with connection.cursor() as cursor:
        for query_id, text in queries.items():
            cursor.execute(
                """
                WITH q AS (
                    SELECT replace(plainto_tsquery('simple', %(text)s)::text, ' & ', ' | ')::tsquery AS q
                )
                SELECT c.id, ts_rank(c.search_vector, q.q) AS rank FROM retrieval_chunk c, q
                WHERE c.owner_id = %(owner)s AND c.search_vector @@ q.q
                ORDER BY rank DESC, c.id LIMIT %(limit)s
                """,
                {"text": text, "owner": owner.pk, "limit": EVALUATION_DEPTH},
            )
            run[query_id] = cursor.fetchall()
    return run


def metrics(run: Run, names: dict[int, str], qrels: Qrels) -> dict[str, float]:
    recalls = []
    for query_id, ranked in run.items():
        relevant = qrels[query_id]
        recalls.append(len(set(best_per_document(ranked, names)[:100]) & relevant.keys()) / len(relevant))
    ndcg_mean = statistics.mean(ndcgs(run, names, qrels))
    return {"ndcg@10": rnd(ndcg_mean, 4), "recall@100": rnd(statistics.mean(recalls), 4)}


def ndcgs(run: Run, names: dict[int, str], qrels: Qrels) -> list[float]:
    return [ndcg(best_per_document(ranked, names)[:10], qrels[query_id]) for query_id, ranked in run.items()]


def best_per_document(ranked: Ranked, names: dict[int, str]) -> list[str]:
    """Documents in the order of their best chunk (the ranked list is best first)."""
    seen: dict[str, None] = {}
    for chunk_id, _ in ranked:
        seen.setdefault(names[chunk_id], None)
    return list(seen)


def ndcg(documents: list[str], relevant: dict[str, int]) -> float:
    gain = sum(relevant.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(documents))
    ideal = sum(
        grade / math.log2(rank + 2) for rank, grade in enumerate(sorted(relevant.values(), reverse=True)[:10])
    )
    return gain / ideal if ideal else 0.0


# --- Latency at the SciFact scale ----------------------------------------------------------------


def latency(owner: Any, queries: dict[str, str]) -> dict[str, Any]:
    """hybrid_search end to end (query embedding included) and its parts, on 200 queries."""
    from retrieval import search
    from retrieval.embeddings import embed_query

    sample = list(queries.values())[:200]
    vectors = [embed_query(text) for text in sample]
    parts = {
        "hybrid_search_ms": [timed(lambda t=text: search.hybrid_search(owner, t, k=10)) for text in sample],
        "embed_query_ms": [timed(lambda t=text: embed_query(t)) for text in sample],
        "dense_leg_ms": [
            timed(lambda v=vector: search.nearest_chunks(owner.pk, v, 100)) for vector in vectors
        ],
        "keyword_leg_ms": [timed(lambda t=text: search.bm25_chunks(owner.pk, t, 100)) for text in sample],
    }
    recall, hnsw_times, exact_times = [], [], []
    for vector in vectors[:100]:
        started = time.perf_counter()
        approximate = search.nearest_chunks(owner.pk, vector, 10, exact=False)
        hnsw_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        exact = search.nearest_chunks(owner.pk, vector, 10, exact=True)
        exact_times.append(time.perf_counter() - started)
        recall.append(len({i for i, _ in approximate} & {i for i, _ in exact}) / len(exact))
    return {
        "chunks": search.owner_chunk_count(owner.pk),
        **{name: percentiles(times) for name, times in parts.items()},
        "dense_hnsw_top10_ms": percentiles(hnsw_times),
        "dense_exact_top10_ms": percentiles(exact_times),
        "hnsw_recall@10_vs_exact": rnd(statistics.mean(recall), 4),
        "ef_search": search.EF_SEARCH,
    }


def percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "p50": rnd(1000 * ordered[len(ordered) // 2]),
        "p95": rnd(1000 * ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]),
    }


# --- 200k synthetic vectors ----------------------------------------------------------------------


def scale_run(owner: Any, queries: dict[str, str]) -> dict[str, Any]:
    from django.contrib.auth.models import User

    from retrieval.embeddings import embed

    base = scifact_vectors(owner)
    rng = np.random.default_rng(7)
    owners = {name: User.objects.get_or_create(username=name)[0] for name in SCALE_OWNERS}
    started = time.perf_counter()
    for name, count in SCALE_OWNERS.items():
        copy_vectors(owners[name], synthetic_vectors(base, count, rng))
    loaded = time.perf_counter() - started
    build = rebuild_hnsw()
    query_vectors = embed(list(queries.values())[:SCALE_QUERIES])
    result: dict[str, Any] = {
        "vectors": sum(SCALE_OWNERS.values()),
        "copy_seconds": rnd(loaded),
        "hnsw_build_seconds": rnd(build),
    }
    for name, user in owners.items():
        result[f"{name} ({SCALE_OWNERS[name]} chunks)"] = sweep_ef(user, query_vectors)
    drop_scale_owners(list(owners.values()))
    return result


def scifact_vectors(owner: Any) -> np.ndarray:
    from retrieval.models import Chunk

    rows = Chunk.objects.filter(owner=owner).values_list("embedding", flat=True)
    return np.asarray([np.asarray(vector, dtype=np.float32) for vector in rows])


def synthetic_vectors(base: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Points between a real embedding and one of its 20 nearest neighbours, plus a little noise."""
    neighbours = nearest_neighbours(base, 20)
    first = rng.integers(0, len(base), count)
    second = neighbours[first, rng.integers(0, neighbours.shape[1], count)]
    mix = rng.uniform(0, 1, (count, 1)).astype(np.float32)
    points = mix * base[first] + (1 - mix) * base[second]
    points += rng.normal(0, 0.01, points.shape).astype(np.float32)
    return points / np.linalg.norm(points, axis=1, keepdims=True)


def nearest_neighbours(base: np.ndarray, count: int) -> np.ndarray:
    result = np.empty((len(base), count), dtype=np.int64)
    for first in range(0, len(base), 1024):
        similarity = base[first : first + 1024] @ base.T
        result[first : first + 1024] = np.argsort(-similarity, axis=1)[:, 1 : count + 1]
    return result


def copy_vectors(owner: Any, vectors: np.ndarray) -> None:
    from django.db import connection

    from retrieval.models import UploadedDocument

    document = UploadedDocument.objects.create(
        owner=owner, file="bench/synthetic", original_name="synthetic", sha256="0" * 64, status="ready"
    )
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS chunk_embedding_hnsw")
        copy_sql = (
            "COPY retrieval_chunk"
            " (document_id, owner_id, position, text, char_start, char_end, heading, embedding) FROM STDIN"
        )
        with cursor.cursor.copy(copy_sql) as copy:
            for position, vector in enumerate(vectors):
                literal = "[" + ",".join(f"{value:.6f}" for value in vector) + "]"
                copy.write_row((document.pk, owner.pk, position, "", 0, 0, "", literal))


def rebuild_hnsw() -> float:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '2GB'")
        cursor.execute("SET max_parallel_maintenance_workers = 1")
        cursor.execute(
            "CREATE INDEX IF NOT EXISTS chunk_embedding_hnsw ON retrieval_chunk"
            " USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
        )
        cursor.execute("ANALYZE retrieval_chunk")
    return time.perf_counter() - started


def sweep_ef(owner: Any, query_vectors: list[list[float]]) -> dict[str, Any]:
    from retrieval import search

    exact, exact_times = [], []
    for vector in query_vectors:
        started = time.perf_counter()
        exact.append({i for i, _ in search.nearest_chunks(owner.pk, vector, 10, exact=True)})
        exact_times.append(time.perf_counter() - started)
    result: dict[str, Any] = {"exact_top10_ms": percentiles(exact_times)}
    for ef in EF_SEARCH_SWEEP:
        recalls, times = [], []
        for vector, truth in zip(query_vectors, exact, strict=True):
            started = time.perf_counter()
            found = search.nearest_chunks(owner.pk, vector, 10, exact=False, ef_search=ef)
            times.append(time.perf_counter() - started)
            recalls.append(len({i for i, _ in found} & truth) / len(truth))
        result[f"ef_search={ef}"] = {"recall@10": rnd(statistics.mean(recalls), 4), "ms": percentiles(times)}
    return result


def drop_scale_owners(owners: list[Any]) -> None:
    from django.db import connection

    ids = [owner.pk for owner in owners]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM retrieval_chunk WHERE owner_id = ANY(%s)", [ids])
        # 200k dead entries would linger in the graph (and a later --reuse run would walk them).
        cursor.execute("REINDEX INDEX chunk_embedding_hnsw")
        cursor.execute("VACUUM ANALYZE retrieval_chunk")
    for owner in owners:
        owner.delete()


def rnd(value: float, digits: int = 1) -> float:
    return round(value, digits)


if __name__ == "__main__":
    main()
