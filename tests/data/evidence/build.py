"""Build the evidence world's data from the shared public benchmarks (run once; output committed).

    python tests/data/evidence/build.py /work/shared/benchmarks

Writes `corpus.jsonl.gz` (the abstracts and paragraphs the world uses, unchanged) and
`questions.json` (each question with its relevant, noise and old pages, and the fact phrase of
each). A fact phrase is the opening words of the sentence of a page that best answers the
question: the sentence that names the question's key term and shares most words with it.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FACT_WORDS = 8
RELEVANT = 6
NOISE = 3
OLD = 3
BACKGROUND = 230

# Questions over SciFact: key terms (any of them marks a page on the topic), terms of look-alike
# pages (noise), and how the world lays the relevant pages out.
SCIFACT_QUESTIONS: list[dict[str, Any]] = [
    {
        "id": "vitamin-d",
        "question": "What have clinical studies found about vitamin D?",
        "key": ["vitamin d"],
        "noise": ["vitamin c", "vitamin e", "vitamin b", "vitamin k"],
        "layout": "spread",
    },
    {
        "id": "breast-cancer",
        "question": "What risk factors and treatments for breast cancer have studies identified?",
        "key": ["breast cancer"],
        "noise": ["prostate cancer"],
        "layout": "one_host",
    },
    {
        "id": "t2d-recent",
        "question": "What was published about type 2 diabetes in the past 6 months?",
        "key": ["type 2 diabetes"],
        "noise": ["type 1 diabetes"],
        "layout": "dated",
    },
    {
        "id": "malaria",
        "question": "How do malaria parasites resist drugs and how is malaria treated?",
        "key": ["malaria"],
        "noise": ["tuberculosis"],
        "layout": "long_pages",
    },
    {
        "id": "autophagy",
        "question": "What role does autophagy play in cell death and disease?",
        "key": ["autophagy"],
        "noise": ["apoptosis"],
        "layout": "spread",
    },
    {
        "id": "circadian",
        "question": "How does the circadian clock regulate metabolism?",
        "key": ["circadian"],
        "noise": ["sleep"],
        "layout": "long_pages",
    },
    {
        "id": "crispr-recent",
        "question": "Что нового опубликовано о CRISPR за последние полгода?",
        "key": ["crispr"],
        "noise": ["zinc finger", "talen"],
        "layout": "dated",
    },
    {
        "id": "influenza",
        "question": "How effective are influenza vaccines and antivirals?",
        "key": ["influenza"],
        "noise": ["hepatitis"],
        "layout": "one_host",
    },
]
# Questions over XQuAD-ru: the article's Russian paragraphs sit on one host (ru.wikipedia.org),
# the English originals on another edition of the same site; a fact is found in either language.
XQUAD_QUESTIONS: list[dict[str, Any]] = [
    {
        "id": "tesla",
        "question": "Расскажи о жизни и изобретениях Николы Теслы",
        "key": ["тесл", "tesla"],
        "article": "Nikola_Tesla",
        "english": "Nikola Tesla",
    },
    {
        "id": "black-death",
        "question": "Что известно о Черной смерти и эпидемиях чумы?",
        "key": ["чум", "черн", "plague", "black death"],
        "article": "Black_Death",
        "english": "Black Death plague",
    },
    {
        "id": "amazon",
        "question": "Что происходит с дождевыми лесами Амазонки?",
        "key": ["амазон", "amazon"],
        "article": "Amazon_rainforest",
        "english": "Amazon rainforest",
    },
]

sys.path.insert(0, str(HERE.parents[2]))
from tests.support.evidence_world import best_sentences, mentions, sentences  # noqa: E402


def best_sentence(text: str, question: str, key: list[str]) -> str:
    return best_sentences(text, question, key, 1)[0]


def fact_phrase(sentence: str) -> str:
    return " ".join(sentence.split()[:FACT_WORDS])


def main(benchmarks: Path) -> None:
    rng = random.Random(20261123)
    scifact = [json.loads(line) for line in (benchmarks / "scifact/corpus.jsonl").open()]
    scifact = [d for d in scifact if len(sentences(d["text"])) >= 3]
    used: dict[str, dict[str, Any]] = {}
    questions = []
    all_keys = [t for q in SCIFACT_QUESTIONS for t in q["key"] + q["noise"]]
    taken: set[str] = set()
    for spec in SCIFACT_QUESTIONS:
        on_topic = [d for d in scifact if mentions(d["title"], spec["key"]) and d["_id"] not in taken]
        looks_alike = [
            d
            for d in scifact
            if mentions(d["title"] + " " + d["text"], spec["noise"])
            and not mentions(d["title"] + " " + d["text"], spec["key"])
            and d["_id"] not in taken
        ]
        rng.shuffle(on_topic)
        rng.shuffle(looks_alike)
        relevant = on_topic[:RELEVANT]
        old = on_topic[RELEVANT : RELEVANT + OLD] if spec["layout"] == "dated" else []
        noise = looks_alike[:NOISE]
        assert len(relevant) == RELEVANT and len(noise) == NOISE, spec["id"]
        entry = {k: spec[k] for k in ("id", "question", "key", "layout")}
        entry["language"] = "ru" if re.search("[а-яё]", spec["question"], re.I) else "en"
        entry["relevant"] = [_page(d, spec["question"], spec["key"], used, "sf") for d in relevant]
        entry["noise"] = [_page(d, spec["question"], spec["noise"], used, "sf") for d in noise + old]
        entry["old"] = [f"sf-{d['_id']}" for d in old]
        taken |= {d["_id"] for d in relevant + noise + old}
        questions.append(entry)
    xquad = [json.loads(line) for line in (benchmarks / "xquad-ru/corpus.jsonl").open()]
    for spec in XQUAD_QUESTIONS:
        paragraphs = [d for d in xquad if d["title"] == spec["article"]]
        ru = sorted((d for d in paragraphs if d["language"] == "ru"), key=lambda d: d["_id"])
        facts = []
        for paragraph in ru:
            english = next(d for d in paragraphs if d["_id"] == "en" + paragraph["_id"][2:])
            pair = [_page(d, spec["question"], spec["key"], used, "xq") for d in (paragraph, english)]
            facts.append({"pages": [p["page"] for p in pair], "facts": [p["fact"] for p in pair]})
        questions.append(
            {
                "id": spec["id"],
                "question": spec["question"],
                "key": spec["key"],
                "layout": "wiki",
                "language": "ru",
                "english": spec["english"],
                "relevant": facts,
                "noise": [],
                "old": [],
            }
        )
    # Background: abstracts about none of the questions, and the other XQuAD articles.
    rest = [
        d for d in scifact if d["_id"] not in taken and not mentions(d["title"] + " " + d["text"], all_keys)
    ]
    rng.shuffle(rest)
    for d in rest[:BACKGROUND]:
        used[f"sf-{d['_id']}"] = {
            "id": f"sf-{d['_id']}",
            "title": d["title"],
            "text": d["text"],
            "source": "scifact",
        }
    for d in xquad:
        articles = {q["article"] for q in XQUAD_QUESTIONS}
        if d["language"] == "ru" and d["title"] not in articles and d["_id"].endswith("-0"):
            used[f"xq-{d['_id']}"] = _xquad(d)
    lines = "".join(
        json.dumps(d, ensure_ascii=False) + "\n" for d in sorted(used.values(), key=lambda d: d["id"])
    )
    with (HERE / "corpus.jsonl.gz").open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        out.write(lines.encode())
    (HERE / "questions.json").write_text(json.dumps(questions, ensure_ascii=False, indent=1) + "\n")
    print(f"{len(used)} documents, {len(questions)} questions")


def _xquad(d: dict[str, Any]) -> dict[str, Any]:
    title = d["title"].replace("_", " ")
    return {
        "id": f"xq-{d['_id']}",
        "title": title,
        "text": d["text"].lstrip("\ufeff"),
        "source": "xquad-ru",
        "language": d["language"],
    }


def _page(d: dict[str, Any], question: str, key: list[str], used: dict, prefix: str) -> dict[str, str]:
    doc = (
        _xquad(d)
        if prefix == "xq"
        else {"id": f"sf-{d['_id']}", "title": d["title"], "text": d["text"], "source": "scifact"}
    )
    used[doc["id"]] = doc
    return {"page": doc["id"], "fact": fact_phrase(best_sentence(doc["text"], question, key))}


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/benchmarks"))
