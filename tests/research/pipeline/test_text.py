"""Words for matching live in one module (research/pipeline/text.py); the extractive engine is only
the engine, and nobody borrows its tokenizer or BM25."""

from __future__ import annotations

import ast
from pathlib import Path

from research.pipeline import text

ROOT = Path(__file__).resolve().parents[3]
TEXT_NAMES = {"tokenize", "BM25", "words", "WORD"}


def python_files() -> list[Path]:
    return [
        path
        for folder in ("research", "retrieval", "mindsearch", "mcphub", "bench", "tests")
        for path in (ROOT / folder).rglob("*.py")
        if "migrations" not in path.parts
    ]


def borrowed(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "research.pipeline.extractive":
            found += [alias.name for alias in node.names if alias.name in TEXT_NAMES]
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "extractive"
            and node.attr in TEXT_NAMES
        ):
            found.append(f"extractive.{node.attr}")
    return found


def test_nobody_takes_words_or_bm25_from_the_extractive_engine() -> None:
    files = python_files()
    assert len(files) > 100
    offenders = {str(path.relative_to(ROOT)): names for path in files if (names := borrowed(path))}
    assert not offenders, f"import these from research.pipeline.text: {offenders}"


def test_the_text_module_defines_what_everyone_uses() -> None:
    source = (ROOT / "research/pipeline/extractive.py").read_text(encoding="utf-8")
    defined = {
        node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef | ast.ClassDef)
    }
    assert not defined & {"tokenize", "BM25", "_stem", "_words"}  # one copy, in text.py
    assert text.tokenize("Технологии токенов") == ["технолог", "токен"]
    assert (
        text.BM25([text.tokenize("mixture of tokens"), text.tokenize("weather")]).scores(
            text.tokenize("tokens")
        )[0]
        > 0
    )
