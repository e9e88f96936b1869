"""The pipeline's way to ask (research/pipeline/prompting.py) with the models of issue 25: the
cache is keyed by the endpoint, a cached answer keeps how it ended, reasoning tokens are
recorded, `on_thinking` is heard, and a run gives a model up at once on a quota or an unknown
model — saying it was configured and given up on."""

from __future__ import annotations

import asyncio

import pytest
from django.contrib.auth.models import User

from mindsearch.clients import llm
from research.models import LLMCall, RunEvent, Topic
from research.pipeline import prompting
from research.pipeline.context import RunContext
from research.pipeline.stage import StageName
from tests.mindsearch.clients.test_llm import quick_llm  # noqa: F401 — the same autouse settings here
from tests.support.fakes import OLLAMA_THINK, OPENAI_REASONING, QUOTA_ERROR, FakeService, Fault, openai_chat

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = "/v1/chat/completions"


def server(settings, answer: str, **chat) -> FakeService:
    service = FakeService({("POST", CHAT): openai_chat(lambda messages: answer, **chat)})
    settings.AITUNNEL_BASE_URL = f"{service.url}v1/"
    return service


def context(owner: User) -> RunContext:
    topic = Topic.objects.create(owner=owner, question="What is Mixture of Tokens?")
    return RunContext(topic=topic, llm_enabled=True, model="test-model")


def ask(ctx: RunContext, **kwargs) -> llm.Completion:
    prompt = prompting.load_prompt("plan")
    return asyncio.run(
        prompting.ask_completion(ctx, StageName.PLAN, prompt, "Plan it", kind="plan", **kwargs)
    )


def test_another_server_behind_the_same_model_name_is_asked_itself(settings, alice: User) -> None:
    ctx = context(alice)
    with server(settings, "First server's plan") as first:
        assert ask(ctx).text == "First server's plan"
        assert ask(ctx).text == "First server's plan" and len(first.requests_to(CHAT)) == 1  # cached
    with server(settings, "Second server's plan") as second:
        assert ask(ctx).text == "Second server's plan"
        assert len(second.requests_to(CHAT)) == 1


def test_a_cached_answer_keeps_how_it_ended_and_its_reasoning(settings, alice: User) -> None:
    ctx = context(alice)
    heard: list[int] = []

    async def on_thinking() -> None:
        heard.append(1)

    with server(settings, "A plan that goes on and on and on", dialect=OLLAMA_THINK):
        fresh = ask(ctx, max_tokens=60, on_thinking=on_thinking)
        cached = ask(ctx, max_tokens=60)
    assert heard and "think" not in fresh.text
    assert fresh.reasoning_tokens > 0
    assert (cached.text, cached.finish_reason, cached.reasoning_tokens) == (
        fresh.text,
        fresh.finish_reason,
        fresh.reasoning_tokens,
    )
    calls = LLMCall.objects.filter(topic=ctx.topic).order_by("id")
    assert [call.cache_hit for call in calls] == [False, True]
    assert all(call.reasoning_tokens == fresh.reasoning_tokens for call in calls)


def test_an_empty_answer_asked_for_is_cached_and_read_back_as_the_same_nothing(settings, alice: User) -> None:
    """With `empty_ok` an empty answer is paid once, recorded with its tokens, cached under the
    question's key like any answer and served from it as the same empty answer; a caller that
    takes none is not served it (it asks, retries, and fails as before)."""
    ctx = context(alice)
    with server(settings, "") as fake:
        fresh = ask(ctx, empty_ok=True)
        cached = ask(ctx, empty_ok=True)
        assert len(fake.requests_to(CHAT)) == 1
        with pytest.raises(llm.LLMBadAnswer, match="empty answer"):
            ask(ctx)
        assert len(fake.requests_to(CHAT)) == 1 + llm.MAX_ATTEMPTS
    assert (fresh.text, fresh.attempts, cached.text, cached.attempts) == ("", 1, "", 0)
    assert cached.prompt_tokens == fresh.prompt_tokens > 0
    calls = list(LLMCall.objects.filter(topic=ctx.topic).order_by("id"))
    assert [(call.cache_hit, call.error == "") for call in calls] == [
        (False, True),
        (True, True),
        (False, False),
    ]
    assert calls[0].prompt_tokens == fresh.prompt_tokens and calls[0].attempts == 1


def test_a_reasoning_models_hidden_reasoning_is_counted(settings, alice: User) -> None:
    settings.AITUNNEL_MODEL = "o4-mini"
    ctx = context(alice)
    ctx.model = "o4-mini"
    with server(settings, "Plan", model_ids=("o4-mini",), dialect=OPENAI_REASONING):
        text = asyncio.run(
            prompting.ask(ctx, StageName.PLAN, prompting.load_prompt("plan"), "Plan it", kind="plan")
        )
    call = LLMCall.objects.get(topic=ctx.topic)
    assert text == "Plan" and call.reasoning_tokens > 0
    assert call.completion_tokens > call.reasoning_tokens


@pytest.mark.parametrize("fault", ["quota", "unknown model"])
def test_a_quota_or_an_unknown_model_gives_the_llm_up_at_once(settings, alice: User, fault: str) -> None:
    ctx = context(alice)
    with server(settings, "Plan") as fake:
        if fault == "quota":
            fake.inject(Fault(429, body=QUOTA_ERROR))
        else:
            settings.AITUNNEL_MODEL = ctx.model = "qwen3:8b"
        with pytest.raises(llm.LLMError):
            ask(ctx)
        assert len(fake.requests_to(CHAT)) == 1
    assert not ctx.llm_enabled
    warning = RunEvent.objects.get(topic=ctx.topic, stage="llm")
    assert f"without the LLM {ctx.model}: it is configured, but this run gave it up" in warning.message
    assert ("billing" if fault == "quota" else "ollama pull qwen3:8b") in warning.message
