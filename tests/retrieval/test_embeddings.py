"""Embeddings: the bundled model for real, and an OpenAI-compatible /embeddings on loopback."""

from __future__ import annotations

import math

import pytest

from retrieval import embeddings
from retrieval.chunking import chunk
from retrieval.embeddings import EmbeddingError, count_tokens, embed, embed_query
from tests.support.fakes import FakeService, Fault, Request, Response


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(value * value for value in vector))


# --- Local model -----------------------------------------------------------------------------------


def test_local_vectors_have_384_normalised_dimensions():
    vectors = embed(["Tokens are routed to experts.", "Смесь токенов."])
    assert [len(vector) for vector in vectors] == [384, 384]
    assert all(norm(vector) == pytest.approx(1.0, abs=1e-4) for vector in vectors)


def test_similar_sentences_are_closer_than_unrelated_ones():
    cat, kitten, taxes = embed(
        ["A cat sits on the mat.", "A kitten is sitting on a rug.", "Quarterly tax filing deadlines."]
    )
    assert cosine(cat, kitten) > cosine(cat, taxes) + 0.3


def test_query_embedding_is_the_text_embedding():
    assert embed_query("mixture of experts") == pytest.approx(embed(["mixture of experts"])[0], abs=1e-5)


def test_no_texts_no_work():
    assert embed([]) == []


def test_model_is_loaded_once_per_process():
    assert embeddings.local_model() is embeddings.local_model()


def test_token_count_includes_cls_and_sep_and_is_not_truncated():
    assert count_tokens("") == 2
    assert count_tokens("word " * 1000) > 1000


def test_chunks_fit_the_models_window_by_its_own_tokenizer():
    text = " ".join(
        f"Claim {n}: interleukin-6 receptor antagonists reduce C-reactive protein." for n in range(200)
    )
    spans = chunk(text, count_tokens=count_tokens)
    assert len(spans) > 5
    assert max(count_tokens(span.text) for span in spans) <= 256


# --- OpenAI-compatible endpoint --------------------------------------------------------------------


def fake_embeddings(dimensions: int = 384, *, shuffle: bool = True):
    """POST /v1/embeddings: vector n is (n + 1) at index n and 1 elsewhere, unnormalised."""

    def route(request: Request) -> Response:
        body = request.json()
        data = [
            {"object": "embedding", "index": index, "embedding": unnormalised(index, dimensions)}
            for index, _ in enumerate(body["input"])
        ]
        return Response(
            200, {"object": "list", "model": body["model"], "data": data[::-1] if shuffle else data}
        )

    return route


def unnormalised(index: int, dimensions: int) -> list[float]:
    return [float(index + 1) if position == index else 1.0 for position in range(dimensions)]


@pytest.fixture
def remote(settings, monkeypatch):
    monkeypatch.setattr(embeddings, "REMOTE_BACKOFF_SECONDS", 0.0)
    with FakeService({("POST", "/v1/embeddings"): fake_embeddings()}) as service:
        settings.EMBEDDING_BACKEND = "openai"
        settings.AITUNNEL_BASE_URL = f"{service.url}v1/"
        settings.AITUNNEL_API_KEY = "sk-test"
        settings.EMBEDDING_MODEL = "fake-embed-384"
        yield service


def test_remote_vectors_come_back_in_order_and_normalised(remote):
    vectors = embed(["zero", "one", "two"])
    expected = [unnormalised(index, 384) for index in range(3)]
    for vector, raw in zip(vectors, expected, strict=True):
        assert vector == pytest.approx([value / norm(raw) for value in raw])
    [request] = remote.requests_to("/v1/embeddings")
    assert request.json() == {"model": "fake-embed-384", "input": ["zero", "one", "two"]}
    assert request.headers["authorization"] == "Bearer sk-test"


def test_remote_calls_are_batched(remote):
    assert len(embed([f"text {n}" for n in range(5)], batch_size=2)) == 5
    assert [len(request.json()["input"]) for request in remote.requests_to("/v1/embeddings")] == [2, 2, 1]


def test_remote_model_of_other_dimensions_is_a_clear_error(remote):
    remote.routes[("POST", "/v1/embeddings")] = fake_embeddings(1536)
    with pytest.raises(EmbeddingError, match="returns 1536-dimensional vectors; MindSearch stores 384"):
        embed(["text"])


def test_remote_server_error_is_retried(remote):
    remote.inject(Fault(status=503))
    assert len(embed(["text"])) == 1
    assert len(remote.requests_to("/v1/embeddings")) == 2


def test_remote_rejected_key_is_not_retried(remote):
    remote.inject(Fault(status=401, body={"error": {"message": "bad key"}}))
    with pytest.raises(EmbeddingError, match="HTTP 401"):
        embed(["text"])
    assert len(remote.requests_to("/v1/embeddings")) == 1


def test_remote_unreachable_is_a_clear_error(settings, monkeypatch):
    monkeypatch.setattr(embeddings, "REMOTE_BACKOFF_SECONDS", 0.0)
    settings.EMBEDDING_BACKEND = "openai"
    settings.AITUNNEL_BASE_URL = "http://127.0.0.1:9/v1/"
    with pytest.raises(EmbeddingError, match="not reachable"):
        embed(["text"])
