"""The LLM client against a loopback OpenAI-compatible server, and the tolerant JSON parser."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mindsearch.clients import llm
from mindsearch.clients.llm import LLMAuthError, LLMBadAnswer, LLMError, LLMNotConfigured, parse_json
from mindsearch.models import RateLimitGrant
from tests.support.fakes import FakeService, Fault, Response, estimate_tokens, openai_chat, openai_models
from tests.support.processes import free_port

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]


def echo(messages: list[dict]) -> str:
    return f"Hello! You said: {messages[-1]['content']}"


@pytest.fixture(autouse=True)
def quick_llm(settings, monkeypatch):
    settings.LIMIT_AITUNNEL_RPS = 0
    settings.AITUNNEL_API_KEY = "test-key"
    settings.AITUNNEL_MODEL = "test-model"
    monkeypatch.setattr(llm, "BACKOFF_SECONDS", 0.05)
    monkeypatch.setattr(llm, "TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(llm, "QUEUE_TIMEOUT_SECONDS", 0.5)
    llm.forget_endpoints()  # each test starts as a new process would


@pytest.fixture
def fake(settings):
    with FakeService({("POST", CHAT): openai_chat(echo)}) as service:
        settings.AITUNNEL_BASE_URL = f"{service.url}v1/"
        yield service


def complete(**kwargs) -> llm.Completion:
    return asyncio.run(llm.complete(MESSAGES, **kwargs))


def test_completion_text_and_usage(fake) -> None:
    result = complete()
    assert result.text == "Hello! You said: Say hello"
    assert result.model == "test-model"
    assert result.prompt_tokens == estimate_tokens("Be brief.Say hello")
    assert result.completion_tokens == estimate_tokens(result.text)
    assert result.attempts == 1
    assert result.latency_ms >= 0


def test_request_carries_model_messages_and_key(fake) -> None:
    complete(max_tokens=50, temperature=0.7)
    request = fake.requests_to(CHAT)[0]
    body = request.json()
    assert request.headers["authorization"] == "Bearer test-key"
    assert body["model"] == "test-model"
    assert body["messages"] == MESSAGES
    assert body["max_tokens"] == 50
    assert body["temperature"] == 0.7


def test_every_call_has_a_token_limit(fake, settings) -> None:
    settings.AITUNNEL_MAX_TOKENS = 1234
    complete()
    assert fake.requests_to(CHAT)[0].json()["max_tokens"] == 1234
    settings.AITUNNEL_CONTEXT_TOKENS = 1000  # the limit leaves the prompt its room in the window
    complete()
    assert fake.requests_to(CHAT)[1].json()["max_tokens"] == 1000 - llm.estimate_tokens(
        "Be brief.\nSay hello"
    )


def test_keyless_local_server(fake, settings) -> None:
    settings.AITUNNEL_API_KEY = ""
    fake.routes[("POST", CHAT)] = openai_chat(echo, key=None)
    assert complete().text.startswith("Hello!")
    assert fake.requests_to(CHAT)[0].headers["authorization"] == "Bearer not-needed"


def test_429_waits_for_retry_after(fake) -> None:
    fake.inject(Fault(429, {"Retry-After": "1"}, {"error": {"message": "Rate limit reached"}}))
    result = complete()
    first, second = fake.requests_to(CHAT)
    assert result.attempts == 2
    assert second.arrived - first.arrived >= 1.0


def test_retry_after_is_capped(fake, monkeypatch) -> None:
    monkeypatch.setattr(llm, "RETRY_AFTER_CAP_SECONDS", 0.2)
    fake.inject(Fault(503, {"Retry-After": "3600"}))
    result = complete()
    first, second = fake.requests_to(CHAT)
    assert result.attempts == 2
    assert 0.2 <= second.arrived - first.arrived < 1.0


def test_500_twice_then_success(fake) -> None:
    fake.inject(Fault(500), Fault(502))
    result = complete()
    assert result.attempts == 3
    assert result.text.startswith("Hello!")
    assert len(fake.requests_to(CHAT)) == 3


def test_backoff_grows_between_attempts(fake) -> None:
    fake.inject(Fault(500), Fault(500), Fault(500))
    complete()
    arrivals = [r.arrived for r in fake.requests_to(CHAT)]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert gaps[0] >= 0.05 * 0.75
    assert gaps[2] >= 0.2 * 0.75
    assert gaps[2] > gaps[0]


def test_persistent_5xx_gives_up_after_four_attempts(fake) -> None:
    fake.inject(*[Fault(503)] * 4)
    with pytest.raises(LLMError, match=r"HTTP 503.*4 attempts") as raised:
        complete()
    assert raised.value.attempts == 4
    assert len(fake.requests_to(CHAT)) == 4


def test_timeout_gives_up_after_four_attempts(fake) -> None:
    fake.inject(*[Fault.hang(2.0)] * 4)
    with pytest.raises(LLMError, match=r"did not answer within 0.5 s") as raised:
        complete()
    assert type(raised.value) is LLMError
    assert raised.value.attempts == 4
    assert raised.value.latency_ms >= 4 * 500
    assert len(fake.requests_to(CHAT)) == 4


def test_unreachable_endpoint(settings) -> None:
    settings.AITUNNEL_BASE_URL = f"http://127.0.0.1:{free_port()}/v1/"
    with pytest.raises(LLMError, match=r"not reachable") as raised:
        complete()
    assert raised.value.attempts == 4


def test_rejected_key_is_not_retried(fake, settings) -> None:
    settings.AITUNNEL_API_KEY = "wrong-key"
    with pytest.raises(LLMAuthError, match=r"rejected the API key \(HTTP 401\)") as raised:
        complete()
    assert raised.value.attempts == 1
    assert len(fake.requests_to(CHAT)) == 1


def test_403_is_an_auth_error(fake) -> None:
    fake.inject(Fault(403, body={"error": {"message": "Country not supported"}}))
    with pytest.raises(LLMAuthError, match=r"HTTP 403"):
        complete()
    assert len(fake.requests_to(CHAT)) == 1


def test_400_fails_at_once_with_the_reason(fake) -> None:
    fake.inject(
        Fault(400, body={"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}})
    )
    with pytest.raises(LLMError, match=r"max_tokens is too large") as raised:
        complete()
    assert type(raised.value) is LLMError
    assert len(fake.requests_to(CHAT)) == 1


def test_unknown_model_fails_at_once(fake, settings) -> None:
    settings.AITUNNEL_MODEL = "no-such-model"
    with pytest.raises(LLMError, match=r"no-such-model.*HTTP 404"):
        complete()
    assert len(fake.requests_to(CHAT)) == 1


def test_empty_answer_is_retried_then_bad_answer(fake) -> None:
    fake.routes[("POST", CHAT)] = openai_chat(lambda messages: "")
    with pytest.raises(LLMBadAnswer, match=r"empty answer") as raised:
        complete()
    assert raised.value.attempts == 4


def test_an_empty_answer_is_the_answer_of_a_caller_that_takes_one(fake) -> None:
    """`empty_ok` (a report's section, which may rightly have nothing to say): the first empty
    answer is returned with the usage the endpoint told, one request paid, no back-off waited;
    without it the same answer is still retried (above)."""
    fake.routes[("POST", CHAT)] = openai_chat(lambda messages: "")
    result = complete(empty_ok=True)
    assert len(fake.requests_to(CHAT)) == 1
    assert (result.text, result.attempts, result.finish_reason) == ("", 1, "stop")
    assert result.prompt_tokens == estimate_tokens("Be brief.Say hello")  # as the endpoint said
    assert (result.completion_tokens, result.usage_estimated) == (estimate_tokens(""), False)
    with pytest.raises(LLMBadAnswer, match=r"empty answer") as raised:
        complete()
    assert raised.value.attempts == 4 and len(fake.requests_to(CHAT)) == 5


def test_empty_answer_once_then_success(fake) -> None:
    replies = iter(["  ", None, "Finally"])
    fake.routes[("POST", CHAT)] = openai_chat(lambda messages: next(replies))
    result = complete()
    assert (result.text, result.attempts) == ("Finally", 3)


def test_no_choices_is_a_bad_answer(fake) -> None:
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "test-model", "choices": []}
    fake.inject(*[Fault(200, body=body)] * 4)
    with pytest.raises(LLMBadAnswer):
        complete()


def test_not_configured(settings) -> None:
    settings.AITUNNEL_MODEL = ""
    with pytest.raises(LLMNotConfigured, match=r"AITUNNEL_MODEL"):
        complete()


@pytest.mark.parametrize(
    ("key", "base_url", "model", "expected"),
    [
        ("k", llm.DEFAULT_BASE_URL, "m", True),
        ("", llm.DEFAULT_BASE_URL, "m", False),
        ("", "http://127.0.0.1:11434/v1/", "llama3", True),
        ("k", llm.DEFAULT_BASE_URL, "", False),
    ],
)
def test_is_configured(settings, key, base_url, model, expected) -> None:
    settings.AITUNNEL_API_KEY, settings.AITUNNEL_BASE_URL, settings.AITUNNEL_MODEL = key, base_url, model
    assert llm.is_configured() is expected


@pytest.mark.django_db(transaction=True)
def test_each_attempt_takes_a_rate_limit_slot(fake, settings) -> None:
    settings.LIMIT_AITUNNEL_RPS = 100
    fake.inject(Fault(500))
    # The calls' own owner: a call another test left running in this process takes slots too.
    complete(user=987654)
    # One slot per request the server got: the 500 and its retry (a loaded machine may time out
    # an attempt and make a third; it takes its slot too).
    sent = len(fake.requests_to(CHAT))
    assert sent >= 2
    assert RateLimitGrant.objects.filter(name="llm", owner="987654").count() == sent


# --- Retry-After and backoff -------------------------------------------------------------------


def test_parse_retry_after_forms() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert llm.parse_retry_after({"retry-after": "7"}) == 7.0
    assert llm.parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert llm.parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert llm.parse_retry_after({"retry-after": "Wed, 01 Jan 2025 12:00:10 GMT"}, now=now) == 10.0
    assert llm.parse_retry_after({"retry-after": "Wed, 01 Jan 2025 11:00:00 GMT"}, now=now) == 0.0
    assert llm.parse_retry_after({"retry-after": "600"}) == 60.0
    assert llm.parse_retry_after({"retry-after": "soon"}) is None
    assert llm.parse_retry_after({}) is None


def test_backoff_doubles_with_jitter() -> None:
    base = llm.BACKOFF_SECONDS
    for attempt, nominal in [(1, base), (2, 2 * base), (3, 4 * base)]:
        delays = [llm.retry_delay(attempt, None) for _ in range(50)]
        assert all(0.75 * nominal <= d <= 1.25 * nominal for d in delays)
        assert len(set(delays)) > 1
    assert llm.retry_delay(3, 4.0) == 4.0


# --- parse_json --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("[1, 2, 3]", [1, 2, 3]),
        ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
        ('```\n[{"t": "x"}]\n```', [{"t": "x"}]),
        ('Here is the JSON you asked for:\n\n```json\n{"ok": true}\n```\nHope it helps!', {"ok": True}),
        ('Sure! {"score": 5, "why": "good"} That is all.', {"score": 5, "why": "good"}),
        ('[Note: scores follow] {"a": 1}', {"a": 1}),
        (
            'Result: {"nested": {"list": [1, {"deep": [true, false, null]}]}}',
            {"nested": {"list": [1, {"deep": [True, False, None]}]}},
        ),
        ('{"text": "braces } and ] inside \\" strings {"}', {"text": 'braces } and ] inside " strings {'}),
        ('{"a": 1,}', {"a": 1}),
        ("[1, 2, 3,]", [1, 2, 3]),
        ('{"ru": "Привет, мир"}', {"ru": "Привет, мир"}),
        ('{"multi": "line one\nline two"}', {"multi": "line one\nline two"}),
        # Truncated answers: cut back to the last complete element, close what is open.
        ('[{"title": "A", "score": 5}, {"title": "B", "sco', [{"title": "A", "score": 5}, {"title": "B"}]),
        (
            '[{"title": "A", "score": 5}, {"title": "B", "score":',
            [{"title": "A", "score": 5}, {"title": "B"}],
        ),
        ('[{"title": "A", "score": 5}, {"tit', [{"title": "A", "score": 5}, {}]),
        ('[{"title": "A", "score": 5}, ', [{"title": "A", "score": 5}]),
        ('[{"title": "A", "score": 5},', [{"title": "A", "score": 5}]),
        ('[{"title": "A", "score": 5}', [{"title": "A", "score": 5}]),
        ('{"summary": "an unterminated str', {}),
        ('{"a": 1, "b": "unterminated', {"a": 1}),
        ('["one", "two", "thr', ["one", "two"]),
        ("[1, 2, 3", [1, 2]),
        ("[true, fal", [True]),
        ('{"a": {"b": [1, 2, {"c": "d"}', {"a": {"b": [1, 2, {"c": "d"}]}}),
        ('```json\n{"items": ["x", "y"', {"items": ["x", "y"]}),
        (
            '{"A": {"relevance": 5, "credibility": 4}, "B": {"relevance": 3, "cred',
            {"A": {"relevance": 5, "credibility": 4}, "B": {"relevance": 3}},
        ),
        ('{"escaped": "a \\" quote", "next": "cut', {"escaped": 'a " quote'}),
        ("[", []),
        ("{", {}),
    ],
)
def test_parse_json(text: str, expected: object) -> None:
    assert parse_json(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "no json here", "```\nplain text\n```", "[see below]", '{"a" 1}', "Just prose: {like this}", "]}"],
)
def test_parse_json_nothing_usable(text: str) -> None:
    with pytest.raises(LLMBadAnswer):
        parse_json(text)


def test_parse_json_prefers_the_fenced_block_over_prose() -> None:
    text = 'I considered [1, 2] first.\n```json\n{"final": true}\n```'
    assert parse_json(text) == {"final": True}


def test_parse_json_takes_the_first_of_several_values() -> None:
    assert parse_json('{"first": 1}\n{"second": 2}') == {"first": 1}


@pytest.mark.parametrize(
    "text",
    [
        'As source [1] says, the scores are: [{"title": "A", "score": 5}]',
        'Scores follow [1][2]:\n[{"title": "A", "score": 5}]',
        '<think>Source [1] looks best. Maybe {"title": "B"}?</think>\n[{"title": "A", "score": 5}]',
        'See [1]. [{"title": "A", "score": 5}, {"title": "B", "sco',
    ],
)
def test_parse_json_never_takes_a_citation_marker_or_reasoning(text: str) -> None:
    assert parse_json(text)[0] == {"title": "A", "score": 5}


def test_parse_json_takes_the_shape_the_caller_expects() -> None:
    text = 'Per [3] the domain is {"domain": "weather", "needs_search": true}'
    assert parse_json(text, expect=dict) == {"domain": "weather", "needs_search": True}
    assert parse_json('[1, 2] then {"a": 1}', expect=list) == [1, 2]
    with pytest.raises(LLMBadAnswer):
        parse_json('[{"a": 1}]', expect=dict)
    assert parse_json("[3]") == [3]  # a marker alone is still the answer


# --- the model list (the status page's probe) ----------------------------------------------------


def test_list_models_sends_the_key_and_reads_the_ids(settings) -> None:
    with FakeService({("GET", "/v1/models"): openai_models("test-model", "test-vision")}) as service:
        settings.AITUNNEL_BASE_URL = f"{service.url}v1/"
        answer = asyncio.run(llm.list_models(2.0))
        settings.AITUNNEL_API_KEY = "wrong-key"
        rejected = asyncio.run(llm.list_models(2.0))
        assert service.requests[0].headers["authorization"] == "Bearer test-key"
    assert answer == llm.ModelList(200, frozenset({"test-model", "test-vision"}))
    assert rejected == llm.ModelList(401, frozenset())


def test_list_models_of_a_server_without_the_list(settings) -> None:
    with FakeService({("GET", "/v1/models"): lambda request: Response(200, "<html>")}) as service:
        settings.AITUNNEL_BASE_URL = f"{service.url}v1/"
        assert asyncio.run(llm.list_models(2.0)) == llm.ModelList(200, frozenset())
    with FakeService() as service:  # no /models at all
        settings.AITUNNEL_BASE_URL = f"{service.url}v1/"
        assert asyncio.run(llm.list_models(2.0)).status == 404


def test_the_token_estimate_never_undercounts_a_real_tokenizer_by_more_than_a_tenth() -> None:
    """Real counts of SmolLM2's tokenizer (llama.cpp's /tokenize) of SciFact and XQuAD-ru train
    texts, the Russian plan prompt and code-like text: the estimate fits prompts to a small window,
    so it may count more, never much less; English prose is not counted double either."""
    table = json.loads((Path(__file__).parents[2] / "data" / "token_counts.json").read_text())
    for row in table["texts"]:
        estimate = llm.estimate_tokens(row["text"])
        assert estimate >= row["tokens"] * 0.9, (row["source"], estimate, row["tokens"])
        assert estimate <= row["tokens"] * 2, (row["source"], estimate, row["tokens"])
