"""A whole topic against each kind of model a user points MindSearch at, as its provider documents
its answers (tests/support/fakes.py `Dialect`): OpenAI's reasoning family (400 on `max_tokens`
and on `temperature`, hidden reasoning tokens), a `<think>` model on Ollama, a
`reasoning_content` model (vLLM, DeepSeek) and Mistral's content parts. Each completes — the
report streamed, its citations checked — with no reasoning text in the report, plan, scores,
summaries, events or files, and a refused parameter costs one extra call per process start."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from mindsearch.clients import llm
from research import export
from research.models import Citation, HitScore, LLMCall, Summary, Topic
from tests.research.pipeline.test_citation_report import researched
from tests.support import fakes
from tests.support.world import World

pytestmark = pytest.mark.django_db

DIALECTS = {
    "openai-reasoning": fakes.OPENAI_REASONING,
    "ollama-think": fakes.OLLAMA_THINK,
    "ollama-reasoning": fakes.OLLAMA_REASONING,
    "vllm-reasoning-content": fakes.VLLM_REASONING,
    "deepseek-reasoner": fakes.DEEPSEEK_REASONER,
    "magistral-parts": fakes.MAGISTRAL,
}
# Words of the stand-ins' reasoning (fakes.THINKING) that no answer of theirs contains.
REASONING = ("Okay, the user wants", "Let me think", "<think", "</think>")


def speaking(world: World, dialect: fakes.Dialect) -> list[fakes.Request]:
    world.llm.routes[("POST", "/v1/chat/completions")] = fakes.openai_chat(world.script, dialect=dialect)
    llm.forget_endpoints()  # what a new process knows: nothing learned yet
    return [r for r in world.llm.requests if r.path == "/v1/chat/completions"]


def chat_requests(world: World) -> int:
    return sum(1 for r in world.llm.requests if r.path == "/v1/chat/completions")


def everything_shown(topic: Topic) -> dict[str, str]:
    """Every place a reader or the API meets the model's words."""
    return {
        "report": topic.report.markdown,
        "markdown file": export.report_markdown(topic),
        "plan": "\n".join(topic.subqueries.values_list("text", flat=True)),
        "scores": "\n".join(str(r) for r in HitScore.objects.filter(hit__topic=topic).values()),
        "summaries": "\n".join(Summary.objects.filter(document__topic=topic).values_list("text", flat=True)),
        "events": "\n".join(f"{e.message} {e.data}" for e in topic.events.all()),
    }


@pytest.mark.parametrize("name", DIALECTS)
def test_a_topic_completes_against_each_provider_s_answers(
    name: str, alice: User, loopback: World, settings: Any
) -> None:
    dialect = DIALECTS[name]
    speaking(loopback, dialect)
    topic = researched(alice)
    assert topic.report.markdown.startswith("#")
    assert Citation.objects.filter(report=topic.report).exclude(verdict="").exists()  # checked
    leaks = [place for place, text in everything_shown(topic).items() if any(r in text for r in REASONING)]
    assert not leaks, f"reasoning shown in {leaks}"
    asked = LLMCall.objects.filter(topic=topic, cache_hit=False).count()
    refused = chat_requests(loopback) - asked  # one extra request per parameter refused, at most
    assert 0 <= refused <= len(dialect.refuses) and (refused > 0) == bool(dialect.refuses)
    if dialect.reasoning:
        assert LLMCall.objects.filter(topic=topic, reasoning_tokens__gt=0).exists()

    # The next topic of the same process pays for no refusal again.
    before = chat_requests(loopback)
    second = researched(alice, question="Mixture of Tokens: чем он отличается от Mixture of Experts?")
    again = LLMCall.objects.filter(topic=second, cache_hit=False).count()
    assert chat_requests(loopback) - before == again
