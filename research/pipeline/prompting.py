"""The pipeline's way to ask the LLM: the prompts in prompts/, the cache, and one `LLMCall` row per ask.

Scraped pages and private documents reach the model only inside a data block that the system
prompt declares to be data, never instructions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.db import transaction

from mindsearch.clients import llm as llm_client
from research import budget
from research.models import LLMCall
from research.pipeline import cache as result_cache
from research.pipeline import cap
from research.pipeline.context import RunContext, db
from research.pipeline.stage import StageName

PROMPTS = Path(__file__).with_name("prompts")
DATA_OPEN, DATA_CLOSE = "<<<ДАННЫЕ", "ДАННЫЕ>>>"
T = TypeVar("T")


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str
    version: str


@cache
def load_prompt(name: str) -> Prompt:
    """A prompt from prompts/ plus the untrusted-data rule; the version is a hash of the final text."""
    text = (PROMPTS / f"{name}.txt").read_text().strip() + "\n" + (PROMPTS / "untrusted.txt").read_text()
    return Prompt(name=name, text=text, version=hashlib.sha256(text.encode()).hexdigest()[:12])


def data_block(text: str) -> str:
    # A page cannot close the block early by containing the closing marker itself.
    return f"{DATA_OPEN}\n{text.replace(DATA_CLOSE, 'ДАННЫЕ >>>')}\n{DATA_CLOSE}"


def image_labels_block(ctx: RunContext) -> str:
    """The picture's labels (the vision stage's reading of it) for a prompt that does not take
    the whole image context: as data."""
    if not ctx.image_labels:
        return ""
    labels = ", ".join(dict.fromkeys(ctx.image_labels))
    return "\n\nМетки изображения к вопросу (их прочитала модель зрения):\n" + data_block(labels)


def image_context_block(ctx: RunContext) -> str:
    """The "image context" for a text-only model: what the vision model saw, as data
    (the text in a picture is untrusted like a web page's)."""
    if not ctx.image_context:
        return ""
    return "\n\nКонтекст изображения (описание от модели зрения):\n" + data_block(ctx.image_context)


# What one short line of an answer (a sub-query, a search query) may take, Russian counted: the
# limits of the stages that ask for lines are a line's worth each and one more.
LINE_TOKENS = 64


async def ask(
    ctx: RunContext,
    stage: StageName,
    prompt: Prompt,
    user_content: str,
    *,
    kind: str,
    private: bool = False,
    max_tokens: int | None = None,
    on_text: llm_client.TextListener | None = None,
    on_thinking: llm_client.ThinkingListener | None = None,
) -> str:
    """The answer text (`ask_completion`'s), from the cache when this exact question was asked
    of this model on this endpoint before."""
    completion = await ask_completion(
        ctx,
        stage,
        prompt,
        user_content,
        kind=kind,
        private=private,
        max_tokens=max_tokens,
        on_text=on_text,
        on_thinking=on_thinking,
    )
    return completion.text


async def ask_completion(
    ctx: RunContext,
    stage: StageName,
    prompt: Prompt,
    user_content: str,
    *,
    kind: str,
    private: bool = False,
    max_tokens: int | None = None,
    on_text: llm_client.TextListener | None = None,
    on_thinking: llm_client.ThinkingListener | None = None,
    empty_ok: bool = False,
) -> llm_client.Completion:
    """The whole answer — its text (never reasoning), whether the token limit cut it
    (`truncated`), its reasoning tokens — from the cache when this exact question was asked of
    this model on this endpoint (`llm.endpoint_key`) with this limit before: another server
    behind the same model name never serves the first one's answers.

    Private text is cached for its owner alone; with LLM_CACHE_SCOPE=user every answer is (no
    user can then tell from a fast answer that someone else asked the same recently).

    With `on_text` the answer is streamed to it as it is written (a cached one at once, whole),
    and `on_thinking` hears that the model is still reasoning; only a finished answer is cached
    or returned.

    With `empty_ok` an empty answer is an answer (`llm.complete`'s: asked once, not retried),
    cached and counted like any other, and read back from the cache as the same empty answer;
    a caller without it is never given one (it retries, and an empty answer in the cache is
    asked again)."""
    # What a private picture showed (its labels in the question, its description) is private too.
    private = private or bool(ctx.image_labels or ctx.image_context)
    owner_id = ctx.owner_id if private or settings.LLM_CACHE_SCOPE == "user" else None
    endpoint = llm_client.endpoint_key(ctx.model)
    key = result_cache.make_key("llm", stage, prompt.version, endpoint, str(max_tokens or ""), user_content)
    cached = await db(result_cache.get)(kind, key, owner_id)
    if cached is not None and (empty_ok or cached["text"].strip()):
        await db(_record)(ctx, stage, prompt, cached, cache_hit=True, cache_kind=kind)
        if on_text is not None:
            await on_text(cached["text"])
        return _cached_completion(cached, ctx.model)
    messages = [{"role": "system", "content": prompt.text}, {"role": "user", "content": user_content}]
    held = 0  # the most this call can cost, held against the owner's budget until its row is saved
    try:
        try:
            await db(cap.check)(ctx.topic)
            if budget.enabled() and ctx.owner_id is not None:
                most = await llm_client.most_tokens(messages, max_tokens)
                held = await db(budget.hold)(ctx.owner_id, most, settings.AITUNNEL_MODEL)
            completion = await llm_client.complete(
                messages,
                max_tokens=max_tokens,
                user=ctx.owner_id,
                on_text=on_text,
                on_thinking=on_thinking,
                empty_ok=empty_ok,
            )
        except llm_client.LLMError as exc:
            await db(_record)(
                ctx,
                stage,
                prompt,
                {},
                cache_kind=kind,
                error=str(exc),
                attempts=exc.attempts,
                latency_ms=exc.latency_ms,
            )
            await db(ctx.llm_failed)(exc)
            raise
        ctx.llm_failures = 0
        payload = {
            "text": completion.text,
            "model": completion.model,
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "reasoning_tokens": completion.reasoning_tokens,
            "finish_reason": completion.finish_reason,
            "usage_estimated": completion.usage_estimated,
        }
        # Saved before anything else happens to it, so a crash right after does not pay for it twice;
        # the answer and its `LLMCall` row in one transaction, so a saved answer is always counted.
        await db(_save)(ctx, stage, prompt, kind, key, owner_id, payload, completion)
        return completion
    finally:
        await db(budget.release)(ctx.owner_id, held)


def _cached_completion(cached: dict[str, Any], model: str) -> llm_client.Completion:
    """A cached answer as the Completion it was (no attempts, no wait: nothing was sent)."""
    return llm_client.Completion(
        text=cached["text"],
        model=cached.get("model") or model,
        prompt_tokens=cached.get("prompt_tokens", 0),
        completion_tokens=cached.get("completion_tokens", 0),
        latency_ms=0,
        attempts=0,
        reasoning_tokens=cached.get("reasoning_tokens", 0),
        finish_reason=cached.get("finish_reason", "stop"),
        usage_estimated=cached.get("usage_estimated", False),
    )


@dataclass(frozen=True)
class Asking:
    """How a stage asks one prompt of prompts/, `prompt`: its answers are cached under `kind`; when the
    LLM fails, the stage goes on another way (the extractive engine, keywords) after the warning
    `failed`, a msgid with %(error)s."""

    prompt: str
    kind: str
    failed: str
    max_tokens: int | None = None  # what the answer needs: a small model writes up to any limit

    async def answer(
        self,
        ctx: RunContext,
        stage: StageName,
        request: str,
        parse: Callable[[str], T],
        *,
        private: bool = False,
        max_tokens: int | None = None,
    ) -> T | None:
        """`parse` of the LLM's answer to `request`; None when the LLM is off, or failed (an
        LLMError, from the LLM or from `parse` on an unusable answer: then `failed` is warned of).
        `max_tokens`: this request's limit, when it depends on the request (else the Asking's)."""
        if not ctx.llm_enabled:
            return None
        prompt = load_prompt(self.prompt)
        max_tokens = max_tokens or self.max_tokens
        try:
            text = await ask(
                ctx, stage, prompt, request, kind=self.kind, private=private, max_tokens=max_tokens
            )
            return parse(text)
        except llm_client.LLMError as exc:
            await db(ctx.fell_back)(stage, self.failed, exc)
            return None


def _save(
    ctx: RunContext,
    stage: StageName,
    prompt: Prompt,
    kind: str,
    key: str,
    owner_id: int | None,
    payload: dict[str, Any],
    completion: llm_client.Completion,
) -> None:
    with transaction.atomic():
        result_cache.put(kind, key, payload, owner_id=owner_id, description=f"{stage}: {ctx.question[:200]}")
        _record(
            ctx,
            stage,
            prompt,
            payload,
            cache_kind=kind,
            attempts=completion.attempts,
            latency_ms=completion.latency_ms,
        )


def _record(ctx: RunContext, stage: StageName, prompt: Prompt, usage: dict[str, Any], **fields: Any) -> None:
    LLMCall.objects.create(
        user_id=ctx.owner_id,
        topic_id=ctx.topic.pk,
        stage=stage,
        model=usage.get("model") or ctx.model,
        prompt_version=prompt.version,
        prompt_tokens=usage.get("prompt_tokens", 0),
        completion_tokens=usage.get("completion_tokens", 0),
        reasoning_tokens=usage.get("reasoning_tokens", 0),
        **fields,
    )
