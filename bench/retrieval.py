"""Benchmark: private-document retrieval on BEIR-format collections, and HNSW at scale.

By default two collections, each loaded for a bench user of its own through retrieval.ingest's
chunk → embed → store path (one document per corpus row, "# title" then the text), in a
database of its own: SciFact (5,183 English abstracts, English claims) and XQuAD-ru (240
Wikipedia paragraphs in Russian beside their 240 English originals, Russian questions; both
versions relevant). `--corpus/--queries/--qrels` measure any other BEIR-format collection
instead. Prints one JSON object with, per collection:

- quality: nDCG@10 and recall@100 of the dense leg, the keyword leg (BM25), plain convex fusion
  and the hybrid as retrieval/search.py runs it (fusion per language), per document (a document
  scores as its best chunk), on the judgments given; and per language of the relevant
  documents, the share of them each ranking puts in its top 10;
- fusion: nDCG@10 over a grid of the dense weight and the other-language weight, and RRF —
  tune on training judgments only; the hybrid row always uses the weights in search.py;
- floor: the relevance floor's calibration. Every query of the other collection is asked of
  this one, where it has nothing to find: for the floor in search.py (standings above the
  background passages, search.Floor), a grid of standings and plain cosine floors, the share
  of those "absent" queries left with no passage, the share of this collection's queries that
  keep a relevant document in the hybrid top 10, and the hybrid nDCG@10;
- latency: hybrid_search p50/p95, HNSW recall@10 against exact search, and the first search
  of a new process right after the model is preloaded (as web and worker do at start);
- ingestion: chunks/s of the load; with --throughput-docs N, the ingestion path against the
  bare model on N documents;
- scale (SciFact only, unless --skip-scale): 200,000 synthetic vectors (interpolations between
  neighbouring embeddings, plus noise) for two owners (180k and 20k chunks), the HNSW index
  rebuilt, recall@10 against exact search and latency per ef_search.

    nice -n 10 .venv/bin/python bench/retrieval.py [--skip-scale] [--reuse]
        [--corpus PATH --queries PATH --qrels PATH] [--queries-subset N|FILE]

--reuse keeps the bench database and loads only what is missing (an interrupted load goes on
where it stopped; documents embedded with another model are loaded again).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, argument_parser, setup_django

DATABASE = "mindsearch_bench_retrieval"
SKIP_TS_RANK = False
BENCHMARKS = ROOT.parent / "shared" / "benchmarks"
EVALUATION_DEPTH = 200  # chunks per leg; more than 100 documents survive the max-per-document
INGEST_BATCH = 64  # documents per index_documents call (each call is one transaction)
SCALE_OWNERS = {"bench-scale-a": 180_000, "bench-scale-b": 20_000}
SCALE_QUERIES = 100
EF_SEARCH_SWEEP = (40, 64, 100, 200, 400)
HYBRID_CANDIDATES = 100  # hybrid_search's default
LATENCY_QUERIES = 100
DENSE_WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7)
OTHER_LANGUAGE_OFFSETS = (0.0, 0.02, 0.04, 0.05, 0.06, 0.08)
OTHER_LANGUAGE_WEIGHTS = (0.8, 0.9, 1.0)
COSINE_FLOORS = (0.78, 0.79, 0.8, 0.81, 0.82, 0.83, 0.84)
# search.Floor(z, z + 0.5, z - 0.5): the shape of the calibrated one, higher or lower.
FLOOR_STANDINGS = (3.0, 3.25, 3.5, 3.75, 4.0, 4.25, 4.5, 5.0)
# Whole floors (same language sharing a word, sharing none, other language) beside the grid.
FLOORS = ((3.0, 4.5, 3.5), (3.25, 4.5, 3.5), (3.0, 4.0, 3.5), (3.0, 4.5, 4.0), (3.25, 4.5, 4.0))
# Two floors: the first decides whether anything matches, the second which passages are shown.
GATES = ((3.5, 4.5, 3.5), (3.75, 4.5, 3.75), (4.0, 4.5, 4.0), (4.0, 5.0, 4.0), (4.25, 5.0, 4.25))
PASSAGE_FLOORS = ((2.0, 3.0, 2.0), (2.5, 3.5, 2.5), (3.0, 3.5, 3.0))
Qrels = dict[str, dict[str, int]]
Ranked = list[tuple[int, float]]
Run = dict[str, Ranked]


@dataclass
class Collection:
    name: str
    corpus_path: Path
    queries_path: Path
    qrels_path: Path
    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: Qrels
    owner: Any = None

    @property
    def user(self) -> str:
        return f"bench-{self.name}"


def main() -> None:
    args = parse_args()
    global SKIP_TS_RANK
    SKIP_TS_RANK = args.skip_ts_rank
    setup = open_database(args.reuse)
    from django.contrib.auth.models import User

    collections = load_collections(args)
    measured = [collection for collection in collections if not args.only or collection.name in args.only]
    result: dict[str, Any] = {"model": model_name()}
    for collection in sorted(measured, key=lambda collection: len(collection.corpus)):
        collection.owner, _ = User.objects.get_or_create(username=collection.user)
        result[collection.name] = {
            "judgments": str(collection.qrels_path),
            "queries": len(collection.queries),
            "corpus": len(collection.corpus),
            "ingestion": ingest_corpus(collection.owner, collection.corpus, reuse=setup),
        }
    if args.load_only:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return
    for collection in measured:
        absent = {
            f"{other.name}:{query_id}": text
            for other in collections
            if other is not collection
            for query_id, text in other.queries.items()
        }
        report = result[collection.name]
        report.update(evaluate(collection.owner, collection.queries, collection.qrels, absent))
        report["latency"] = latency(collection.owner, collection.queries)
        if args.throughput_docs:
            report["ingestion"]["vs_raw_encode"] = throughput(collection.corpus, args.throughput_docs)
    result["first_search_after_start"] = first_search(measured[0])
    if not args.skip_scale and measured[0].name == "scifact":
        result["scale_200k"] = scale_run(measured[0].owner, measured[0].queries)
    print(json.dumps(result, indent=2, ensure_ascii=False))


def parse_args() -> argparse.Namespace:
    parser = argument_parser(__doc__)
    parser.add_argument("--corpus", help="a BEIR corpus.jsonl (instead of SciFact and XQuAD-ru)")
    parser.add_argument("--queries", help="its queries.jsonl (default: beside the corpus)")
    parser.add_argument("--qrels", help="its judgments, BEIR tsv (default: qrels/train.tsv beside it)")
    parser.add_argument(
        "--queries-subset", default="", help="N (the first N judged queries) or a file of query ids"
    )
    parser.add_argument("--skip-scale", action="store_true", help="skip the 200k synthetic-vector run")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the bench database; load only what is missing"
    )
    parser.add_argument(
        "--throughput-docs", type=int, default=0, help="documents in the ingestion-vs-raw-model sample"
    )
    parser.add_argument("--load-only", action="store_true", help="load the collections and stop")
    parser.add_argument(
        "--skip-ts-rank", action="store_true", help="leave out the ts_rank baseline (slow on SciFact)"
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="measure only this collection (repeatable); the others' queries still serve as absent ones",
    )
    return parser.parse_args()


def model_name() -> str:
    from retrieval.embeddings import model_id

    return model_id()


# --- Database and data ---------------------------------------------------------------------------


def open_database(reuse: bool) -> bool:
    """Set Django up on the bench database; True when an existing one was kept."""
    if reuse and not os.environ.get("DATABASE_URL") and (url := _existing_database_url()):
        os.environ["DATABASE_URL"] = url
        setup_django(DATABASE)
        return True
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


def load_collections(args: argparse.Namespace) -> list[Collection]:
    if args.corpus:
        corpus = Path(args.corpus)
        paths = [
            (
                corpus.parent.name or "custom",
                corpus,
                Path(args.queries or corpus.parent / "queries.jsonl"),
                Path(args.qrels or corpus.parent / "qrels" / "train.tsv"),
            )
        ]
    else:
        paths = [
            (
                name,
                BENCHMARKS / name / "corpus.jsonl",
                BENCHMARKS / name / "queries.jsonl",
                BENCHMARKS / name / "qrels" / "train.tsv",
            )
            for name in ("scifact", "xquad-ru")
        ]
    collections = []
    for name, corpus_path, queries_path, qrels_path in paths:
        qrels = load_qrels(qrels_path)
        queries = select_queries(load_queries(queries_path), qrels, args.queries_subset)
        collections.append(
            Collection(name, corpus_path, queries_path, qrels_path, load_corpus(corpus_path), queries, qrels)
        )
    return collections


def load_corpus(path: Path) -> dict[str, str]:
    corpus = {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            title = row.get("title", "").strip().replace("_", " ")
            text = row["text"].strip().lstrip("\ufeff")
            corpus[row["_id"]] = f"# {title}\n\n{text}" if title else text
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


def ingest_corpus(owner: Any, corpus: dict[str, str], *, reuse: bool) -> dict[str, Any]:
    """Load the documents not yet loaded with the configured model (all, without --reuse)."""
    from retrieval.embeddings import model_id
    from retrieval.ingest import index_documents
    from retrieval.models import Chunk, UploadedDocument

    documents = UploadedDocument.objects.filter(owner=owner)
    stale = Chunk.objects.filter(owner=owner).exclude(embedding_model=model_id()).values("document_id")
    documents.filter(pk__in=stale).delete()
    documents.exclude(status="ready").delete()
    loaded = set(documents.values_list("original_name", flat=True)) if reuse else set()
    if not reuse:
        documents.delete()
    missing = {doc_id: text for doc_id, text in corpus.items() if doc_id not in loaded}
    items = make_uploads(owner, missing)
    started = time.perf_counter()
    chunks = 0
    for number, batch in enumerate(batches(items, INGEST_BATCH), start=1):
        chunks += index_documents(batch)
        print(
            f"{owner.username}: {min(number * INGEST_BATCH, len(items))} of {len(items)} documents",
            file=sys.stderr,
            flush=True,
        )
    elapsed = time.perf_counter() - started
    return {
        "documents_loaded_now": len(items),
        "chunks_loaded_now": chunks,
        "seconds": round(elapsed, 1),
        "chunks_per_s": rnd(chunks / elapsed) if chunks else None,
        "chunks": Chunk.objects.filter(owner=owner).count(),
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

    from retrieval.embeddings import encoder
    from retrieval.ingest import chunk_document, embedding_text, index_documents
    from retrieval.parsing import ParsedDocument

    sample = dict(list(corpus.items())[:documents])
    spans = [span for text in sample.values() for span in chunk_document(ParsedDocument(text))]
    texts = [embedding_text(span) for span in spans]
    owner, _ = User.objects.get_or_create(username="bench-throughput")
    raw, ingested = [], []
    for _ in range(2):
        # The configured model alone, at embed()'s batch size, which index_documents uses.
        raw.append(len(texts) / timed(lambda: encoder().passages(texts, 32)))
        items = make_uploads(owner, sample)
        ingested.append(len(texts) / timed(partial(index_documents, items)))
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


@dataclass
class Case:
    """One question asked of a collection: what search.above_floor needs besides the ranking."""

    dense: Ranked
    keyword: Ranked
    language: str
    vector: list[float]
    similarity: dict[int, float | None]  # raw cosine; the floor judges it against the background
    shared: set[int]  # the chunks sharing a word with the question
    lexical: set[int]  # the chunks holding most of its words: past both floors (search.word_evidence)
    first: set[int]  # nearly all of them: fused ahead of the others
    subject: set[int]  # half of them: the subject is there (opens the floor from the top 3)


def evaluate(owner: Any, queries: dict[str, str], qrels: Qrels, absent: dict[str, str]) -> dict[str, Any]:
    from retrieval import search

    names = chunk_documents(owner)
    languages = chunk_languages(owner)
    ids, matrix = chunk_matrix(owner)
    cases = asked(owner, {**queries, **absent}, ids, matrix)
    runs: dict[str, Run] = {
        "dense": {query_id: cases[query_id].dense for query_id in queries},
        "keyword": {query_id: cases[query_id].keyword for query_id in queries},
    }

    def kept(query_id: str, ranked: Ranked, floors: tuple[Any, Any]) -> Ranked:
        """The product's rule (search.above_floor) with these floors: relevance, then passage."""
        case = cases[query_id]
        return search.above_floor(
            ranked,
            case.similarity,
            languages,
            case.language,
            case.vector,
            case.shared,
            floors,
            lexical=case.lexical,
            subject=case.subject,
        )

    def fused(fusion: Callable[[str, Ranked, Ranked], Ranked], questions: Iterable[str] = queries) -> Run:
        # As hybrid_search does by default: each leg brings HYBRID_CANDIDATES chunks.
        return {
            q: fusion(q, cases[q].dense[:HYBRID_CANDIDATES], cases[q].keyword[:HYBRID_CANDIDATES])
            for q in questions
        }

    def ranked_ids(ranked: Ranked) -> list[int]:
        return [chunk_id for chunk_id, _ in ranked]

    def by_language(
        dense_weight: float,
        offset: float,
        questions: Iterable[str] = queries,
        *,
        weight: float = search.OTHER_LANGUAGE_WEIGHT,
        first: bool = search.WORD_EVIDENCE_FIRST,
    ) -> Run:
        return fused(
            lambda q, d, k: search.fuse_by_language(
                d,
                k,
                languages,
                cases[q].language,
                dense_weight,
                weight,
                offset,
                lexical=cases[q].first if first else None,
            ),
            questions,
        )

    configured = (search.relevance_floor(), search.passage_floor())
    hybrid = by_language(search.DENSE_WEIGHT, search.OTHER_LANGUAGE_OFFSET)
    hybrid_floored = {q: kept(q, ranked, configured) for q, ranked in hybrid.items()}
    absent_hybrid = by_language(search.DENSE_WEIGHT, search.OTHER_LANGUAGE_OFFSET, absent)
    convex = fused(lambda q, d, k: search.fuse(d, k, search.DENSE_WEIGHT))
    doc_languages = document_languages(names, languages)
    quality = {
        "dense": metrics(runs["dense"], names, qrels),
        "keyword_bm25": metrics(runs["keyword"], names, qrels),
        "convex_fusion": {**metrics(convex, names, qrels), "dense_weight": search.DENSE_WEIGHT},
        "hybrid": {
            **metrics(hybrid_floored, names, qrels),
            "dense_weight": search.DENSE_WEIGHT,
            "other_language_weight": search.OTHER_LANGUAGE_WEIGHT,
            "other_language_offset": search.OTHER_LANGUAGE_OFFSET,
            "floor": str(configured[0]),
            "passage_floor": str(search.passage_floor()),
            "ndcg@10_without_floor": metrics(hybrid, names, qrels)["ndcg@10"],
        },
    }
    if not SKIP_TS_RANK:  # ten minutes on SciFact: the vector is computed per query
        quality["keyword_ts_rank"] = metrics(ts_rank_run(owner, queries), names, qrels)
    best_leg = max(("dense", "keyword"), key=lambda leg: statistics.mean(ndcgs(runs[leg], names, qrels)))
    quality["hybrid_minus_best_leg"] = paired_difference(
        ndcgs(hybrid_floored, names, qrels), ndcgs(runs[best_leg], names, qrels)
    )
    runs_by_name = {
        "dense": runs["dense"],
        "keyword_bm25": runs["keyword"],
        "convex_fusion": convex,
        "hybrid": hybrid_floored,
    }
    per_language = {
        name: relevant_in_top10_by_language(run, names, qrels, doc_languages)
        for name, run in runs_by_name.items()
    }
    grid = {
        f"dense {weight:.2f}, offset {offset:.2f}": metrics(by_language(weight, offset), names, qrels)[
            "ndcg@10"
        ]
        for weight in DENSE_WEIGHTS
        for offset in OTHER_LANGUAGE_OFFSETS
    }
    # The other language's treatment, with the floor as the product applies it (issue 28: decided
    # on this collection and on the mixed library of bench/library.py together).
    other_language = {
        f"offset {offset:.2f}, weight {weight:.1f}, word evidence first {'on' if first else 'off'}": metrics(
            {
                q: kept(q, ranked, configured)
                for q, ranked in by_language(search.DENSE_WEIGHT, offset, weight=weight, first=first).items()
            },
            names,
            qrels,
        )["ndcg@10"]
        for offset in OTHER_LANGUAGE_OFFSETS
        for weight in OTHER_LANGUAGE_WEIGHTS
        for first in (False, True)
    }
    rrf = fused(lambda q, d, k: search.reciprocal_rank_fusion([ranked_ids(d), ranked_ids(k)]))
    fusion = {
        "by_language_ndcg@10": grid,
        "best": max(grid, key=grid.__getitem__),
        "other_language_floored_ndcg@10": other_language,
        "rrf_k60": metrics(rrf, names, qrels),
        "bm25": {"k1": search.BM25_K1, "b": search.BM25_B},
    }
    return {
        "quality": quality,
        "relevant_in_top10_by_language": per_language,
        "fusion": fusion,
        "floor": calibrate_floor(hybrid, absent_hybrid, kept, names, qrels),
        "chunks": len(names),
    }


def asked(owner: Any, texts: dict[str, str], ids: list[int], matrix: np.ndarray) -> dict[str, Case]:
    """Each question's legs and what the floor reads, as hybrid_search computes them."""
    from retrieval import search
    from retrieval.chunking import language_of
    from retrieval.embeddings import embed_queries

    cases = {}
    for (key, text), vector in zip(texts.items(), embed_queries(list(texts.values())), strict=True):
        cosine = matrix @ np.asarray(vector, dtype=np.float32)
        words = search.word_evidence(owner.pk, text)
        cases[key] = Case(
            dense=search.nearest_chunks(owner.pk, vector, EVALUATION_DEPTH),
            keyword=search.bm25_chunks(owner.pk, text, EVALUATION_DEPTH),
            language=language_of(text),
            vector=vector,
            similarity=dict(zip(ids, cosine.tolist(), strict=True)),
            shared=search.sharing_a_word(owner.pk, text),
            lexical=words.evidence,
            first=words.first,
            subject=words.subject,
        )
    return cases


def calibrate_floor(
    hybrid: Run,
    absent: Run,
    kept: Callable[[str, Ranked, tuple[Any, Any]], Ranked],
    names: dict[int, str],
    qrels: Qrels,
) -> dict[str, Any]:
    """Per pair of floors (relevance, then passage; one floor is both): the share of queries
    with a relevant document in the hybrid top 10 that still have one there once the floors have
    dropped what they drop, the hybrid nDCG@10, and the share of absent queries (another
    collection's, with their own hybrid rankings) told nothing — search.above_floor's rule."""
    from retrieval import search

    answerable = [
        query_id
        for query_id, ranked in hybrid.items()
        if set(best_per_document(ranked, names)[:10]) & qrels[query_id].keys()
    ]

    def measured(floor: Any, passage: Any = None) -> dict[str, float]:
        floors = (floor, floor if passage is None else passage)
        run = {q: kept(q, ranked, floors) for q, ranked in hybrid.items()}
        kept_relevant = [
            bool(set(best_per_document(run[q], names)[:10]) & qrels[q].keys()) for q in answerable
        ]
        nothing = [not kept(q, ranked, floors) for q, ranked in absent.items()]
        return {
            "relevant_kept": rnd(sum(kept_relevant) / max(len(kept_relevant), 1), 4),
            "absent_answered_nothing": rnd(sum(nothing) / max(len(nothing), 1), 4),
            "hybrid_ndcg@10": metrics(run, names, qrels)["ndcg@10"],
        }

    return {
        "queries_with_a_relevant_document_in_top10": len(answerable),
        "absent_queries": len(absent),
        "configured": {
            "floor": str(search.relevance_floor()),
            "passage_floor": str(search.passage_floor()),
            **measured(search.relevance_floor(), search.passage_floor()),
        },
        "by_standing": {f"{z:.2f}": measured(search.Floor(z, z + 0.5, z - 0.5)) for z in FLOOR_STANDINGS},
        "by_cosine_floor": {f"{value:.2f}": measured(value) for value in COSINE_FLOORS},
        "by_floor": {str(values): measured(search.Floor(*values)) for values in FLOORS},
        "gated": {
            f"{strict} then {lenient}": measured(search.Floor(*strict), search.Floor(*lenient))
            for strict in GATES
            for lenient in PASSAGE_FLOORS
        },
    }


def relevant_in_top10_by_language(
    run: Run, names: dict[int, str], qrels: Qrels, doc_languages: dict[str, str]
) -> dict[str, float]:
    found: dict[str, list[int]] = defaultdict(list)
    for query_id, ranked in run.items():
        top = set(best_per_document(ranked, names)[:10])
        for doc in qrels[query_id]:
            found[doc_languages.get(doc, "")].append(int(doc in top))
    return {language or "unknown": rnd(statistics.mean(hits), 4) for language, hits in sorted(found.items())}


def chunk_languages(owner: Any) -> dict[int, str]:
    from retrieval.models import Chunk

    return dict(Chunk.objects.filter(owner=owner).values_list("id", "language"))


def document_languages(names: dict[int, str], languages: dict[int, str]) -> dict[str, str]:
    """A document's language: the most common of its chunks'."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for chunk_id, doc in names.items():
        counts[doc][languages.get(chunk_id, "")] += 1
    return {doc: max(by_language, key=by_language.__getitem__) for doc, by_language in counts.items()}


def chunk_matrix(owner: Any) -> tuple[list[int], np.ndarray]:
    from retrieval.embeddings import model_id
    from retrieval.models import Chunk

    rows = Chunk.objects.filter(owner=owner, embedding_model=model_id()).values_list("id", "embedding")
    ids = [chunk_id for chunk_id, _ in rows]
    return ids, np.asarray([np.asarray(vector, dtype=np.float32) for _, vector in rows])


def paired_difference(ours: list[float], theirs: list[float]) -> dict[str, float | list[float]]:
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
    """PostgreSQL's ts_rank on the 'simple' configuration (no stemming: Russian and English
    words alike), OR of the query's words: the usual baseline. The vector is computed here, per
    query: nothing in the product ranks this way, so no column or index is kept for it."""
    from django.db import connection

    run = {}
    with connection.cursor() as cursor:
        for query_id, text in queries.items():
            cursor.execute(
                """
                WITH q AS (
                    SELECT replace(plainto_tsquery('simple', %(text)s)::text, ' & ', ' | ')::tsquery AS q
                )
                SELECT c.id, ts_rank(to_tsvector('simple', c.text), q.q) AS rank FROM retrieval_chunk c, q
                WHERE c.owner_id = %(owner)s AND to_tsvector('simple', c.text) @@ q.q
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

    sample = list(queries.values())[:LATENCY_QUERIES]
    vectors = [embed_query(text) for text in sample]
    parts = {
        "hybrid_search_ms": [timed(partial(search.hybrid_search, owner, text, k=10)) for text in sample],
        "embed_query_ms": [timed(partial(embed_query, text)) for text in sample],
        "dense_leg_ms": [timed(partial(search.nearest_chunks, owner.pk, vector, 100)) for vector in vectors],
        "keyword_leg_ms": [timed(partial(search.bm25_chunks, owner.pk, text, 100)) for text in sample],
    }
    recall, hnsw_times, exact_times = [], [], []
    for vector in vectors[:50]:
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


def first_search(collection: Collection) -> dict[str, Any]:
    """A new process: the model preloaded as web and worker do at start, then one search timed."""
    query = next(iter(collection.queries.values()))
    code = f"""
import json, os, sys, time
sys.path.insert(0, {str(ROOT)!r})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mindsearch.settings")
import django
django.setup()
from django.contrib.auth.models import User
from retrieval import embeddings, search
user = User.objects.get(username={collection.user!r})
preload = embeddings.preload()
started = time.perf_counter()
found = search.hybrid_search(user, {query!r}, k=10)
elapsed = time.perf_counter() - started
print(json.dumps({{"preload_s": round(preload, 2), "first_search_ms": round(1000 * elapsed),
                  "passages": len(found)}}))
"""
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ.copy()
    )
    return {"collection": collection.name, **json.loads(output.stdout.strip().splitlines()[-1])}


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

    from retrieval.embeddings import model_id
    from retrieval.models import UploadedDocument

    document = UploadedDocument.objects.create(
        owner=owner, file="bench/synthetic", original_name="synthetic", sha256="0" * 64, status="ready"
    )
    # embedding_model and language have no database default (Django fills them): searches
    # compare a query only with chunks of the configured model, so these carry its name.
    model = model_id()
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS chunk_embedding_hnsw")
        copy_sql = (
            "COPY retrieval_chunk (document_id, owner_id, position, text, char_start, char_end, heading,"
            " embedding, embedding_model, language) FROM STDIN"
        )
        with cursor.cursor.copy(copy_sql) as copy:
            for position, vector in enumerate(vectors):
                literal = "[" + ",".join(f"{value:.6f}" for value in vector) + "]"
                copy.write_row((document.pk, owner.pk, position, "", 0, 0, "", literal, model, ""))


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
