"""*Check the model* (the status page's button, staff only): one real plan call with the pipeline's
own prompt, request and reading of the answer, and what the pipeline will do with that answer —
read its sub-queries, or fall back to keyword sub-queries and why.

The call is recorded as an `LLMCall` of the staff member who asked: it costs tokens like any other.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils.translation import gettext as _

from mindsearch.clients import llm
from research.models import LLMCall
from research.pipeline.prompting import load_prompt
from research.pipeline.stages import plan

# A small local model on a busy CPU can take this long to plan; a staff member is waiting.
CHECK_SECONDS = 90.0
ANSWER_SHOWN_CHARS = 1500
# The question planned, in the language of the page the staff member reads.
SAMPLE_QUESTIONS = {
    "ru": "Какие есть способы уменьшить потребление памяти большими языковыми моделями?",
    "en": "What are the ways to reduce the memory use of large language models?",
}
OK, WARN, OFF, ERROR = "ok", "warn", "off", "error"


@dataclass(frozen=True)
class ModelCheck:
    """One plan call and what the pipeline makes of it: `state` as a status line's."""

    question: str
    state: str
    summary: str
    subqueries: list[str] = field(default_factory=list)
    answer: str = ""
    detail: str = ""


async def check_model(language: str, user_id: int | None) -> ModelCheck:
    """Ask the configured model to plan a sample question, as the plan stage asks it."""
    question = SAMPLE_QUESTIONS.get(language[:2], SAMPLE_QUESTIONS["en"])
    if not llm.is_configured():
        return ModelCheck(question, OFF, _("No LLM is configured: the pipeline uses the extractive engine."))
    prompt = load_prompt(plan.PLAN.prompt)
    messages = [
        {"role": "system", "content": prompt.text},
        {"role": "user", "content": plan.request_for(question)},
    ]
    try:
        async with asyncio.timeout(CHECK_SECONDS):
            completion = await llm.complete(messages, max_tokens=plan.PLAN.max_tokens, user=user_id)
    except TimeoutError:
        summary = _("Busy: no answer within %(seconds).0f s; the plan stage would use keyword sub-queries")
        return ModelCheck(question, WARN, summary % {"seconds": CHECK_SECONDS})
    except llm.LLMError as exc:
        summary = _("The call failed; the plan stage would use keyword sub-queries")
        return ModelCheck(question, ERROR, summary, detail=str(exc))
    await sync_to_async(_record)(completion, prompt.version, user_id)
    return _verdict(question, completion, plan.read_plan(completion.text))


def _verdict(question: str, completion: llm.Completion, subqueries: list[str]) -> ModelCheck:
    figures = _("%(seconds).1f s; %(answer)d answer tokens, %(reasoning)d reasoning tokens") % {
        "seconds": completion.latency_ms / 1000,
        "answer": completion.completion_tokens - completion.reasoning_tokens,
        "reasoning": completion.reasoning_tokens,
    }
    if completion.truncated:
        figures += "; " + _("the answer was cut by the token limit")
    answer = completion.text[:ANSWER_SHOWN_CHARS]
    if subqueries:
        summary = _("The pipeline reads %(count)d sub-queries from this answer") % {"count": len(subqueries)}
        return ModelCheck(question, OK, summary, subqueries, answer, figures)
    summary = _(
        "The pipeline would use keyword sub-queries instead: the answer has no line starting with %(prefix)s"
    ) % {"prefix": plan.PREFIX}
    return ModelCheck(question, WARN, summary, [], answer, figures)


def _record(completion: llm.Completion, prompt_version: str, user_id: int | None) -> None:
    """The check's cost, counted like any call of the staff member's (budgets, usage)."""
    LLMCall.objects.create(
        user_id=user_id,
        stage="model-check",
        model=completion.model or settings.AITUNNEL_MODEL,
        prompt_version=prompt_version,
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
        latency_ms=completion.latency_ms,
        attempts=completion.attempts,
    )
