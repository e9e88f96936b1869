"""The LLM client against each provider's documented answer shapes (tests/support/fakes.py's
`Dialect`s): OpenAI's reasoning models and their 400s, <think> models on Ollama, vLLM's and
DeepSeek's `reasoning_content`, Ollama's `reasoning`, Mistral's Magistral content parts, the
quota 429, unknown models, context-length 400s, cut answers, streams without usage, and time
counted from the first byte."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from mindsearch.clients import llm
from mindsearch.clients.llm import LLMBadAnswer, LLMContextOverflow, LLMQuotaError, LLMUnknownModel
from tests.mindsearch.clients.test_llm import quick_llm  # noqa: F401 — the same autouse settings here
from tests.support.fakes import (
    DEEPSEEK_REASONER,
    LLAMACPP,
    LLAMACPP_REASONING,
    MAGISTRAL,
    NO_STREAM_USAGE,
    OLLAMA_REASONING,
    OLLAMA_THINK,
    OPENAI_REASONING,
    PLAIN,
    QUOTA_ERROR,
    THINKING,
    VLLM_REASONING,
    Dialect,
    FakeService,
    Fault,
    Pace,
    Response,
    Written,
    chat_completion,
    llamacpp_props,
    openai_chat,
    openai_models,
)

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
ANSWER = "Hello there! This is the answer, and only the answer."


def serve(settings, dialect: Dialect = PLAIN, *, model: str = "test-model", **chat) -> FakeService:
    settings.AITUNNEL_MODEL = model
    route = openai_chat(lambda messages: ANSWER, model_ids=(model,), dialect=dialect, **chat)
    service = FakeService({("POST", CHAT): route})
    settings.AITUNNEL_BASE_URL = f"{service.url}v1/"
    return service


class Heard:
    """What on_text and on_thinking were told."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.thinking = 0

    async def on_text(self, text: str) -> None:
        self.texts.append(text)

    async def on_thinking(self) -> None:
        self.thinking += 1


def complete(heard: Heard | None = None, **kwargs) -> llm.Completion:
    if heard is not None:
        kwargs |= {"on_text": heard.on_text, "on_thinking": heard.on_thinking}
    return asyncio.run(llm.complete(MESSAGES, **kwargs))


def assert_no_reasoning(result: llm.Completion, heard: Heard | None = None) -> None:
    assert result.text == ANSWER
    assert "think" not in result.text.lower() and "Okay" not in result.text
    for text in heard.texts if heard else []:
        assert ANSWER.startswith(text), text  # never a word of the reasoning


# --- OpenAI's reasoning models ---------------------------------------------------------------------


def test_refused_parameters_are_learned_each_for_one_extra_call(settings) -> None:
    """A reasoning model behind a name no family rule knows: its 400s teach the client."""
    with serve(settings, OPENAI_REASONING, model="corp-reasoner") as fake:
        first = complete(temperature=0.2)
        bodies = [request.json() for request in fake.requests_to(CHAT)]
        assert first.text == ANSWER and first.attempts == 3  # one extra call per refusal
        assert "max_tokens" in bodies[0] and "temperature" in bodies[1]
        assert "max_tokens" not in bodies[2] and "temperature" not in bodies[2]
        assert bodies[2]["max_completion_tokens"] == bodies[0]["max_tokens"]
        second = complete()
        assert second.attempts == 1 and len(fake.requests_to(CHAT)) == 4
        assert first.reasoning_tokens > 0 and first.completion_tokens > first.reasoning_tokens
        profile = asyncio.run(llm.profile())
        assert set(profile.refused) == {"max_tokens→max_completion_tokens", "temperature"}
        assert profile.reasoning


def test_a_new_process_learns_again_once_without_a_shared_cache(settings) -> None:
    with serve(settings, OPENAI_REASONING, model="corp-reasoner") as fake:
        complete()
        llm.forget_endpoints()
        assert complete().attempts == 3
        assert len(fake.requests_to(CHAT)) == 6


@pytest.mark.django_db(transaction=True)
def test_what_one_process_learned_the_next_reads_from_the_database(settings) -> None:
    with serve(settings, OPENAI_REASONING, model="corp-reasoner") as fake:
        assert complete().attempts == 3
        llm.forget_endpoints()  # another process: nothing in memory, the database remembers
        assert complete().attempts == 1
        assert len(fake.requests_to(CHAT)) == 4


@pytest.mark.parametrize("model", ["o4-mini", "o3", "gpt-5-mini", "openai/o1"])
def test_known_reasoning_families_need_no_failed_call(settings, model: str) -> None:
    settings.AITUNNEL_REASONING_EFFORT = "low"
    with serve(settings, OPENAI_REASONING, model=model) as fake:
        result = complete(max_tokens=300)
        (request,) = fake.requests_to(CHAT)
    body = request.json()
    assert result.text == ANSWER and result.attempts == 1
    assert "temperature" not in body and "max_tokens" not in body
    assert body["max_completion_tokens"] == 300 + llm.REASONING_EXTRA_TOKENS  # room to reason
    assert body["reasoning_effort"] == "low"


def test_an_empty_temperature_setting_sends_none(settings) -> None:
    settings.AITUNNEL_TEMPERATURE = None
    with serve(settings) as fake:
        complete()
        assert "temperature" not in fake.requests_to(CHAT)[0].json()
        complete(temperature=0.7)
        assert fake.requests_to(CHAT)[1].json()["temperature"] == 0.7


def test_a_400_that_teaches_nothing_new_fails_at_once(settings) -> None:
    refusal = {
        "error": {
            "message": "Unsupported parameter: 'logit_bias' is not supported with this model.",
            "type": "invalid_request_error",
            "param": "logit_bias",
            "code": "unsupported_parameter",
        }
    }
    with serve(settings) as fake:
        fake.inject(Fault(400, body=refusal))
        with pytest.raises(llm.LLMError, match="logit_bias"):
            complete()
        assert len(fake.requests_to(CHAT)) == 1


# --- reasoning beside or inside the answer ---------------------------------------------------------


@pytest.mark.parametrize(
    "dialect",
    [OLLAMA_THINK, OLLAMA_REASONING, VLLM_REASONING, DEEPSEEK_REASONER, MAGISTRAL, LLAMACPP_REASONING],
)
def test_reasoning_is_never_the_answer_in_a_stream(settings, dialect: Dialect) -> None:
    heard = Heard()
    with serve(settings, dialect):
        result = complete(heard)
    assert_no_reasoning(result, heard)
    assert heard.texts and heard.texts[-1] == ANSWER
    assert heard.thinking >= 1  # "thinking…" was shown before the answer came
    assert result.reasoning_tokens >= llm.estimate_tokens(THINKING) // 2


@pytest.mark.parametrize(
    "dialect", [OLLAMA_THINK, OLLAMA_REASONING, VLLM_REASONING, DEEPSEEK_REASONER, MAGISTRAL]
)
def test_reasoning_is_never_the_answer_in_a_whole_body(settings, dialect: Dialect) -> None:
    """A server that ignores `stream` and answers one chat.completion: the same separation."""
    written = Written(ANSWER, THINKING, "stop")
    body = chat_completion("test-model", ANSWER, 10, dialect=dialect, written=written)
    with serve(settings) as fake:
        fake.routes[("POST", CHAT)] = lambda request: Response(200, body)
        result = complete()
        assert_no_reasoning(result)
        assert result.reasoning_tokens > 0
        assert asyncio.run(llm.profile()).streaming is False


def test_a_think_block_the_limit_left_unclosed_is_asked_again_with_a_larger_budget(settings) -> None:
    heard = Heard()
    with serve(settings, OLLAMA_THINK) as fake:
        result = complete(heard, max_tokens=10)  # THINKING alone is ~50 tokens
        first, second = (request.json() for request in fake.requests_to(CHAT))
    assert_no_reasoning(result, heard)
    assert result.attempts == 2 and second["max_tokens"] > first["max_tokens"]


def test_hidden_reasoning_that_spent_the_limit_is_asked_again_with_a_larger_budget(settings) -> None:
    """OpenAI's reasoning models send no reasoning: only the usage says where the tokens went."""
    long_thought = Dialect(reasoning="hidden", thinking=lambda messages: "x" * 20_000)  # ~5,000 tokens
    with serve(settings, long_thought, model="o4-mini") as fake:
        result = complete(max_tokens=10)
        first, second = (request.json()["max_completion_tokens"] for request in fake.requests_to(CHAT))
    assert result.text == ANSWER and result.attempts == 2 and second > first
    assert result.reasoning_tokens >= 5000


@pytest.mark.parametrize("empty_ok", [False, True])
def test_a_model_that_only_reasons_is_an_empty_answer_after_one_larger_budget(
    settings, empty_ok: bool
) -> None:
    """A budget spent reasoning is no answer, even for a caller that takes an empty one."""
    endless = Dialect(reasoning="reasoning_content", thinking=lambda messages: "hmm " * 40_000)
    with serve(settings, endless) as fake:
        with pytest.raises(LLMBadAnswer, match="reasoning and returned no answer"):
            complete(max_tokens=10, empty_ok=empty_ok)
        assert len(fake.requests_to(CHAT)) == 2


@pytest.mark.parametrize(
    ("content", "answer", "reasoning"),
    [
        ("<think>\nLet me see [1].\n</think>\n\nThe answer.", "The answer.", "Let me see [1]."),
        ("<think>\nStill thinking when the limit came", "", "Still thinking when the limit came"),
        ("Okay, so [2] says it.\n</think>\nAnswer [2].", "Answer [2].", "Okay, so [2] says it."),
        ("<thinking>a</thinking>B<think>c</think>D", "BD", "ac"),
        ("No reasoning at all.", "No reasoning at all.", ""),
    ],
)
def test_split_reasoning(content: str, answer: str, reasoning: str) -> None:
    assert llm.split_reasoning(content) == (answer, reasoning)


def test_magistral_parts_are_read_as_their_text() -> None:
    parts = [
        {"type": "thinking", "thinking": [{"type": "text", "text": "Hmm."}]},
        {"type": "text", "text": "Bonjour"},
        {"type": "text", "text": " !"},
    ]
    assert llm.content_parts(parts) == ("Bonjour !", "Hmm.")


# --- errors that say what to do ------------------------------------------------------------------


def test_an_exhausted_quota_is_said_after_one_call(settings) -> None:
    with serve(settings) as fake:
        fake.inject(*[Fault(429, body=QUOTA_ERROR)] * 4)
        with pytest.raises(LLMQuotaError, match="billing") as raised:
            complete()
        assert raised.value.attempts == 1 and len(fake.requests_to(CHAT)) == 1


def test_402_is_a_quota_error(settings) -> None:
    with serve(settings) as fake:
        fake.inject(Fault(402, body={"error": {"message": "Insufficient credits"}}))
        with pytest.raises(LLMQuotaError):
            complete()
        assert len(fake.requests_to(CHAT)) == 1


def test_a_plain_rate_limit_is_still_retried(settings) -> None:
    limited = {
        "error": {
            "message": "Rate limit reached for requests",
            "type": "requests",
            "code": "rate_limit_exceeded",
        }
    }
    with serve(settings) as fake:
        fake.inject(Fault(429, {"Retry-After": "0"}, limited))
        assert complete().attempts == 2


def test_a_model_ollama_has_not_pulled(settings) -> None:
    with serve(settings, OLLAMA_THINK) as fake:
        settings.AITUNNEL_MODEL = "qwen3:8b"
        with pytest.raises(LLMUnknownModel, match=r"ollama pull qwen3:8b.*AITUNNEL_MODEL") as raised:
            complete()
        assert "try pulling it first" in str(raised.value)
        assert len(fake.requests_to(CHAT)) == 1


def test_a_model_openai_does_not_know(settings) -> None:
    with serve(settings) as fake:
        settings.AITUNNEL_MODEL = "gpt-9"
        with pytest.raises(LLMUnknownModel, match="gpt-9"):
            complete()
        assert len(fake.requests_to(CHAT)) == 1


# --- context windows -------------------------------------------------------------------------------


def test_a_context_400_teaches_the_window_and_the_limit_is_fitted(settings) -> None:
    with serve(settings, Dialect(context_tokens=2000)) as fake:
        result = complete()  # the default limit (4096) does not fit: learned, and asked again
        assert result.text == ANSWER and result.attempts == 2
        assert fake.requests_to(CHAT)[1].json()["max_tokens"] < 2000
        assert complete().attempts == 1  # the next call fits at once
        profile = asyncio.run(llm.profile())
        assert (profile.context_tokens, profile.context_source) == (2000, "learned")
        assert asyncio.run(llm.context_window()) == 2000


def test_a_prompt_larger_than_the_window_is_a_context_overflow(settings) -> None:
    long = [{"role": "user", "content": "word " * 4000}]
    with serve(settings, Dialect(context_tokens=2000)) as fake:
        with pytest.raises(LLMContextOverflow, match="2000 tokens") as raised:
            asyncio.run(llm.complete(long))
        assert raised.value.context_tokens == 2000
        assert len(fake.requests_to(CHAT)) <= 2


def test_llamacpp_says_its_context_size(settings) -> None:
    long = [{"role": "user", "content": "word " * 4000}]
    small = Dialect(context_style="llamacpp", context_tokens=1024, stream_usage=False)
    with serve(settings, small) as fake:
        with pytest.raises(LLMContextOverflow, match="context size") as raised:
            asyncio.run(llm.complete(long))
        assert raised.value.context_tokens == 1024 and len(fake.requests_to(CHAT)) == 1
        assert asyncio.run(llm.context_window()) == 1024


@pytest.mark.parametrize(
    "routes",
    [
        {("GET", "/v1/models"): openai_models("test-model", max_model_len=32768)},  # vLLM
        {("GET", "/props"): llamacpp_props(32768)},  # llama.cpp
        {("GET", "/v1/models"): openai_models("test-model", n_ctx=32768)},  # llama.cpp's model list
    ],
)
def test_the_window_the_server_reports(settings, routes) -> None:
    with serve(settings, LLAMACPP) as fake:
        fake.routes.update(routes)
        assert asyncio.run(llm.context_window()) == 32768
        assert asyncio.run(llm.profile()).context_source == "server"
        settings.AITUNNEL_CONTEXT_TOKENS = 4096
        assert asyncio.run(llm.profile()).context_source == "setting"


def test_a_limit_above_what_the_model_writes_is_lowered_once(settings) -> None:
    too_large = {
        "error": {
            "message": "max_tokens is too large: 4096. This model supports at most 1024 completion tokens,"
            " whereas you provided 4096.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "invalid_value",
        }
    }
    with serve(settings) as fake:
        fake.inject(Fault(400, body=too_large))
        assert complete().attempts == 2
        assert fake.requests_to(CHAT)[1].json()["max_tokens"] == 1024


# --- cut answers, usage, time ------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", [PLAIN, NO_STREAM_USAGE])
def test_an_answer_cut_by_the_limit_is_reported(settings, dialect: Dialect) -> None:
    with serve(settings, dialect):
        result = complete(max_tokens=3)
    assert result.finish_reason == "length" and result.truncated
    assert ANSWER.startswith(result.text) and len(result.text) < len(ANSWER)


def test_a_stream_without_usage_is_estimated_never_zero(settings) -> None:
    with serve(settings, LLAMACPP) as fake:
        result = complete()
        assert fake.requests_to(CHAT)[0].json()["stream_options"] == {"include_usage": True}
    assert result.usage_estimated
    assert result.prompt_tokens == llm.estimate_tokens("Be brief.\nSay hello")
    assert result.completion_tokens == llm.estimate_tokens(ANSWER)


def test_time_in_the_queue_is_not_the_answer_timing_out(settings, monkeypatch) -> None:
    """A busy local server answers after 1 s; the idle limit is 0.3 s, the queue's 5 s."""
    monkeypatch.setattr(llm, "TIMEOUT_SECONDS", 0.3)
    monkeypatch.setattr(llm, "QUEUE_TIMEOUT_SECONDS", 5.0)
    with serve(settings) as fake:
        fake.inject(Fault.hang(1.0, path=CHAT))
        result = complete()
        assert result.text == ANSWER and result.attempts == 1
        assert len(fake.requests_to(CHAT)) == 1


def test_a_stalled_answer_is_closed_before_it_is_asked_again(settings, monkeypatch) -> None:
    """The first answer stalls mid-way: the client gives up on it after the idle limit, closes it
    (the server stops writing it) and only then sends the request again."""
    monkeypatch.setattr(llm, "TIMEOUT_SECONDS", 0.3)
    stalls = itertools.chain([20_000], itertools.repeat(0))  # tokens of writing time, 1st call only
    pace = Pace(tokens_per_second=1000, tokens=lambda messages, text: next(stalls))
    with serve(settings, pace=pace) as fake:
        result = complete()
        first, second = fake.requests_to(CHAT)
    assert result.text == ANSWER and result.attempts == 2
    assert first.gone is not None and first.gone <= second.arrived
    assert first.chunks_sent < len(ANSWER) // 4  # it stopped writing once the client left
