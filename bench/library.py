"""A real mixed library: public test documents in Russian and English, uploaded and searched as a
user would, with sentences and questions made by another extractor than ours.

    .venv/bin/python bench/library_build.py          # once: the files and queries (see there)
    nice -n 10 .venv/bin/python bench/library.py [--folder bench/data/library] [--reuse]

Every file of the library (bench/library_manifest.tsv) goes through the upload check
(retrieval.uploads.accept_upload, as the documents page and the API call it) and the worker's
task (retrieval.tasks.ingest_document: parse, chunk, embed, store) into a database of its own.
Then each query is asked with retrieval.search.hybrid_search, as the search page and the research
pipeline ask, and its file's rank among the documents of the results is read: for a verbatim
sentence whether its file comes first, for a paraphrase whether it is in the top 3.

Prints JSON: per file type (PDF with text, scanned PDF, DOCX, other: RTF, HTML, Markdown, text)
and per language, files, files read, verbatim first / top 3 and paraphrase top 3; the misses with
what came first instead; and, from the same legs, the fusion's other-language offset and the
relevance floor's lexical rule varied (search.fuse_by_language, search.above_floor) — the
product's row is hybrid_search itself. --reuse keeps the database and loads only what is missing.
Exit 1 when a target is missed (verbatim first ≥ 90 %, paraphrase top 3 ≥ 90 %).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, argument_parser, print_report, setup_django

DATABASE = "mindsearch_bench_library"
DEFAULT_FOLDER = ROOT / "bench" / "data" / "library"
MANIFEST = ROOT / "bench" / "library_manifest.tsv"
USER = "bench-library"
TYPES = {"pdf": "PDF with text", "scanned pdf": "scanned PDF", "docx": "DOCX", "other": "RTF/HTML/MD/text"}
TARGET = 0.9
# (other-language offset, other-language weight, word evidence first in fusion, in the floor)
VARIANTS = (
    (0.05, 1.0, False, False),
    (0.05, 1.0, False, True),
    (0.0, 1.0, False, True),
    (0.02, 1.0, False, True),
    (0.05, 0.9, False, True),
    (0.05, 0.8, False, True),
    (0.05, 1.0, True, True),
    (0.02, 1.0, True, True),
    (0.0, 1.0, True, True),
)
DEPTH = 100  # hybrid_search's candidates per leg


def main() -> None:
    args = parse_args()
    reuse = open_database(args.reuse)
    from django.contrib.auth.models import User

    manifest = list(csv.DictReader(MANIFEST.open(encoding="utf-8"), delimiter="\t"))
    asked = json.loads((args.folder / "queries.json").read_text(encoding="utf-8"))["queries"]
    owner, _ = User.objects.get_or_create(username=USER)
    loading = load(owner, args.folder / "files", manifest, reuse=reuse)
    documents = loading.pop("documents")
    results = [ask(owner, query, documents) for query in asked]
    everything = summary(manifest, documents, results)
    report: dict[str, Any] = {
        "library": {"files": len(manifest), "queries": len(asked), **loading},
        "by_type": table(manifest, documents, results, key="type", labels=TYPES),
        "by_language": table(manifest, documents, results, key="language"),
        "all": everything,
        "variants": variants(owner, asked, documents),
        "misses": [result for result in results if not result["hit"]],
        "unread": {
            row["file"]: documents[row["file"]]["error"]
            for row in manifest
            if not documents[row["file"]]["ready"]
        },
    }
    ok = everything["verbatim_first"] >= TARGET and everything["paraphrase_top3"] >= TARGET
    print_report(report, ok=ok)


def open_database(reuse: bool) -> bool:
    """Django on the library's own database; True when an existing one was kept (--reuse)."""
    if reuse and not os.environ.get("DATABASE_URL"):
        from bench import retrieval as retrieval_bench

        retrieval_bench.DATABASE = DATABASE
        if url := retrieval_bench._existing_database_url():
            os.environ["DATABASE_URL"] = url
            setup_django(DATABASE)
            return True
    setup_django(DATABASE)
    return False


def load(owner: Any, folder: Path, manifest: list[dict[str, str]], *, reuse: bool) -> dict[str, Any]:
    """Upload and index each file as the app does; {name: {document id, ready, error, chunks}}."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from retrieval.embeddings import model_id
    from retrieval.models import UploadedDocument
    from retrieval.tasks import ingest_document
    from retrieval.uploads import UploadRejected, accept_upload

    if not reuse:
        UploadedDocument.objects.filter(owner=owner).delete()
    started, loaded_now = time.process_time(), 0
    documents: dict[str, dict[str, Any]] = {}
    for row in manifest:
        data = (folder / row["file"]).read_bytes()
        try:
            document, _ = accept_upload(owner, SimpleUploadedFile(row["file"], data))
        except UploadRejected as error:
            documents[row["file"]] = {"id": None, "ready": False, "error": error.message, "chunks": 0}
            continue
        stale = document.chunks.exclude(embedding_model=model_id()).exists()
        done = (UploadedDocument.Status.READY, UploadedDocument.Status.FAILED)
        if document.status not in done or stale:
            ingest_document(document.pk)
            loaded_now += 1
            document.refresh_from_db()
        ready = document.status == UploadedDocument.Status.READY
        documents[row["file"]] = {
            "id": document.pk,
            "ready": ready,
            "error": document.error,
            "chunks": document.chunk_count,
        }
        print(f"{row['file']}: {document.status} {document.chunk_count} {document.error}", file=sys.stderr)
    return {
        "documents": documents,
        "loaded_now": loaded_now,
        "load_cpu_seconds_this_process": round(time.process_time() - started, 1),
        "chunks": sum(document["chunks"] for document in documents.values()),
    }


def document_ranking(passages: list[Any]) -> list[int]:
    """The documents of ranked passages, each once, in the order of its best passage."""
    return list(dict.fromkeys(passage.document_id for passage in passages))


def ask(owner: Any, query: dict[str, str], documents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    from retrieval.search import hybrid_search

    passages = hybrid_search(owner, query["text"], k=10)
    ranking = document_ranking(passages)
    wanted = documents[query["file"]]["id"]
    rank = ranking.index(wanted) + 1 if wanted in ranking else None
    needed = 1 if query["kind"] == "verbatim" else 3
    first = passages[0] if passages else None
    return {
        "file": query["file"],
        "kind": query["kind"],
        "language": query["language"],
        "query": query["text"],
        "rank": rank,
        "top3": rank is not None and rank <= 3,
        "hit": rank is not None and rank <= needed,
        "first": first.document_name if first else None,
        "first_text": first.text[:160] if first else None,
    }


def counts(results: list[dict[str, Any]]) -> dict[str, Any]:
    verbatim = [result for result in results if result["kind"] == "verbatim"]
    paraphrase = [result for result in results if result["kind"] == "paraphrase"]
    return {
        "verbatim_first": f"{sum(result['rank'] == 1 for result in verbatim)}/{len(verbatim)}",
        "verbatim_top3": f"{sum(result['top3'] for result in verbatim)}/{len(verbatim)}",
        "paraphrase_top3": f"{sum(result['top3'] for result in paraphrase)}/{len(paraphrase)}",
    }


def table(
    manifest: list[dict[str, str]],
    documents: dict[str, dict[str, Any]],
    results: list[dict[str, Any]],
    *,
    key: str,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    value = {row["file"]: row[key] for row in manifest}
    groups: dict[str, list[str]] = defaultdict(list)
    for row in manifest:
        groups[row[key]].append(row["file"])
    rows = {}
    for group, files in sorted(groups.items()):
        label = (labels or {}).get(group, group or "no query")
        rows[label] = {
            "files": len(files),
            "read": sum(documents[name]["ready"] for name in files),
            **counts([result for result in results if value[result["file"]] == group]),
        }
    return rows


def share(results: list[dict[str, Any]], kind: str, needed: int) -> float:
    chosen = [result for result in results if result["kind"] == kind]
    return round(
        sum(result["rank"] is not None and result["rank"] <= needed for result in chosen)
        / max(len(chosen), 1),
        3,
    )


def summary(
    manifest: list[dict[str, str]], documents: dict[str, dict[str, Any]], results: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "files": len(manifest),
        "read": sum(document["ready"] for document in documents.values()),
        **counts(results),
        "verbatim_first": share(results, "verbatim", 1),
        "paraphrase_top3": share(results, "paraphrase", 3),
    }


def variants(owner: Any, asked: list[dict[str, str]], documents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The same legs fused with other other-language offsets, with and without the floor's
    lexical rule: verbatim first and paraphrase top 3 for each."""
    from bench.retrieval import asked as legs
    from bench.retrieval import chunk_documents, chunk_languages, chunk_matrix
    from retrieval import search

    names = chunk_documents(owner)
    languages = chunk_languages(owner)
    ids, matrix = chunk_matrix(owner)
    cases = legs(owner, {str(number): query["text"] for number, query in enumerate(asked)}, ids, matrix)
    floors = (search.relevance_floor(), search.passage_floor())
    by_name = {name: document["id"] for name, document in documents.items()}
    chunk_document = {chunk_id: by_name.get(name) for chunk_id, name in names.items()}
    out: dict[str, Any] = {}
    for offset, weight, first, floor_words in VARIANTS:
        results = []
        for number, query in enumerate(asked):
            case = cases[str(number)]
            fused = search.fuse_by_language(
                case.dense[:DEPTH],
                case.keyword[:DEPTH],
                languages,
                case.language,
                search.DENSE_WEIGHT,
                weight,
                offset,
                lexical=case.first if first else None,
            )
            kept = search.above_floor(
                fused,
                case.similarity,
                languages,
                case.language,
                case.vector,
                case.shared,
                floors,
                lexical=case.lexical if floor_words else None,
                subject=case.subject if floor_words else None,
            )
            ranking = list(dict.fromkeys(chunk_document[chunk_id] for chunk_id, _ in kept[:10]))
            wanted = by_name[query["file"]]
            rank = ranking.index(wanted) + 1 if wanted in ranking else None
            results.append({"kind": query["kind"], "rank": rank})
        name = (
            f"offset {offset:.2f}, other-language weight {weight:.1f}, "
            f"word evidence first {'on' if first else 'off'}, in the floor {'on' if floor_words else 'off'}"
        )
        out[name] = {
            "verbatim_first": share(results, "verbatim", 1),
            "verbatim_top3": share(results, "verbatim", 3),
            "paraphrase_top3": share(results, "paraphrase", 3),
        }
    return out


def parse_args() -> argparse.Namespace:
    parser = argument_parser(__doc__)
    parser.add_argument("--folder", type=Path, default=DEFAULT_FOLDER, help="bench/library_build.py's output")
    parser.add_argument("--reuse", action="store_true", help="keep the database; load only what is missing")
    return parser.parse_args()


if __name__ == "__main__":
    main()
