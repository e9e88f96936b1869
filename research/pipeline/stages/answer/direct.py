"""The direct answer: a message the route stage sent to no search (`Topic.route` "direct").

Greetings and short questions the LLM says need no search are answered here, in one short LLM
call (or a fixed reply to small talk without an LLM), and the topic is done: no plan, no search,
no pages. When no answer can be written (the LLM failed on a question that is not small talk),
the topic's route becomes "search" and the run loop goes on with the search. A run that stopped
after the reply was saved finds it and writes nothing again.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.utils.translation import gettext_noop

from research.models import CacheEntry, Report, Topic
from research.pipeline.context import RunContext
from research.pipeline.prompting import Asking, image_labels_block
from research.pipeline.question_domain import looks_like_small_talk
from research.pipeline.replies import is_russian
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.ANSWER
ROUTE = Topic.Route.DIRECT
MAX_TOKENS = 400


def run(ctx: RunContext) -> Outcome:
    """ANSWERED once the reply is saved; CONTINUE (the route now "search") when none can be written."""
    topic = ctx.topic
    if Report.objects.filter(topic=topic).exists():
        return Outcome.ANSWERED
    markdown, model = _reply(ctx)
    if not markdown:
        topic.route = Topic.Route.SEARCH
        topic.save(update_fields=["route", "updated_at"])
        return Outcome.CONTINUE
    Report.objects.get_or_create(topic=topic, defaults={"markdown": markdown, "sources": [], "model": model})
    ctx.finish(STAGE, gettext_noop("Answered directly: this message needs no search"))
    return Outcome.ANSWERED


REPLY = Asking(
    "direct",
    CacheEntry.Kind.ANSWERS,
    gettext_noop("The LLM could not answer directly (%(error)s)."),
    max_tokens=MAX_TOKENS,
)


def _reply(ctx: RunContext) -> tuple[str, str]:
    """(Markdown, model) of a short reply; ("", "") when only a search can answer."""
    request = f"Сообщение пользователя: {ctx.asked}" + image_labels_block(ctx)
    text = async_to_sync(REPLY.answer)(ctx, STAGE, request, str.strip)
    if text:
        return text, ctx.model
    if looks_like_small_talk(ctx.question):
        return fixed_reply(ctx.question), ""
    return "", ""


def fixed_reply(question: str) -> str:
    if is_russian(question):
        return (
            "Здравствуйте! Я MindSearch: задайте тему, и я найду источники в интернете и в ваших "
            "документах и напишу отчёт со ссылками на них."
        )
    return (
        "Hello! I am MindSearch: give me a topic and I will research it in web sources and your "
        "documents and write a report that cites them."
    )
