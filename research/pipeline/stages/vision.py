"""Stage −1: a question's picture, described by the vision model.

The picture goes to `VISION_MODEL` on the same OpenAI-compatible endpoint, inline as a data URL
in an `image_url` content part, under the global LLM limit and the user's budget, cached by the
image's hash, the model and the prompt version (`CacheEntry` kind "vision", for its owner
alone: a picture is private). The model's labels, entities and the text it read join the
question for planning and search (`RunContext.question`); the whole description reaches the
text model's prompts as an "image context" block, so a text-only model can use the picture too.

Without a vision model the picture is kept and shown, and the topic goes on with the text,
saying so in its log. A failed description is a warning, never the end of the topic.
"""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext_noop

from mindsearch.clients import llm as llm_client
from research import budget, images
from research.models import CacheEntry, LLMCall, TopicImage
from research.pipeline import cache as result_cache
from research.pipeline.context import RunContext
from research.pipeline.prompting import load_prompt
from research.pipeline.replies import language_of
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.VISION
MAX_TOKENS = 500
MAX_LABELS = 8
MAX_TEXT_CHARS = 1000


def is_configured() -> bool:
    return llm_client.is_configured() and bool(settings.VISION_MODEL)


def run(ctx: RunContext) -> Outcome:
    """Describe the picture once per topic (`Topic.vision_checked`); a topic asked again with it
    keeps a description and tries again where there was none."""
    image = TopicImage.objects.filter(topic=ctx.topic).first()
    if image is None or image.analysis == TopicImage.Analysis.DONE or ctx.topic.vision_checked:
        return Outcome.CONTINUE
    _analyse(ctx, image)
    ctx.topic.vision_checked = True
    ctx.topic.save(update_fields=["vision_checked", "updated_at"])
    return Outcome.CONTINUE


def _analyse(ctx: RunContext, image: TopicImage) -> None:
    if not is_configured():
        image.analysis = TopicImage.Analysis.NO_VISION
        image.save(update_fields=["analysis"])
        ctx.warn(
            STAGE,
            gettext_noop(
                "No vision model is configured (VISION_MODEL is empty): the picture is kept and shown, "
                "and the topic goes on with the text of the question."
            ),
            args={},
        )
        return
    ctx.begin(STAGE, gettext_noop("Describing the picture"))
    try:
        found = describe(ctx, image)
    except llm_client.LLMError as exc:
        image.analysis, image.error = TopicImage.Analysis.FAILED, str(exc)[:1000]
        image.save(update_fields=["analysis", "error"])
        ctx.fell_back(
            STAGE,
            gettext_noop(
                "The vision model could not describe the picture (%(error)s); going on with the text."
            ),
            exc,
        )
        return
    for name, value in found.items():
        setattr(image, name, value)
    image.analysis, image.vision_model, image.error = TopicImage.Analysis.DONE, settings.VISION_MODEL, ""
    image.save(update_fields=[*found, "analysis", "vision_model", "error"])
    ctx.load_image(image)
    ctx.finish(
        STAGE,
        gettext_noop("The picture shows: %(labels)s"),
        labels=", ".join(image.labels) or "—",
        data={"labels": image.labels, "entities": image.entities},
    )


def describe(ctx: RunContext, image: TopicImage) -> dict:
    """{labels, entities, text, description}: from the cache, or one call to the vision model."""
    prompt = load_prompt("vision")
    language = language_of(ctx.topic.question)
    key = result_cache.make_key("vision", prompt.version, settings.VISION_MODEL, image.sha256, language)
    kind = CacheEntry.Kind.VISION
    cached = result_cache.get(kind, key, ctx.owner_id)
    if cached is not None:
        _record(ctx, prompt.version, cached, cache_hit=True)
        return parse_description(cached["text"])
    budget.check(ctx.owner_id)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": prompt.text},
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": f"Вопрос пользователя: {ctx.topic.question}\nЯзык ответа: {language}",
                },
                {
                    "type": "image_url",
                    "image_url": {"url": images.data_url(bytes(image.data), image.content_type)},
                },
            ],
        },
    ]
    started = time.monotonic()
    try:
        completion = async_to_sync(llm_client.complete)(
            messages, max_tokens=MAX_TOKENS, user=ctx.owner_id, model=settings.VISION_MODEL
        )
    except llm_client.LLMError as exc:
        LLMCall.objects.create(
            user_id=ctx.owner_id,
            topic_id=ctx.topic.pk,
            stage=STAGE,
            model=settings.VISION_MODEL,
            prompt_version=prompt.version,
            cache_kind=kind,
            error=str(exc),
            attempts=exc.attempts,
            latency_ms=exc.latency_ms or int((time.monotonic() - started) * 1000),
        )
        raise
    found = parse_description(completion.text)  # an answer without JSON is not cached
    payload = {
        "text": completion.text,
        "model": completion.model,
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
    }
    with transaction.atomic():
        result_cache.put(
            kind, key, payload, owner_id=ctx.owner_id, description=f"{STAGE}: {image.sha256[:16]}"
        )
        _record(ctx, prompt.version, payload, attempts=completion.attempts, latency_ms=completion.latency_ms)
    return found


def _record(ctx: RunContext, version: str, usage: dict, **fields: object) -> None:
    LLMCall.objects.create(
        user_id=ctx.owner_id,
        topic_id=ctx.topic.pk,
        stage=STAGE,
        model=usage.get("model") or settings.VISION_MODEL,
        prompt_version=version,
        prompt_tokens=usage.get("prompt_tokens", 0),
        completion_tokens=usage.get("completion_tokens", 0),
        cache_kind=CacheEntry.Kind.VISION,
        **fields,
    )


def parse_description(text: str) -> dict:
    """The model's JSON as the fields of `TopicImage`; LLMBadAnswer when it holds none."""
    answer = llm_client.parse_json(text)
    if not isinstance(answer, dict):
        raise llm_client.LLMBadAnswer("The vision model's answer is not a JSON object")

    def words(value: object) -> list[str]:
        items = value if isinstance(value, list) else []
        cleaned = [" ".join(str(item).split())[:80] for item in items if str(item).strip()]
        return list(dict.fromkeys(cleaned))[:MAX_LABELS]

    return {
        "labels": words(answer.get("labels")),
        "entities": words(answer.get("entities")),
        "text": " ".join(str(answer.get("text") or "").split())[:MAX_TEXT_CHARS],
        "description": " ".join(str(answer.get("description") or "").split())[:MAX_TEXT_CHARS],
    }
