"""The tests' store of the embedding engine's vectors (tests/support/embedding_cache.py) gives
what the engine gives, and asks the engine once per text across the session's processes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retrieval import embeddings
from tests.support.embedding_cache import FILE_NAME, Vector, VectorStore, remembering_methods

pytestmark = pytest.mark.real_embeddings

TEXTS = [
    "The bridge was closed for repairs in March.",
    "short",
    "Зимой выработка солнечных панелей падает. " * 5,
]


def test_the_engine_gives_a_text_the_same_vector_alone_or_in_any_batch() -> None:
    """What makes a remembered vector the engine's answer for any later batch."""
    model = embeddings.encoder()
    together = model.passages(TEXTS, 32)
    for text, vector in zip(TEXTS, together, strict=True):
        assert model.passages([text], 32)[0] == vector
        assert model.passages(["another text first", text], 32)[1] == vector
    assert model.queries(TEXTS, 32)[0] == model.query(TEXTS[0])


def test_a_second_process_gets_the_first_ones_vectors_without_the_engine(tmp_path: Path) -> None:
    model = embeddings.encoder()
    asked: list[list[str]] = []

    def engine(texts: list[str]) -> list[Vector]:
        asked.append(texts)
        return model.passages(texts, 32)

    first, second = VectorStore(tmp_path / FILE_NAME), VectorStore(tmp_path / FILE_NAME)
    try:
        assert first.vectors("passage", TEXTS[:2], engine) == model.passages(TEXTS[:2], 32)
        assert second.vectors("passage", TEXTS, engine) == model.passages(TEXTS, 32)
        assert first.vectors("passage", [TEXTS[1], TEXTS[1]], engine) == model.passages(TEXTS[1:2], 32) * 2
    finally:
        first.close()
        second.close()
    assert asked == [TEXTS[:2], TEXTS[2:]]


def test_a_query_and_a_passage_of_the_same_text_are_remembered_apart(tmp_path: Path) -> None:
    model = embeddings.encoder()
    store = VectorStore(tmp_path / FILE_NAME)
    methods = remembering_methods(store)
    try:
        passage = methods["passages"](model, [TEXTS[0]], 32)
        query = methods["query"](model, TEXTS[0])
        queries = methods["queries"](model, TEXTS[:2], 1)
    finally:
        store.close()
    assert passage == model.passages([TEXTS[0]], 32)
    assert query == model.query(TEXTS[0]) == queries[0]
    assert float(np.dot(passage[0], query)) < 0.999  # e5's "passage: " and "query: " differ
    assert store.engine_calls == 3  # a passage, a query, and the one query not yet asked
