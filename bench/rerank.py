"""Benchmark: what a reranker does to private-document retrieval, with a loopback reranker whose
scores are honest — built on the model MindSearch already ships (multilingual-e5-small).

For each judged query (training judgments only) of XQuAD-ru, and of SciFact with --scifact:
the hybrid search's pool (`retrieval.search.hybrid_search`, k = research.pipeline.rerank's
PASSAGE_POOL, as `private.find_passages` asks when a reranker is configured) is sent through
the real client (`mindsearch.clients.rerank`, HTTP to a loopback server speaking Jina's /rerank)
and the top 10 of the order it returns is compared with the hybrid's own top 10: nDCG@10 and
recall@10 per document (a document scores as its best chunk), the paired difference with a
bootstrap interval, and the reranker's latency per request.

The loopback reranker scores each (query, passage) pair with e5 embeddings, in two ways:

- `cosine`: the cosine of the query's and the passage's embeddings — the dense leg's own score,
  so this measures putting the hybrid's keyword evidence aside;
- `sentences`: the best of the passage's cosine and each of its sentences' cosines — a pair
  scored by the part of the passage closest to the query, which a whole-passage vector blurs.

Neither is a cross-encoder: a bi-encoder reranking its own retrieval cannot show what a real
reranker (Qwen3-Reranker, bge-reranker, Jina's or Cohere's) would do; see docs/BENCHMARKS.md.

    nice -n 10 .venv/bin/python bench/rerank.py [--reuse] [--queries-subset N]
        [--scifact | --scifact-only] [--scifact-docs N]

--scifact-docs N keeps SciFact's corpus at N abstracts (every abstract judged relevant to a
measured query, then others in a fixed order), since embedding all 5,183 is slow on a small
machine; the figures then come from an easier corpus and say so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import retrieval as bench_retrieval
from bench.common import argument_parser

DATABASE = "mindsearch_bench_rerank"
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-ZА-ЯЁ0-9«\"(])")


def main() -> None:
    args = parse_args()
    bench_retrieval.DATABASE = DATABASE
    reused = bench_retrieval.open_database(args.reuse)
    from django.conf import settings
    from django.contrib.auth.models import User

    from research.pipeline import rerank as pipeline_rerank
    from tests.support.rerank import rerank_settings, reranker

    names = ([] if args.scifact_only else ["xquad-ru"]) + (
        ["scifact"] if args.scifact or args.scifact_only else []
    )
    collections = [c for c in bench_retrieval.load_collections(args) if c.name in names]
    result: dict[str, Any] = {
        "model": bench_retrieval.model_name(),
        "pool": pipeline_rerank.PASSAGE_POOL,
        "judgments": "train",
    }
    scorer = E5Scorer()
    for collection in collections:
        if collection.name == "scifact" and args.scifact_docs:
            collection.corpus = subset_corpus(
                collection.corpus, collection.qrels, collection.queries, args.scifact_docs
            )
        collection.owner, _ = User.objects.get_or_create(username=f"bench-rerank-{collection.name}")
        report: dict[str, Any] = {
            "queries": len(collection.queries),
            "corpus": len(collection.corpus),
            "corpus_note": (
                f"subset: {len(collection.corpus)} of SciFact's 5,183 abstracts (every judged one kept)"
                if collection.name == "scifact" and args.scifact_docs
                else "whole collection"
            ),
            "ingestion": bench_retrieval.ingest_corpus(collection.owner, collection.corpus, reuse=reused),
        }
        for mode in ("cosine", "sentences"):
            with reranker("jina", score=scorer.scores(mode)) as service:
                for name, value in rerank_settings(service, model=f"loopback-e5-{mode}").items():
                    setattr(settings, name, value)
                settings.LIMIT_RERANK_RPS = 0  # measured alone: the limit would only add waiting
                settings.RERANK_TIMEOUT_SECONDS = 300  # the loopback embeds each new text on the CPU
                report[mode] = measure(collection)
        result[collection.name] = report
    print(json.dumps(result, indent=2, ensure_ascii=False))


def parse_args() -> argparse.Namespace:
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--reuse", action="store_true", help="keep the bench database; load only what is missing"
    )
    parser.add_argument(
        "--queries-subset", default="", help="N (the first N judged queries) or a file of query ids"
    )
    parser.add_argument("--scifact", action="store_true", help="measure SciFact too (slow to embed)")
    parser.add_argument("--scifact-only", action="store_true", help="measure SciFact alone")
    parser.add_argument("--scifact-docs", type=int, default=0, help="keep SciFact's corpus at N abstracts")
    args = parser.parse_args()
    args.corpus = args.queries = args.qrels = None
    return args


def subset_corpus(
    corpus: dict[str, str], qrels: bench_retrieval.Qrels, queries: dict[str, str], size: int
) -> dict[str, str]:
    relevant = {doc for query_id in queries for doc in qrels.get(query_id, {})}
    others = sorted(
        (doc for doc in corpus if doc not in relevant),
        key=lambda doc: hashlib.sha256(doc.encode()).hexdigest(),
    )
    keep = [doc for doc in corpus if doc in relevant] + others[: max(size - len(relevant), 0)]
    return {doc: corpus[doc] for doc in keep}


class E5Scorer:
    """Scores (query, passage) pairs with the bundled e5 model; embeddings are kept per text."""

    def __init__(self) -> None:
        self.passages: dict[str, np.ndarray] = {}
        self.queries: dict[str, np.ndarray] = {}

    def scores(self, mode: str) -> Any:
        def score(query: str, documents: list[str]) -> list[float]:
            q = self._query(query)
            values = []
            for text in documents:
                best = float(self._passages([text])[0] @ q)
                if mode == "sentences":
                    sentences = [s for s in SENTENCE.split(text) if len(s.split()) >= 3]
                    if len(sentences) > 1:
                        best = max(best, float(np.max(self._passages(sentences) @ q)))
                values.append(best)
            return values

        return score

    def _query(self, text: str) -> np.ndarray:
        from retrieval.embeddings import embed_query

        if text not in self.queries:
            self.queries[text] = np.asarray(embed_query(text), dtype=np.float32)
        return self.queries[text]

    def _passages(self, texts: list[str]) -> np.ndarray:
        from retrieval.embeddings import embed

        missing = [text for text in dict.fromkeys(texts) if text not in self.passages]
        for text, vector in zip(missing, embed(missing), strict=True):
            self.passages[text] = np.asarray(vector, dtype=np.float32)
        return np.stack([self.passages[text] for text in texts])


def measure(collection: bench_retrieval.Collection) -> dict[str, Any]:
    from asgiref.sync import async_to_sync

    from mindsearch.clients import rerank
    from research.pipeline import rerank as pipeline_rerank
    from retrieval.search import hybrid_search

    names = bench_retrieval.chunk_documents(collection.owner)
    base_ndcg: list[float] = []
    ranked_ndcg: list[float] = []
    base_recall: list[float] = []
    ranked_recall: list[float] = []
    seconds: list[float] = []
    moved = 0
    for query_id, text in collection.queries.items():
        pool = hybrid_search(collection.owner, text, k=pipeline_rerank.PASSAGE_POOL)
        started = time.perf_counter()
        order = (
            [item.index for item in async_to_sync(rerank.rerank)(text, [p.text for p in pool])]
            if pool
            else []
        )
        seconds.append(time.perf_counter() - started)
        baseline = [(p.chunk_id, p.score) for p in pool][:10]
        reranked = [(pool[i].chunk_id, 0.0) for i in order][:10]
        moved += int([chunk for chunk, _ in baseline] != [chunk for chunk, _ in reranked])
        relevant = collection.qrels[query_id]
        for ranking, ndcgs, recalls in (
            (baseline, base_ndcg, base_recall),
            (reranked, ranked_ndcg, ranked_recall),
        ):
            documents = bench_retrieval.best_per_document(ranking, names)[:10]
            ndcgs.append(bench_retrieval.ndcg(documents, relevant))
            recalls.append(len(set(documents) & relevant.keys()) / len(relevant))
    rnd = bench_retrieval.rnd
    return {
        "hybrid": {
            "ndcg@10": rnd(statistics.mean(base_ndcg), 4),
            "recall@10": rnd(statistics.mean(base_recall), 4),
        },
        "reranked": {
            "ndcg@10": rnd(statistics.mean(ranked_ndcg), 4),
            "recall@10": rnd(statistics.mean(ranked_recall), 4),
        },
        "ndcg@10_difference": bench_retrieval.paired_difference(ranked_ndcg, base_ndcg),
        "queries_whose_top10_changed": int(moved),
        "loopback_request_ms_embedding_included": bench_retrieval.percentiles(seconds),
    }


if __name__ == "__main__":
    main()
