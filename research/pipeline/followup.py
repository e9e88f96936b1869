"""Follow-up questions on a finished topic: its thread.

A follow-up is answered from the topic's sources first: the sources numbered so far (the
report's, then those earlier follow-ups added) are ranked by how well their passages match the
question. A new search is made only when the question needs one: when those passages do not
hold most of the question's words and the route stage's classification (`classifier.classify`:
the LLM, or keywords without one) does not say it needs no search. The search is the run's own
path for one sub-query — queries, search, scored hits, pages read, summarised and scored, driven
by the run loop (`run.drive`) — and the best pages it brings are numbered after the topic's
sources so far, so every `[n]` in the thread means one source everywhere on the page and in exports.

The answer is streamed like the report (the text so far on the `FollowUp` row, announced with a
`followup.draft` message at most every DRAFT_INTERVAL_SECONDS) and its citations are checked as
the report's are. A follow-up that fails says why on its row; the thread and the topic stay as
they were. Follow-ups of one topic are answered one at a time under the topic's run lock, in
their order.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone
from django.utils.translation import gettext_noop

from mindsearch import lifecycle
from mindsearch.clients.llm import Completion, LLMError
from research import progress
from research.event_text import phrase
from research.models import Document, FollowUp, Report, RunEvent, SubQuery, Topic
from research.pipeline import citecheck, classifier, extractive, passages, question_domain, window
from research.pipeline.context import Cancelled, RunContext, StageError, db
from research.pipeline.prompting import data_block, image_context_block, load_prompt
from research.pipeline.replies import is_russian, language_of
from research.pipeline.run import ROUND_STAGES, Stage, drive, topic_lock
from research.pipeline.stage import StageName
from research.pipeline.stages.answer import report_writer
from research.pipeline.text import BM25, tokenize

log = logging.getLogger(__name__)

STAGE = StageName.FOLLOWUP
# The topic's sources sent with a follow-up: the best-matching ones, keeping their numbers.
MAX_KNOWN_SOURCES = 8
# The best pages a follow-up's own search adds to the numbering.
MAX_NEW_SOURCES = 5
# Share of the question's content words found in the topic's passages from which the question
# counts as covered by them (no search is made, whatever the classifier says).
COVERED = 0.7
# What the writer sees of the report and of the thread before this question.
REPORT_CONTEXT_CHARS = 6_000
EARLIER_FOLLOWUPS = 3
# A follow-up with fewer words than this ("GPT-4o?") is answered in the topic's language.
MIN_WORDS_FOR_LANGUAGE = 2
EARLIER_ANSWER_CHARS = 1_500
# The answer's token budget (less when the model's window is small: `window.answer_room`).
ANSWER_TOKENS = 2_048
# A section to expand: its heading and this much of its text are what passages are ranked by.
SECTION_CONTEXT_CHARS = 1_500
# The run's own path for one sub-query (`run.ROUND_STAGES`), without the per-year search, which
# would add sub-queries of the topic's period: a follow-up searches its own question only.
SEARCH_STAGES: tuple[Stage, ...] = tuple(stage for stage in ROUND_STAGES if stage.STAGE != StageName.YEARS)


@dataclass
class FollowUpContext(RunContext):
    """A run's context whose question is the follow-up's: queries, scores, summaries and the
    cache see the question being answered, while the topic stays the one searched."""

    followup_question: str = ""

    @property
    def asked(self) -> str:
        return self.followup_question or self.topic.question


@dataclass
class Numbered:
    """One source of the topic's numbering: its entry in a sources list and its document."""

    source: dict[str, Any]
    document: Document | None


def expand_question(section: str, russian: bool) -> str:
    """The question an *Expand this section* follow-up asks, in the topic's language."""
    if russian:
        return f"Раскройте подробнее раздел «{section}»"
    return f"Expand the section “{section}”"


def report_sections(markdown: str) -> list[str]:
    """The headings of a report (## and ###) a reader may ask to expand, in order, without the
    sources list."""
    body = report_writer.SOURCES_HEADING.split(markdown)[0]
    found = []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped.startswith(("## ", "### ")):
            title = passages.plain(stripped.lstrip("#").strip())
            if title and title not in found:
                found.append(title)
    return found


def section_text(markdown: str, title: str) -> str:
    """The text under a heading of the report, up to the next heading of its level or above."""
    body = report_writer.SOURCES_HEADING.split(markdown)[0]
    lines = body.splitlines()
    for index, line in enumerate(lines):
        stripped = line.strip()
        level = len(stripped) - len(stripped.lstrip("#"))
        if level in (2, 3) and passages.plain(stripped.lstrip("#").strip()) == title:
            taken = []
            for following in lines[index + 1 :]:
                depth = len(following.strip()) - len(following.strip().lstrip("#"))
                if following.strip().startswith("#") and depth <= level:
                    break
                taken.append(following)
            return "\n".join(taken).strip()
    return ""


# --- The thread's numbering ----------------------------------------------------------------------


def numbered_sources(topic: Topic, before: int | None = None) -> list[Numbered]:
    """The topic's sources as numbered so far: the report's, then each answered follow-up's new
    ones (those before position `before`, when given), with their documents."""
    report = Report.objects.filter(topic=topic).first()
    sources = list(report.sources) if report else []
    earlier = topic.followups.filter(status=FollowUp.Status.COMPLETED)
    if before is not None:
        earlier = earlier.filter(position__lt=before)
    for followup in earlier.order_by("position"):
        sources.extend(followup.sources)
    ids = [source.get("document_id") for source in sources if source.get("document_id")]
    documents = Document.objects.filter(topic=topic).select_related("hit__subquery").in_bulk(ids)
    return [Numbered(source, documents.get(source.get("document_id"))) for source in sources]


def sources_by_number(topic: Topic, upto: FollowUp | None = None) -> dict[int, dict[str, Any]]:
    """Every number of the thread up to and including `upto` (all when None) → its source."""
    # The sources alone: a report's or an answer's stored rendering can be megabytes.
    report = Report.objects.filter(topic=topic).values_list("sources", flat=True).first()
    sources = list(report) if isinstance(report, list) else []
    followups = topic.followups.filter(status=FollowUp.Status.COMPLETED)
    if upto is not None:
        followups = followups.filter(position__lte=upto.position)
    for answered in followups.order_by("position").values_list("sources", flat=True):
        sources.extend(answered if isinstance(answered, list) else [])
    return {source["n"]: source for source in sources if isinstance(source.get("n"), int)}


def next_number(known: list[Numbered]) -> int:
    return max((entry.source.get("n", 0) for entry in known), default=0) + 1


# --- Answering -----------------------------------------------------------------------------------

Listener = Callable[[RunEvent], None]


def answer_pending(topic_id: int, listeners: list[Listener] | None = None) -> list[int]:
    """Answer every queued follow-up of a topic in order, while holding its lock; the ids done."""
    done: list[int] = []
    while True:
        with topic_lock(topic_id) as locked:
            if not locked:
                return done
            pending = list(
                FollowUp.objects.filter(topic_id=topic_id)
                .pending()
                .order_by("position")
                .values_list("pk", flat=True)
            )
            if not pending or set(pending) <= set(done):
                return done  # none left, or only ones this task already tried (no endless loop)
            for followup_id in pending:
                _answer_locked(followup_id, listeners)
                done.append(followup_id)
        # One queued while the lock was held, whose own task found it taken, is answered now.
        if not FollowUp.objects.filter(topic_id=topic_id).pending().exists():
            return done


def _answer_locked(followup_id: int, listeners: list[Listener] | None) -> None:
    followup = FollowUp.objects.select_related("topic").filter(pk=followup_id).first()
    if followup is None or not followup.is_pending:
        return
    topic = followup.topic
    followup.status, followup.error, followup.heartbeat_at = FollowUp.Status.RUNNING, "", timezone.now()
    followup.save(update_fields=["status", "error", "heartbeat_at"])
    ctx = FollowUpContext.for_topic(topic, listeners)
    ctx.followup_question = followup.question
    try:
        _answer(ctx, followup)
    except BaseException as exc:
        if lifecycle.is_stop(exc):
            raise  # the worker is stopping: the task hands the follow-up back
        if isinstance(exc, Cancelled):
            return  # the topic was deleted meanwhile
        if not isinstance(exc, Exception):
            raise
        _failed(ctx, followup, exc)


def _failed(ctx: RunContext, followup: FollowUp, exc: Exception) -> None:
    if isinstance(exc, StageError):
        message = str(exc)
        # A msgid is told as a phrase, for the page to translate (the thread shows `error_text`).
        reason: str | dict[str, Any] = (
            phrase(exc.msgid, **exc.i18n_args) if exc.i18n_args is not None else message[:500]
        )
    else:  # the details are for the log, not for the thread or the API
        log.exception("follow-up %s of topic %s failed", followup.pk, followup.topic_id)
        message = gettext_noop("An unexpected error stopped it; the server log has the details.")
        reason = phrase(message)
    FollowUp.objects.filter(pk=followup.pk).update(
        status=FollowUp.Status.FAILED, error=message[:2000], draft="", finished_at=timezone.now()
    )
    if not Topic.objects.filter(pk=followup.topic_id).exists():
        return  # deleted meanwhile: nothing to tell
    _tell(
        ctx,
        followup,
        gettext_noop("Follow-up %(number)s could not be answered: %(error)s"),
        level=RunEvent.Level.ERROR,
        number=followup.position,
        error=reason,
    )


def _tell(
    ctx: RunContext,
    followup: FollowUp,
    message: str,
    *,
    level: str = RunEvent.Level.INFO,
    data: dict[str, Any] | None = None,
    **args: Any,
) -> None:
    """A line of the follow-up's progress: `message` is a msgid with `args` (any names but
    `level` and `data`), and the event's data says which follow-up it is about."""
    ctx.emit(STAGE, message, args=args, level=level, data={"followup": followup.pk, **(data or {})})


def _warn(ctx: RunContext, followup: FollowUp, message: str, **args: Any) -> None:
    _tell(ctx, followup, message, level=RunEvent.Level.WARNING, **args)


def _answer(ctx: FollowUpContext, followup: FollowUp) -> None:
    from research.presenters import store_thread

    topic = ctx.topic
    _tell(
        ctx,
        followup,
        gettext_noop("Follow-up %(number)s: %(question)s"),
        number=followup.position,
        question=followup.question,
    )
    known = numbered_sources(topic, before=followup.position)
    query = _ranking_query(topic, followup)
    ranked = _rank_known(known, query)
    excerpts = {entry.source["n"]: excerpt for entry, excerpt in ranked}
    new: list[Document] = []
    if _needs_search(ctx, followup, query, list(excerpts.values())):
        new = _search(ctx, followup, {entry.document.pk for entry in known if entry.document})
    chosen = [(entry.source, entry.document) for entry, _excerpt in ranked]
    new_sources = [
        report_writer.source_entry(n, document, query) for n, document in enumerate(new, next_number(known))
    ]
    for source, document in zip(new_sources, new, strict=True):
        excerpts[source["n"]] = passages.document_excerpt(document, query, report_writer.MAX_CHARS_PER_SOURCE)
        chosen.append((source, document))
    if not chosen:
        raise StageError(
            gettext_noop(
                "The topic has no sources to answer from, and no new search found any: "
                "ask a new topic instead."
            ),
            {},
        )
    _tell(
        ctx,
        followup,
        gettext_noop("Answering follow-up %(number)s from %(count)s sources"),
        number=followup.position,
        count=len(chosen),
    )
    # The request carries the report too, which may quote the owner's documents: cached for the
    # owner alone whenever the topic could have read any.
    private = topic.sources not in (Topic.Sources.WEB, Topic.Sources.PAPERS) or any(
        source.get("fetched_via") == Document.FetchedVia.PRIVATE for source, _d in chosen
    )
    body, model = _write(ctx, followup, chosen, excerpts, query, private)
    body = clean_citations(body, set(excerpts))
    if not body.strip():
        raise StageError(
            gettext_noop("No answer could be written from the sources: none of their sentences is about it."),
            {},
        )
    verdicts = _check(ctx, body, excerpts, private)
    with transaction.atomic():
        locked = FollowUp.objects.select_for_update().get(pk=followup.pk)
        locked.answer, locked.sources, locked.model = body, new_sources, model
        locked.citations = [verdict.row() for verdict in verdicts]
        locked.status, locked.finished_at = FollowUp.Status.COMPLETED, timezone.now()
        locked.draft, locked.error = "", ""
        locked.save()
        store_thread(locked.topic)  # rendered once here, never by a page view (issue 26)
    _tell(ctx, followup, gettext_noop("Follow-up %(number)s answered"), number=followup.position)


def _ranking_query(topic: Topic, followup: FollowUp) -> str:
    """What the topic's passages are ranked by: the question, or the section to expand."""
    if followup.kind != FollowUp.Kind.EXPAND:
        return followup.question
    report = Report.objects.filter(topic=topic).first()
    text = section_text(report.markdown, followup.section) if report else ""
    return f"{followup.section} {passages.plain(text)[:SECTION_CONTEXT_CHARS]}".strip()


def _rank_known(known: list[Numbered], query: str) -> list[tuple[Numbered, str]]:
    """The topic's sources most about the query (at most MAX_KNOWN_SOURCES), in number order,
    each with its passages most about the query."""
    usable = [entry for entry in known if entry.document is not None and entry.document.text.strip()]
    if not usable:
        return []
    excerpts = [
        passages.document_excerpt(entry.document, query, report_writer.MAX_CHARS_PER_SOURCE)
        for entry in usable
        if entry.document is not None
    ]
    scores = BM25([tokenize(text) for text in excerpts]).scores(tokenize(query))
    order = sorted(range(len(usable)), key=lambda i: (-scores[i], usable[i].source["n"]))
    best = sorted(order[:MAX_KNOWN_SOURCES])
    return [(usable[i], excerpts[i]) for i in best]


def coverage(query: str, texts: list[str]) -> float:
    """Share of the query's content words (stemmed, a shared prefix counting) in the texts."""
    words = tokenize(query)
    if not words:
        return 1.0
    found = frozenset(token for text in texts for token in tokenize(text))
    return citecheck.coverage(words, found)


def _needs_search(ctx: FollowUpContext, followup: FollowUp, query: str, excerpts: list[str]) -> bool:
    """The route stage's decision, after the topic's own sources had their say."""
    if question_domain.looks_like_small_talk(followup.question) and excerpts:
        return False
    share = coverage(query, excerpts) if excerpts else 0.0
    percent = f"{share:.0%}"
    if share >= COVERED:
        _tell(
            ctx,
            followup,
            gettext_noop(
                "The topic's sources hold %(share)s of the question's words: answering from them, "
                "without a new search"
            ),
            data={"coverage": round(share, 3)},
            share=percent,
        )
        return False
    decided = classifier.classify(ctx)
    if excerpts and decided.by_llm and not decided.needs_search:
        _tell(
            ctx,
            followup,
            gettext_noop(
                "The route stage says this question needs no search: answering from the topic's sources"
            ),
            data={"coverage": round(share, 3)},
        )
        return False
    _tell(
        ctx,
        followup,
        gettext_noop("The topic's sources hold only %(share)s of the question's words: searching for it"),
        data={"coverage": round(share, 3)},
        share=percent,
    )
    return True


def _search(ctx: FollowUpContext, followup: FollowUp, numbered: set[int]) -> list[Document]:
    """One sub-query through the run's search path; the best new documents it brought."""
    topic = ctx.topic
    subquery = followup.subquery
    if subquery is None:
        number = (topic.subqueries.aggregate(last=Max("round"))["last"] or 1) + 1
        text = question_domain.merge_with_question(followup.question, topic.question)
        subquery = SubQuery.objects.create(
            topic=topic, text=text, position=0, origin=SubQuery.Origin.FOLLOWUP, round=number
        )
        followup.subquery, followup.searched = subquery, True
        followup.save(update_fields=["subquery", "searched"])
    try:
        drive(ctx, SEARCH_STAGES, show=False)
    except StageError as exc:
        _warn(
            ctx,
            followup,
            gettext_noop("The new search failed (%(error)s); answering from the topic's sources"),
            error=phrase(exc.msgid, **exc.i18n_args) if exc.i18n_args is not None else str(exc),
        )
    # Pages this search found first; then others it read (the read stage fills its budget with
    # the topic's best unread pages), if their summaries scored as relevant to the question.
    read = (
        Document.objects.filter(topic=topic, summary__score__isnull=False)
        .filter(Q(hit__subquery=subquery) | Q(round=subquery.round))
        .filter(summary__score__total__gte=settings.RESEARCH_MIN_SCORE)
        .exclude(pk__in=numbered)
        .select_related("hit__subquery", "summary__score")
        .order_by("-summary__score__total", "url", "title")
    )

    def elsewhere(document: Document) -> bool:
        return document.hit is None or document.hit.subquery_id != subquery.pk

    return sorted(read, key=elsewhere)[:MAX_NEW_SOURCES]


# --- Writing -------------------------------------------------------------------------------------


class Draft(report_writer.StreamedText):
    """The follow-up's answer as it is written, saved on the follow-up."""

    def __init__(self, followup: FollowUp) -> None:
        super().__init__()
        self.followup_id, self.topic_id = followup.pk, followup.topic_id

    def save(self, text: str) -> None:
        progress.save_followup_draft(self.topic_id, self.followup_id, text)

    def discard(self) -> None:
        progress.save_followup_draft(self.topic_id, self.followup_id, "")


def _write(
    ctx: FollowUpContext,
    followup: FollowUp,
    chosen: list[tuple[dict[str, Any], Document | None]],
    excerpts: dict[int, str],
    query: str,
    private: bool,
) -> tuple[str, str]:
    """The answer's Markdown and the model that wrote it ("" for the extractive engine)."""
    if ctx.llm_enabled:
        build = _request(ctx, followup, chosen)
        try:
            body = async_to_sync(_ask)(ctx, followup, build, excerpts, query, private)
        except LLMError as exc:
            _warn(
                ctx,
                followup,
                gettext_noop("The LLM could not answer the follow-up (%(error)s); answering with extracts."),
                error=str(exc),
            )
        else:
            if body.strip():
                return body.strip(), ctx.model
    return extractive_answer(query, excerpts), ""


async def _ask(
    ctx: FollowUpContext,
    followup: FollowUp,
    build: Callable[[dict[int, str]], str],
    excerpts: dict[int, str],
    query: str,
    private: bool,
) -> str:
    """The model's answer, streamed into the follow-up's draft, with the sources' texts fitted to
    the model's window (`window.ask_within`); `excerpts` become the texts as sent, which the
    citation check reads."""
    prompt = load_prompt("followup")
    draft = Draft(followup)

    async def send(request: str, max_tokens: int | None) -> Completion:
        return await draft.ask_completion(ctx, STAGE, prompt, request, private=private, max_tokens=max_tokens)

    completion, sent = await window.ask_within(
        ctx, STAGE, dict(excerpts), query, build, send, fixed=prompt.text, answer_tokens=ANSWER_TOKENS
    )
    if completion.truncated:
        completion, sent = await _shorter(ctx, followup, build, send, excerpts, query, completion)
    excerpts.update(sent)
    return completion.text


async def _shorter(
    ctx: FollowUpContext,
    followup: FollowUp,
    build: Callable[[dict[int, str]], str],
    send: window.Send,
    excerpts: dict[int, str],
    query: str,
    cut: Completion,
) -> tuple[Completion, dict[int, str]]:
    """An answer cut off at its token limit is never a finished one: asked once more, shorter,
    with twice the room where the window allows; cut again, it is kept and the thread says so."""
    await db(_warn)(
        ctx,
        followup,
        gettext_noop(
            "The model's answer was cut off at its token limit (%(tokens)s tokens): asking for a shorter one"
        ),
        tokens=cut.completion_tokens,
    )

    def shorter(texts: dict[int, str]) -> str:
        return build(texts) + "\n\n" + report_writer.SHORTER_INSTRUCTION

    prompt = load_prompt("followup")
    completion, sent = await window.ask_within(
        ctx, STAGE, dict(excerpts), query, shorter, send, fixed=prompt.text, answer_tokens=2 * ANSWER_TOKENS
    )
    if completion.truncated:
        await db(_warn)(ctx, followup, gettext_noop("The second answer was cut off too: it is kept as it is"))
    return completion, sent


def _request(
    ctx: FollowUpContext,
    followup: FollowUp,
    chosen: list[tuple[dict[str, Any], Document | None]],
) -> Callable[[dict[int, str]], str]:
    """The request for the follow-up's answer, made of the sources' texts it is given."""
    topic = ctx.topic
    report = Report.objects.filter(topic=topic).first()
    body = report_writer.SOURCES_HEADING.split(report.markdown)[0].strip() if report else ""
    earlier = [
        f"Вопрос: {f.question}\nОтвет:\n{f.answer[:EARLIER_ANSWER_CHARS]}"
        for f in topic.followups.filter(
            status=FollowUp.Status.COMPLETED, position__lt=followup.position
        ).order_by("-position")[:EARLIER_FOLLOWUPS][::-1]
    ]
    context = f"Отчёт:\n{body[:REPORT_CONTEXT_CHARS]}"
    if earlier:
        context += "\n\nПредыдущие уточняющие вопросы:\n\n" + "\n\n".join(earlier)
    head = (
        f"Исходный запрос: {topic.question}\nУточняющий вопрос: {followup.question}\n"
        f"Язык ответа: {answer_language(followup.question, topic)}\n\n"
        + data_block(context)
        + "\n\nИсточники:\n"
    )
    picture = image_context_block(ctx)
    listed = sorted((source for source, _document in chosen), key=lambda source: source["n"])

    def build(excerpts: dict[int, str]) -> str:
        blocks = [
            f"[{source['n']}] {source.get('title') or source.get('url')}\n"
            f"{source.get('url') or report_writer.PRIVATE_ORIGIN}\n\n{excerpts[source['n']]}"
            for source in listed
        ]
        return head + data_block("\n\n---\n\n".join(blocks)) + picture

    return build


def answer_language(question: str, topic: Topic) -> str:
    """The follow-up's own language, or the topic's when it has too few words to tell ("GPT-4o?"
    asked in a Russian thread is answered in Russian)."""
    if len(re.findall(r"[^\W\d_]{2,}", question)) < MIN_WORDS_FOR_LANGUAGE:
        return language_of(topic.question)
    return language_of(question)


def extractive_answer(query: str, excerpts: dict[int, str], sources: int = 3) -> str:
    """Without an LLM: the sentences of the best-matching sources most about the question, each
    paragraph citing its source."""
    numbers = sorted(excerpts)
    texts = [excerpts[n] for n in numbers]
    scores = BM25([tokenize(text) for text in texts]).scores(tokenize(query))
    best = sorted(range(len(numbers)), key=lambda i: (-scores[i], numbers[i]))[:sources]
    paragraphs = []
    for i in sorted(best, key=lambda i: numbers[i]):
        summary = extractive.extractive_summary(texts[i], query, max_sentences=3).strip()
        if tokenize(summary):  # words, not a rule or stray punctuation
            paragraphs.append(f"{summary} [{numbers[i]}]")
    return "\n\n".join(paragraphs)


def clean_citations(body: str, numbers: set[int]) -> str:
    """Drop the model's own sources list and any [n] that is not one of the numbers it was sent."""
    body = report_writer.SOURCES_HEADING.split(body)[0].rstrip()
    return report_writer.CITATION.sub(lambda m: m.group(0) if int(m.group(2)) in numbers else "", body)


def _check(ctx: RunContext, body: str, excerpts: dict[int, str], private: bool) -> list[citecheck.Verdict]:
    claims = citecheck.claims(body, max(excerpts, default=0))
    if not claims:
        return []
    verdicts = citecheck.check(claims, excerpts)
    if ctx.llm_enabled:
        verdicts = async_to_sync(citecheck.verify)(
            ctx, verdicts, private=private, stage=report_writer.CHECK_STAGE
        )
    tally = citecheck.counts(verdicts)
    ctx.emit(
        report_writer.CHECK_STAGE,
        gettext_noop(
            "Citations checked: %(supported)s of %(total)s supported by their sources, "
            "%(weak)s weakly, %(unsupported)s not"
        ),
        args={key: tally[key] for key in ("supported", "total", "weak", "unsupported")},
    )
    return verdicts


def russian_topic(topic: Topic) -> bool:
    return topic.language == "ru" or is_russian(topic.question)
