"""What every domain data provider does alike: the document it saves, the cache it asks first, the
warning that a topic goes on with the web alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from research.models import CacheEntry, Document, Topic
from research.pipeline import cache as result_cache
from research.pipeline.context import RunContext
from research.pipeline.stage import StageName

STAGE = StageName.DOMAIN  # what every provider writes under


def web_alone(ctx: RunContext, message: str, **args: str) -> None:
    """Warn that the topic gets no domain data, and why (`message`, a msgid that ends "the topic
    goes on with the web alone"): it goes on with the web alone."""
    ctx.warn(STAGE, message, args=args)


def language_of(topic: Topic) -> str:
    return topic.language if topic.language in ("ru", "en") else "en"


def fetched(fetched_at: datetime) -> str:
    return f"{fetched_at:%Y-%m-%d %H:%M} UTC"


def _title(fetched_at: datetime, language: str, *, ru: str, en: str) -> str:
    """A domain document's title in the question's language, saying when its data was fetched."""
    when = fetched(fetched_at)
    return f"{ru} (данные получены {when})" if language == "ru" else f"{en} (fetched {when})"


def publish(
    ctx: RunContext,
    fetched_at: datetime,
    provider: str,
    *,
    url: str,
    text: str,
    ru: str,
    en: str,
    message: str,
    args: dict[str, str],
) -> None:
    """The provider's data saved as the topic's domain document (`_title` of `ru` and `en`), and the
    stage's done event naming it: `message` with `args` and the time it was fetched."""
    title = _title(fetched_at, language_of(ctx.topic), ru=ru, en=en)
    document = Document.objects.create(
        topic=ctx.topic, title=title, url=url, text=text, fetched_via=Document.FetchedVia.DOMAIN
    )
    ctx.emit(
        STAGE,
        message,
        args={**args, "time": fetched(fetched_at)},
        done=1,
        total=1,
        data={"document_id": document.pk, "provider": provider, "fetched_at": fetched_at.isoformat()},
    )


def cached(ctx: RunContext, key_parts: tuple, fetch: Any) -> dict[str, Any]:
    """A provider's answer from the cache (short TTL), or fetched now with the time it was.

    `key_parts` name the provider's URL. Shared between users like the LLM's answers, but kept
    for the owner alone with LLM_CACHE_SCOPE=user or when the place may come from a private
    picture's labels (the fetch time shown with it would tell that someone asked)."""
    kind = CacheEntry.Kind.DOMAIN_DATA
    key = result_cache.make_key("domain", *key_parts)
    private = settings.LLM_CACHE_SCOPE == "user" or bool(ctx.image_labels)
    owner_id = ctx.owner_id if private else None
    hit = result_cache.get(kind, key, owner_id)
    if hit is not None:
        return hit
    payload = {**fetch(), "_fetched_at": timezone.now().astimezone(UTC).isoformat()}
    result_cache.put(
        kind,
        key,
        payload,
        owner_id=owner_id,
        description=f"{STAGE}: {' '.join(map(str, key_parts))}"[:300],
        ttl=timedelta(minutes=settings.DOMAIN_DATA_TTL_MINUTES),
    )
    return payload
