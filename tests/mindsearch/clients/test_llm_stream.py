"""The LLM client's streamed answers, against a loopback server speaking OpenAI's server-sent
`chat.completion.chunk` events, including streams that break off as real ones do."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from mindsearch.clients import llm
from mindsearch.clients.llm import LLMBadAnswer, LLMError
from tests.mindsearch.clients.test_llm import quick_llm  # noqa: F401 — the same autouse settings here
from tests.support.fakes import FakeService, Fault, Pace, estimate_tokens, openai_chat

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
ANSWER = "Hello there! This answer comes in many small pieces, about four characters each."


def serve(settings, pace: Pace | None = None) -> FakeService:
    service = FakeService({("POST", CHAT): openai_chat(lambda messages: ANSWER, pace=pace)})
    settings.AITUNNEL_BASE_URL = f"{service.url}v1/"
    return service


@pytest.fixture
def fake(settings):
    with serve(settings) as service:
        yield service


def stream() -> tuple[llm.Completion, list[str]]:
    heard: list[str] = []

    async def on_text(text: str) -> None:
        heard.append(text)

    result = asyncio.run(llm.complete(MESSAGES, on_text=on_text))
    return result, heard


def test_the_text_grows_piece_by_piece_and_usage_comes_from_the_last_chunk(fake) -> None:
    result, heard = stream()
    assert result.text == ANSWER
    assert len(heard) == len(range(0, len(ANSWER), 4))  # one call per content piece
    assert all(ANSWER.startswith(text) for text in heard) and heard[-1] == ANSWER
    assert [len(text) for text in heard] == sorted(len(text) for text in heard)
    assert result.prompt_tokens == estimate_tokens("Be brief.Say hello")
    assert result.completion_tokens == estimate_tokens(ANSWER)
    body = fake.requests_to(CHAT)[0].json()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_the_fake_speaks_sse_chunks_ending_with_done(fake) -> None:
    """What the client is tested against: the frames as OpenAI sends them."""
    import httpx

    request = {"model": "test-model", "messages": MESSAGES, "stream": True}
    headers = {"authorization": "Bearer test-key"}
    with_usage = {**request, "stream_options": {"include_usage": True}}
    for payload, usage in ((request, False), (with_usage, True)):
        response = httpx.post(f"{fake.url}v1/chat/completions", json=payload, headers=headers)
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["transfer-encoding"] == "chunked"
        events = [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(event) for event in events[:-1]]
        assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        assert text == ANSWER
        if usage:
            assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
            assert all(chunk["usage"] is None for chunk in chunks[:-1])
        else:
            assert all("usage" not in chunk for chunk in chunks)
            assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("how", ["drop", "end", "error"])
def test_a_stream_cut_midway_is_retried_from_the_start(fake, how: str) -> None:
    fake.inject(Fault.cut_stream(5, how))
    result, heard = stream()
    assert result.text == ANSWER and result.attempts == 2
    assert len(fake.requests_to(CHAT)) == 2
    cut_at = heard.index(ANSWER[:4], 1)  # the second attempt starts again from its first piece
    assert 0 < len(heard[cut_at - 1]) < len(ANSWER)  # the first attempt had got some way


@pytest.mark.parametrize("how", ["drop", "end", "error"])
def test_a_stream_cut_every_time_fails_clearly_never_with_half_a_text(fake, how: str) -> None:
    fake.inject(*(Fault.cut_stream(6, how) for _ in range(llm.MAX_ATTEMPTS)))
    with pytest.raises(LLMError) as failure:
        stream()
    message = str(failure.value)
    assert "gave up after 4 attempts" in message
    assert "broke off" in message or "stopped before it was finished" in message
    if how == "end":  # a body that ended cleanly without a finish reason
        assert isinstance(failure.value, LLMBadAnswer)


def test_a_stream_that_stalls_times_out_and_is_retried(settings, monkeypatch) -> None:
    """A server that stops sending mid-answer: the read timeout applies between chunks."""
    monkeypatch.setattr(llm, "TIMEOUT_SECONDS", 0.3)
    with serve(settings, Pace(tokens_per_second=1, tokens=lambda m, t: 40)) as slow:
        with pytest.raises(LLMError, match="stopped sending"):
            stream()
        assert len(slow.requests_to(CHAT)) == llm.MAX_ATTEMPTS


def test_a_paced_stream_hears_the_first_words_long_before_the_end(settings) -> None:
    pace = Pace(first_token=0.2, tokens_per_second=40, tokens=lambda m, t: 40)  # 1 s of writing
    with serve(settings, pace):
        times: list[float] = []
        started = time.monotonic()

        async def on_text(text: str) -> None:
            times.append(time.monotonic() - started)

        result = asyncio.run(llm.complete(MESSAGES, on_text=on_text))
    assert result.text == ANSWER
    assert 0.15 < times[0] < 0.6
    assert times[-1] > 1.0


def test_an_error_status_before_the_stream_is_retried(fake) -> None:
    fake.inject(Fault(503))
    result, heard = stream()
    assert result.attempts == 2 and heard[-1] == ANSWER
