"""Benchmark: the local citation check (research/pipeline/citecheck.py) on material MindSearch did
not write, and where its thresholds come from.

Claim / source pairs from SciFact's train split (claims CC BY 4.0, abstracts ODC-By 1.0):

- supported: a claim and an abstract its annotators marked SUPPORT (the source is the title and
  the whole abstract, as a short page is sent to the model whole);
- another source: the same claim and the abstract that BM25 ranks first for it among those not
  judged for it — the closest wrong source there is, often on the very same narrow subject;
- related source: the same claim and an abstract BM25 ranks 20th–50th for it — a source of the
  same field, as the other sources of a report are;
- number changed: a supported claim whose number (one the abstract states) is replaced by one
  the abstract does not state;
- contradicted: a claim and an abstract marked CONTRADICT (reported on its own: words and
  embeddings cannot tell "raises" from "lowers", that is what the LLM pass is for).

And from XQuAD-ru (CC BY-SA 4.0; professionally translated Wikipedia paragraphs):

- Russian, another paragraph: a Russian sentence against its own paragraph (supported) and
  against the next paragraph of the same article (unsupported);
- across languages: an English sentence against the Russian translation of its paragraph
  (supported) — a Russian report citing an English page is the same case.

Claims with even query ids choose the thresholds (grid over the lexical weight and the two
thresholds: the lowest unsupported threshold whose detection precision is at least 0.9, then the
lowest supported threshold whose precision is at least 0.95); odd ids are reported, through
`citecheck.check` with the constants in the module, so what is printed is what the code does.
"Unsupported detection" counts a pair as caught when its verdict is unsupported; its positives
are "another source", "related source" and "number changed", its negatives "supported"; the
verdicts of each kind are printed too, so the closest-source case can be read on its own.

    nice -n 10 .venv/bin/python bench/citecheck.py [--limit N] [--no-embeddings]

Prints one JSON object. Needs no database.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, argument_parser

SCIFACT = ROOT.parent / "shared" / "benchmarks" / "scifact"
XQUAD = ROOT.parent / "shared" / "benchmarks" / "xquad-ru"
KINDS = ("supported", "another_source", "related_source", "number_changed")
POSITIVES = ("another_source", "related_source", "number_changed")
WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
UNSUPPORTED_PRECISION = 0.9
SUPPORTED_PRECISION = 0.95


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--limit", type=int, default=250, help="claims per kind and split (default 250)")
    parser.add_argument("--no-embeddings", action="store_true", help="words and numbers only")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mindsearch.settings")
    os.environ.setdefault("DEBUG", "1")
    import django

    django.setup()
    from research.pipeline import citecheck

    embedder = MemoEmbedder(disabled=args.no_embeddings)
    pairs = scifact_pairs(args.limit)
    tune = [p for p in pairs if p["split"] == "tune"]
    report = [p for p in pairs if p["split"] == "report"]
    started = time.perf_counter()
    for pair in pairs:
        pair["features"] = features(citecheck, pair, embedder)
    chosen = choose_thresholds(tune, with_embeddings=not args.no_embeddings)
    result: dict[str, Any] = {
        "benchmark": "citecheck",
        "embedding_backend": embedder.backend(),
        "pairs": dict(Counter(f"{p['split']}/{p['kind']}" for p in pairs)),
        "chosen_on_tune": chosen,
        "in_module": {
            "LEXICAL_WEIGHT": citecheck.LEXICAL_WEIGHT,
            "SUPPORTED_SCORE": citecheck.SUPPORTED_SCORE,
            "UNSUPPORTED_SCORE": citecheck.UNSUPPORTED_SCORE,
            "SUPPORTED_COVERAGE": citecheck.SUPPORTED_COVERAGE,
            "UNSUPPORTED_COVERAGE": citecheck.UNSUPPORTED_COVERAGE,
        },
        "report_split": evaluate(citecheck, report, embedder, args.no_embeddings),
        "russian": evaluate(citecheck, xquad_pairs(args.limit, across=False), embedder, args.no_embeddings),
        "across_languages": evaluate(
            citecheck, xquad_pairs(args.limit, across=True), embedder, args.no_embeddings
        ),
        "speed": speed(citecheck, report, embedder, args.no_embeddings),
        "features_seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result, indent=2, ensure_ascii=False))


class MemoEmbedder:
    """The project's embedding function, each distinct text embedded once (pairs share sources)."""

    def __init__(self, *, disabled: bool) -> None:
        self.disabled = disabled
        self.vectors: dict[str, list[float]] = {}
        self.seconds = 0.0

    def __call__(self, texts: list[str]) -> list[list[float]]:
        from retrieval import embeddings

        missing = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if missing:
            started = time.perf_counter()
            for text, vector in zip(missing, embeddings.embed(missing), strict=True):
                self.vectors[text] = vector
            self.seconds += time.perf_counter() - started
        return [self.vectors[t] for t in texts]

    def backend(self) -> str:
        from django.conf import settings

        if self.disabled:
            return "none"
        return f"{settings.EMBEDDING_BACKEND} {getattr(settings, 'EMBEDDING_MODEL', '')}".strip()


# --- Pairs ----------------------------------------------------------------------------------------


def scifact_pairs(limit: int) -> list[dict[str, Any]]:
    from research.pipeline.citecheck import numbers
    from research.pipeline.text import BM25, tokenize

    corpus = {}
    with open(SCIFACT / "corpus.jsonl") as handle:
        for line in handle:
            row = json.loads(line)
            corpus[row["_id"]] = f"{row['title']}. {row['text']}"
    train = set()
    judged: dict[str, set[str]] = {}
    with open(SCIFACT / "qrels" / "train.tsv") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            train.add(row["query-id"])
            judged.setdefault(row["query-id"], set()).add(row["corpus-id"])
    claims = []
    with open(SCIFACT / "queries.jsonl") as handle:
        for line in handle:
            row = json.loads(line)
            if row["_id"] in train and row["metadata"]:
                claims.append(row)
    ids = list(corpus)
    bm25 = BM25([tokenize(corpus[i]) for i in ids])
    pairs: list[dict[str, Any]] = []
    counts: Counter = Counter()
    rng = random.Random(12)
    for claim in claims:
        split = "tune" if int(claim["_id"]) % 2 == 0 else "report"
        for doc, evidence in claim["metadata"].items():
            labels = {e["label"] for e in evidence}
            if doc not in corpus or len(labels) != 1:
                continue
            source = corpus[doc]
            if "CONTRADICT" in labels:
                _add(pairs, counts, limit, split, "contradicted", claim["text"], source)
                continue
            _add(pairs, counts, limit, split, "supported", claim["text"], source)
            changed = _change_number(claim["text"], numbers(source), rng)
            if changed:
                _add(pairs, counts, limit, split, "number_changed", changed, source)
            if counts[(split, "another_source")] < limit or counts[(split, "related_source")] < limit:
                scores = bm25.scores(tokenize(claim["text"]))
                ranked = sorted(range(len(ids)), key=lambda i: -scores[i])
                others = [ids[i] for i in ranked[:60] if ids[i] not in judged.get(claim["_id"], set())]
                _add(pairs, counts, limit, split, "another_source", claim["text"], corpus[others[0]])
                related = others[19 + rng.randrange(30)]
                _add(pairs, counts, limit, split, "related_source", claim["text"], corpus[related])
            break  # one abstract per claim
    return pairs


def _add(pairs: list, counts: Counter, limit: int, split: str, kind: str, claim: str, source: str) -> None:
    if counts[(split, kind)] < limit:
        counts[(split, kind)] += 1
        pairs.append({"split": split, "kind": kind, "claim": claim, "source": source})


def _change_number(claim: str, stated: set[str], rng: random.Random) -> str | None:
    """The claim with its first number that the source states replaced by one it does not."""
    for match in re.finditer(r"(?<![\w.,])\d+(?:\.\d+)?(?![\w])", claim):
        raw = match.group(0)
        if raw in ("0", "1") or raw not in stated:
            continue
        for _ in range(20):
            value = float(raw) * rng.choice((0.5, 1.5, 2, 3)) + rng.choice((0, 1, 3))
            new = f"{value:.1f}" if "." in raw else str(int(value))
            if new != raw and new not in stated:
                return claim[: match.start()] + new + claim[match.end() :]
    return None


def xquad_pairs(limit: int, *, across: bool) -> list[dict[str, Any]]:
    """Sentences of XQuAD paragraphs (articles 24–47, never used to choose anything)."""
    from research.pipeline.citecheck import plain_claim, sentence_spans

    paragraphs = {}
    with open(XQUAD / "corpus.jsonl") as handle:
        for line in handle:
            row = json.loads(line)
            paragraphs[row["_id"]] = row["text"].lstrip("\ufeff")
    pairs: list[dict[str, Any]] = []
    counts: Counter = Counter()
    for key in sorted(paragraphs):
        language, article, number = key.split("-")
        if int(article) < 24 or language != ("en" if across else "ru"):
            continue
        own = paragraphs[f"ru-{article}-{number}"]
        other = paragraphs.get(f"ru-{article}-{int(number) + 1}") or paragraphs.get(f"ru-{article}-0")
        text = paragraphs[key]
        sentences = [plain_claim(text[s:e]) for s, e in sentence_spans(text)]
        sentences = [s for s in sentences if len(s.split()) >= 6]
        if not sentences:
            continue
        sentence = sentences[len(sentences) // 2]
        _add(pairs, counts, limit, "report", "supported", sentence, own)
        if other and other != own:
            _add(pairs, counts, limit, "report", "another_source", sentence, other)
    return pairs


# --- Scoring --------------------------------------------------------------------------------------


def features(citecheck: Any, pair: dict[str, Any], embedder: MemoEmbedder) -> dict[str, Any]:
    claim = citecheck.Claim(0, pair["claim"], (1,))
    prepared = citecheck.prepare(
        [claim], {1: pair["source"]}, use_embeddings=not embedder.disabled, embed=embedder
    )
    return {
        "windows": [(c, s, a) for c, s, a, _ in prepared.features(0, 1)],
        "missing": bool(prepared.missing_numbers(0, 1)),
    }


def _pair_score(feature: dict[str, Any], weight: float, with_embeddings: bool) -> float:
    best = 0.0
    for cover, similarity, _across in feature["windows"]:
        if with_embeddings and similarity is not None:
            best = max(best, weight * cover + (1 - weight) * similarity)
        else:
            best = max(best, cover)
    return best


def choose_thresholds(tune: list[dict[str, Any]], *, with_embeddings: bool) -> dict[str, Any]:
    best: dict[str, Any] = {}
    for weight in WEIGHTS if with_embeddings else (1.0,):
        rows = [(_pair_score(p["features"], weight, with_embeddings), p) for p in tune]
        grid = sorted({round(score, 2) for score, _ in rows})
        unsupported = None
        for threshold in grid:
            caught = [p for s, p in rows if p["features"]["missing"] or s < threshold]
            quality = _detection(caught, [p for _, p in rows])
            if quality["precision"] >= UNSUPPORTED_PRECISION and (
                unsupported is None or quality["recall"] >= unsupported["recall"]
            ):
                unsupported = {"threshold": threshold, **quality}
        supported = None
        for threshold in reversed(grid):
            said = [p for s, p in rows if not p["features"]["missing"] and s >= threshold]
            right = sum(p["kind"] == "supported" for p in said)
            if said and right / len(said) >= SUPPORTED_PRECISION:
                supported = {
                    "threshold": threshold,
                    "precision": round(right / len(said), 3),
                    "recall": round(right / sum(p["kind"] == "supported" for p in tune), 3),
                }
        table = {}
        for threshold in (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9):
            said = [p for s, p in rows if not p["features"]["missing"] and s >= threshold]
            right = sum(p["kind"] == "supported" for p in said)
            table[str(threshold)] = {
                "precision": round(right / len(said), 3) if said else None,
                "recall": round(right / sum(p["kind"] == "supported" for p in tune), 3),
            }
        candidate = {
            "weight": weight,
            "unsupported": unsupported,
            "supported": supported,
            "supported_by_threshold": table,
        }
        if unsupported and (not best or unsupported["recall"] > best["unsupported"]["recall"]):
            best = candidate
    return best


def _detection(caught: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> dict[str, float]:
    positives = [p for p in pairs if p["kind"] in POSITIVES]
    flagged = [p for p in caught if p["kind"] in KINDS]
    right = sum(p["kind"] in POSITIVES for p in flagged)
    return {
        "precision": round(right / len(flagged), 3) if flagged else 1.0,
        "recall": round(right / len(positives), 3) if positives else 0.0,
    }


def evaluate(
    citecheck: Any, pairs: list[dict[str, Any]], embedder: MemoEmbedder, lexical: bool
) -> dict[str, Any]:
    """Verdicts of `citecheck.check` itself, per kind, and unsupported detection."""
    verdicts: dict[str, Counter] = {}
    caught = []
    for pair in pairs:
        claim = citecheck.Claim(0, pair["claim"], (1,))
        prepared = citecheck.prepare([claim], {1: pair["source"]}, use_embeddings=not lexical, embed=embedder)
        verdict = citecheck._judge(prepared, 0, 1).verdict
        verdicts.setdefault(pair["kind"], Counter())[verdict] += 1
        if verdict == citecheck.UNSUPPORTED:
            caught.append(pair)
    scored = [p for p in pairs if p["kind"] in KINDS]
    return {
        "verdicts": {kind: dict(counter) for kind, counter in verdicts.items()},
        "unsupported_detection": _detection([p for p in caught if p["kind"] in KINDS], scored),
    }


def speed(
    citecheck: Any, pairs: list[dict[str, Any]], embedder: MemoEmbedder, lexical: bool
) -> dict[str, Any]:
    """A 1,500-word report of supported claims citing 10 abstracts: the whole local check, and
    the share of it spent embedding (texts not embedded before)."""
    supported = [p for p in pairs if p["kind"] == "supported"]
    sources: dict[int, str] = {}
    lines, words = [], 0
    for pair in supported:
        n = len(sources) % 10 + 1
        if len(sources) < 10:
            sources[n] = pair["source"]
        lines.append(f"{pair['claim'].rstrip('.')} [{n}].")
        words += len(pair["claim"].split())
        if words >= 1500:
            break
    body = "# Report\n\n" + "\n\n".join(" ".join(lines[i : i + 4]) for i in range(0, len(lines), 4))
    fresh = MemoEmbedder(disabled=lexical)
    started = time.perf_counter()
    found = citecheck.claims(body, len(sources))
    citecheck_verdicts = []
    if not lexical:
        prepared = citecheck.prepare(found, sources, embed=fresh)
    else:
        prepared = citecheck.prepare(found, sources, use_embeddings=False)
    for position, claim in enumerate(found):
        for n in claim.sources:
            citecheck_verdicts.append(citecheck._judge(prepared, position, n))
    total = time.perf_counter() - started
    return {
        "report_words": words,
        "claims": len(found),
        "citations": len(citecheck_verdicts),
        "seconds_total": round(total, 3),
        "seconds_embedding": round(fresh.seconds, 3),
        "seconds_without_embedding": round(total - fresh.seconds, 3),
    }


if __name__ == "__main__":
    main()
