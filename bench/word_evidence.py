"""Where "word evidence first" (retrieval/search.py, WORD_EVIDENCE_FIRST) can move a ranking, on a
BEIR collection's training judgments, without embedding anything.

    nice -n 5 .venv/bin/python bench/word_evidence.py [--collection scifact]

The rule fuses ahead of all others the passages holding at least LEXICAL_MIN_SHARE of a query's
distinct stems (the query having LEXICAL_MIN_STEMS or more), and lets them past the relevance
floor; every other passage keeps its hybrid order. Here each whole document (its "# title" and
text, as bench/retrieval.py loads it) is tested with the same PostgreSQL stemming
(`mindsearch_stem`) and the same thresholds. A passage is part of its document, so a passage the
rule promotes lies in a document found here: the documents found are a superset of what the rule
can promote. With binary judgments, putting relevant documents first and letting relevant ones
past the floor never lowers a query's nDCG@10 (the k-th relevant document's rank can only
improve), so:

- a query for which no document is found ranks exactly as without the rule;
- a query whose documents found are all relevant can only gain;
- only the queries listed under `could_lose` (a document found that is not judged relevant) can
  lose, each by at most its own nDCG@10 — a bound on the whole set's loss is their share.

Prints JSON: the queries, those the rule can touch, those that can only gain, those that can lose
(with the documents found), and the bound. Needs no model and takes seconds.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import argument_parser, print_report, setup_django  # noqa: E402
from bench.retrieval import BENCHMARKS, load_corpus, load_qrels, load_queries, select_queries  # noqa: E402


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--collection", default="scifact", help="a folder of ../shared/benchmarks")
    args = parser.parse_args()
    setup_django("mindsearch_bench_word_evidence")
    folder = BENCHMARKS / args.collection
    corpus = load_corpus(folder / "corpus.jsonl")
    qrels = load_qrels(folder / "qrels" / "train.tsv")
    queries = select_queries(load_queries(folder / "queries.jsonl"), qrels, "")
    print_report(analyse(corpus, queries, qrels) | {"collection": args.collection}, ok=True)


def analyse(
    corpus: dict[str, str], queries: dict[str, str], qrels: dict[str, dict[str, int]]
) -> dict[str, Any]:
    from django.db import connection

    from retrieval import search
    from retrieval.models import KEYWORD_CONFIG

    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE bench_doc (id text PRIMARY KEY, body text)")
        cursor.executemany("INSERT INTO bench_doc VALUES (%s, %s)", list(corpus.items()))
        cursor.execute(
            """
            CREATE TEMP TABLE bench_term AS
            SELECT id, unnest(tsvector_to_array(to_tsvector(%s::regconfig, body))) AS term FROM bench_doc
            """,
            [KEYWORD_CONFIG],
        )
        cursor.execute("CREATE INDEX ON bench_term (term)")
        touched: dict[str, list[str]] = {}
        short = 0
        for query_id, text in queries.items():
            cursor.execute(
                """
                WITH stems AS (
                    SELECT tsvector_to_array(to_tsvector(%(config)s::regconfig, %(query)s)) AS terms
                )
                SELECT t.id, cardinality(stems.terms) FROM bench_term AS t, stems
                WHERE cardinality(stems.terms) >= %(least)s AND t.term = ANY(stems.terms)
                GROUP BY t.id, cardinality(stems.terms)
                HAVING count(*) >= %(share)s * cardinality(stems.terms)
                """,
                {
                    "config": KEYWORD_CONFIG,
                    "query": text,
                    "least": search.LEXICAL_MIN_STEMS,
                    "share": search.LEXICAL_MIN_SHARE,
                },
            )
            found = sorted(doc_id for doc_id, _ in cursor.fetchall())
            cursor.execute(
                "SELECT cardinality(tsvector_to_array(to_tsvector(%s::regconfig, %s)))",
                [KEYWORD_CONFIG, text],
            )
            if cursor.fetchone()[0] < search.LEXICAL_MIN_STEMS:
                short += 1
            if found:
                touched[query_id] = found
    gain_only = [q for q, found in touched.items() if set(found) <= set(qrels[q])]
    could_lose = {
        q: {"query": queries[q], "found": found, "relevant": sorted(qrels[q])}
        for q, found in touched.items()
        if not set(found) <= set(qrels[q])
    }
    return {
        "documents": len(corpus),
        "queries": len(queries),
        "queries_under_min_stems": short,
        "min_stems": search.LEXICAL_MIN_STEMS,
        "min_share": search.LEXICAL_MIN_SHARE,
        "queries_touched": len(touched),
        "queries_that_can_only_gain": len(gain_only),
        "queries_that_can_lose": len(could_lose),
        "largest_possible_ndcg10_loss": round(len(could_lose) / len(queries), 4),
        "could_lose": could_lose,
    }


if __name__ == "__main__":
    main()
