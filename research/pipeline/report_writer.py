"""The report, written from chosen documents with citations: the one writer the answer stage
(`answer.py`, from the best documents of the search) and the local-RAG branch (`local_rag.py`,
from the owner's passages) both call. No stage: it writes under the answer stage's name.

Of a long page only the passages most about the question are sent (`passages`), and the sources
list says which passages those were. Citation numbers the sources list does not have are
dropped, and the sources list is always written here, not by the model, so every [n] resolves to
a real URL or document.

The LLM's answer is streamed: the text so far is saved as the topic's `ReportDraft` and announced
at most every DRAFT_INTERVAL_SECONDS (a cached answer at once), and listeners with a
`report_text` method (the console command) hear every piece. The finished report replaces the
draft in the transaction that saves it; a draft is never taken for a report.

Then every sentence that cites a source is checked against the text that was sent for it
(`citecheck`: words, numbers and embeddings, and the LLM when one is configured), and the
verdicts are stored as `Citation` rows with the report. An LLM answer whose citations are mostly
unsupported is asked for once more, with the verdicts; the better of the two answers is kept.

Before that, an LLM answer in another language than the question's (`replies.report_language`:
the report's own words, by script; quotations, links and citations left out) is asked for once
more with an explicit instruction; the event log says so, and when the second answer is in the
wrong language too, the one with more of the question's language is kept and the log says that.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils.translation import gettext_noop

from mindsearch.clients.llm import LLMError
from research import progress
from research.models import CacheEntry, Citation, Document, Report, ReportDraft, Topic
from research.pipeline import citecheck, extractive, passages
from research.pipeline.context import RunContext, db
from research.pipeline.prompting import Prompt, ask, data_block, image_context_block, load_prompt
from research.pipeline.replies import (
    is_russian,
    language_of,
    language_share,
    question_language,
    report_language,
)
from research.pipeline.stage import StageName

# The events it writes are the answer stage's and the citation check's.
STAGE = StageName.ANSWER
CHECK_STAGE = StageName.CITECHECK
MAX_CHARS_PER_SOURCE = passages.ANSWER_BUDGET
CITATION = re.compile(r"(\s*)\[(\d{1,3})\]")
# File names may contain what Markdown would read as emphasis, links or HTML (an underscore
# inside a word is literal in Markdown, and common in file names, so it is left as it is).
MARKDOWN_SPECIAL = re.compile(r"[\\`*\[\]<>]")
# The line under a private source's title in the answer request, where a web page has its URL.
PRIVATE_ORIGIN = "(документ пользователя)"
# How often the text being written is saved and sent to the page (the console hears every piece).
DRAFT_INTERVAL_SECONDS = 0.3
SOURCES_HEADING = re.compile(
    r"^#{1,3}\s*(источники|список источников|список литературы|sources|references)\s*:?\s*$", re.I | re.M
)


@dataclass(frozen=True)
class Material:
    """What a report is written from: the documents, their entries in the sources list, and the
    excerpt sent for each, by source number."""

    documents: list[Document]
    sources: list[dict]
    excerpts: dict[int, str]

    @property
    def private(self) -> bool:
        """Whether any of it is the owner's: then the LLM's answers are cached for the owner alone."""
        return any(d.fetched_via == Document.FetchedVia.PRIVATE for d in self.documents)


def write_report(ctx: RunContext, documents: list[Document]) -> None:
    """The report from `documents`: the answer stage's choice (`answer.py`), or the passages the
    local-RAG branch took from the owner's documents (`local_rag.py`)."""
    ctx.begin(STAGE, gettext_noop("Writing the report from %(count)s sources"), count=len(documents))
    material = Material(
        documents,
        sources=[source_entry(n, document, ctx.question) for n, document in enumerate(documents, 1)],
        excerpts={
            n: passages.document_excerpt(document, ctx.question, MAX_CHARS_PER_SOURCE)
            for n, document in enumerate(documents, 1)
        },
    )
    body, model = _write(ctx, material)
    if model:
        body, model = in_question_language(ctx, material, body, model)
    body = clean_citations(body, len(material.sources))
    verdicts = check_citations(ctx, body, material.excerpts, private=material.private)
    if model and citecheck.mostly_unsupported(verdicts):
        body, model, verdicts = _ask_again(ctx, material, body, model, verdicts)
    sources = material.sources
    markdown = f"{body}\n\n{sources_section(ctx.question, sources)}\n"
    with transaction.atomic():
        report = Report.objects.create(topic=ctx.topic, markdown=markdown, sources=sources, model=model)
        Citation.objects.bulk_create(citation_rows(report, verdicts))
        ReportDraft.objects.filter(topic=ctx.topic).delete()
    ctx.finish(STAGE, gettext_noop("Report written"))


class StreamedText:
    """Hears a text as the LLM writes it: every piece goes to the listeners, and the text so far
    is saved (and so announced) at most every DRAFT_INTERVAL_SECONDS, the first words at once."""

    def __init__(self, listeners: list[Callable[[str], None]] | None = None) -> None:
        self.listeners = listeners or []
        self.text = self.saved = ""
        self.saved_at = float("-inf")

    async def __call__(self, text: str) -> None:
        self.text = text
        for listener in self.listeners:
            listener(text)
        if time.monotonic() - self.saved_at >= DRAFT_INTERVAL_SECONDS:
            await self.flush()

    async def flush(self) -> None:
        if self.text != self.saved:
            self.saved, self.saved_at = self.text, time.monotonic()
            await db(self.save)(self.text)

    async def drop(self) -> None:
        self.text = self.saved = ""
        await db(self.discard)()

    async def ask(self, ctx: RunContext, stage: str, prompt: Prompt, request: str, *, private: bool) -> str:
        """The LLM's answer (an answer, cached as one), streamed into this text as it is written:
        dropped when the ask fails, saved whole when it is done."""
        try:
            body = await ask(
                ctx, stage, prompt, request, kind=CacheEntry.Kind.ANSWERS, private=private, on_text=self
            )
        except BaseException:
            await self.drop()
            raise
        await self.flush()
        return body

    def save(self, text: str) -> None:
        raise NotImplementedError

    def discard(self) -> None:
        raise NotImplementedError


class Draft(StreamedText):
    """The report's text as it is written; the run's text listeners (the console) hear it too."""

    def __init__(self, ctx: RunContext) -> None:
        super().__init__([hook for hook in (getattr(x, "report_text", None) for x in ctx.listeners) if hook])
        self.topic_id = ctx.topic.pk

    def save(self, text: str) -> None:
        progress.save_draft(self.topic_id, text)

    def discard(self) -> None:
        progress.drop_draft(self.topic_id)


def check_citations(
    ctx: RunContext, body: str, excerpts: dict[int, str], *, private: bool
) -> list[citecheck.Verdict]:
    """Each cited sentence against the text that was sent for its source; the LLM's verdicts
    where one is configured and answers usably, the local ones elsewhere."""
    claims = citecheck.claims(body, len(excerpts))
    if not claims:
        return []
    verdicts = citecheck.check(claims, excerpts)
    if ctx.llm_enabled:
        verdicts = async_to_sync(citecheck.verify)(ctx, verdicts, private=private, stage=CHECK_STAGE)
    tally = citecheck.counts(verdicts)
    ctx.emit(
        CHECK_STAGE,
        gettext_noop(
            "Citations checked: %(supported)s of %(total)s supported by their sources, "
            "%(weak)s weakly, %(unsupported)s not"
        ),
        args={key: tally[key] for key in ("supported", "total", "weak", "unsupported")},
    )
    return verdicts


def _ask_again(
    ctx: RunContext, material: Material, body: str, model: str, verdicts: list[citecheck.Verdict]
) -> tuple[str, str, list[citecheck.Verdict]]:
    """One more answer, with the verdicts; the better of the two by `citecheck.quality`."""
    tally = citecheck.counts(verdicts)
    ctx.warn(
        CHECK_STAGE,
        gettext_noop(
            "%(unsupported)s of %(total)s citations are not supported by their sources: "
            "asking the LLM once more, with the check's verdicts"
        ),
        args={"unsupported": tally["unsupported"], "total": tally["total"]},
    )
    notes = citecheck.feedback(verdicts, russian=is_russian(ctx.question))
    second, second_model = _write(ctx, material, feedback=notes)
    if not second_model:  # the LLM failed this time: the first answer stands
        return body, model, verdicts
    second = clean_citations(second, len(material.sources))
    second_verdicts = check_citations(ctx, second, material.excerpts, private=material.private)
    wanted = question_language(ctx.question)
    keep_second = citecheck.quality(second_verdicts) > citecheck.quality(verdicts) and (
        _language(second) in (wanted, None) or _language(body) not in (wanted, None)
    )
    kept = citecheck.counts(second_verdicts if keep_second else verdicts)
    ctx.emit(
        CHECK_STAGE,
        gettext_noop("Kept the second answer: %(supported)s of %(total)s citations supported")
        if keep_second
        else gettext_noop("Kept the first answer: %(supported)s of %(total)s citations supported"),
        args={"supported": kept["supported"], "total": kept["total"]},
    )
    if keep_second:
        return second, second_model, second_verdicts
    return body, model, verdicts


def citation_rows(report: Report, verdicts: list[citecheck.Verdict]) -> list[Citation]:
    return [Citation(report=report, **v.row()) for v in verdicts]


def in_question_language(ctx: RunContext, material: Material, body: str, model: str) -> tuple[str, str]:
    """The LLM's report in the question's language: asked once more, with an explicit instruction,
    when it came back in the other one; when the second is no better, the one with more of the
    question's language is kept, and the event log says which."""
    wanted = question_language(ctx.question)
    found = _language(body)
    if found in (wanted, None):
        return body, model
    ctx.warn(
        STAGE,
        gettext_noop(
            "The report came back in another language than the question's: asking the LLM once more, "
            "in the question's language"
        ),
        args={},
        data={"question_language": wanted, "report_language": found},
    )
    instruction = LANGUAGE_INSTRUCTION.format(language=language_of(ctx.question))
    second, second_model = _write(ctx, material, instruction=instruction)
    if second_model and _language(second) in (wanted, None):
        ctx.emit(STAGE, gettext_noop("The second answer is in the question's language: it is kept"), args={})
        return second, second_model
    if second_model and language_share(second, wanted) > language_share(body, wanted):
        body, model = second, second_model
    ctx.warn(
        STAGE,
        gettext_noop(
            "The second answer is not in the question's language either: kept the one with more of it"
        ),
        args={},
    )
    return body, model


def _language(body: str) -> str | None:
    """The language of the report the model wrote, its own sources list left out."""
    return report_language(SOURCES_HEADING.split(body)[0])


# Asked with the sources after an answer in the wrong language (`in_question_language`).
LANGUAGE_INSTRUCTION = (
    "Важно: предыдущий вариант отчёта был написан не на том языке. Напиши весь отчёт — заголовки, "
    "текст и выводы — на языке: {language}. Цитаты из источников переводи на этот язык или приводи "
    "в кавычках; ссылки [n] сохрани."
)


def _write(
    ctx: RunContext, material: Material, *, feedback: str = "", instruction: str = ""
) -> tuple[str, str]:
    """The report's body and the model that wrote it ("" for the extractive engine). With
    `feedback` (the citation check of an earlier answer) or an `instruction` (the language an
    earlier answer missed) only the LLM is asked, not streamed: no fallback."""
    again = bool(feedback or instruction)
    if ctx.llm_enabled:
        try:
            request = _request(ctx.asked, material) + image_context_block(ctx)
            if instruction:
                request += "\n\n" + instruction
            if feedback:
                request += "\n\n" + data_block(feedback)
            prompt = load_prompt("answer")
            body = async_to_sync(_ask_streamed)(ctx, prompt, request, material.private, streamed=not again)
        except LLMError as exc:
            ctx.fell_back(
                STAGE,
                gettext_noop("The LLM could not write the report (%(error)s); writing an extractive one."),
                exc,
            )
        else:
            if body.strip():
                return body.strip(), ctx.model
    if again:
        return "", ""
    return _extractive(ctx.topic, material), ""


async def _ask_streamed(
    ctx: RunContext, prompt: Prompt, request: str, private: bool, *, streamed: bool
) -> str:
    """The LLM's answer; when `streamed`, its text reaches the page and the console as it is written.
    (A second answer, asked with the citation check's verdicts, is not: the first stays shown.)"""
    if not streamed:
        return await ask(ctx, STAGE, prompt, request, kind=CacheEntry.Kind.ANSWERS, private=private)
    draft = Draft(ctx)
    body = await draft.ask(ctx, STAGE, prompt, request, private=private)
    if not body.strip():
        await draft.drop()
    return body


def _request(question: str, material: Material) -> str:
    blocks = [
        f"[{n}] {document.title or document.url}\n{document.url or PRIVATE_ORIGIN}\n\n{material.excerpts[n]}"
        for n, document in enumerate(material.documents, 1)
    ]
    pre = [n for n, d in enumerate(material.documents, 1) if d.fetched_via == Document.FetchedVia.DOMAIN]
    note = (
        "\nПредварительные данные (pre-context): источники "
        + ", ".join(f"[{n}]" for n in pre)
        + " – структурированные данные профильного сервиса с временем их получения. Для цифр и фактов "
        "бери их в первую очередь, ссылайся на них и назови время получения; веб-источники – дополнение.\n"
        if pre
        else ""
    )
    return (
        f"Исходный запрос: {question}\nЯзык ответа: {language_of(question)}\n{note}\nИсточники:\n"
        + data_block("\n\n---\n\n".join(blocks))
    )


def _extractive(topic: Topic, material: Material) -> str:
    sections: dict[str, list[tuple[int, str]]] = {}
    for n, document in enumerate(material.documents, 1):
        title = document.hit.subquery.text if document.hit else document.title
        sections.setdefault(title, []).append((n, material.excerpts[n]))
    listed = [(s["n"], s["title"], s["url"]) for s in material.sources]
    report = extractive.extractive_report(topic.question, list(sections.items()), listed)
    # The extractive report brings its own sources list; ours is appended instead.
    return SOURCES_HEADING.split(report)[0].rstrip()


def source_entry(n: int, document: Document, question: str) -> dict:
    score = document.summary.score.total if hasattr(document, "summary") else None
    return {
        "n": n,
        "title": document.title or document.url,
        "url": document.url,
        "document_id": document.pk,
        "fetched_via": document.fetched_via,
        "pages": document.pages,
        "score": score,
        "passages": passages.cited_passages(document, question, MAX_CHARS_PER_SOURCE),
    }


def clean_citations(body: str, count: int) -> str:
    """Drop the model's own sources list and any [n] that does not name one of ours."""
    body = SOURCES_HEADING.split(body)[0].rstrip()
    # An unknown citation goes with the space before it: "tuning [99]." becomes "tuning.".
    return CITATION.sub(lambda m: m.group(0) if 1 <= int(m.group(2)) <= count else "", body)


def sources_section(question: str, sources: list[dict]) -> str:
    russian = is_russian(question)
    heading = "## Источники" if russian else "## Sources"
    lines = [
        (f"{s['n']}. [{_escape(s['title'])}]({s['url']})" if s["url"] else f"{s['n']}. {_plain(s['title'])}")
        + _passage_note(s.get("passages") or [], russian)
        for s in sources
    ]
    return heading + "\n\n" + "\n".join(lines)


def _passage_note(cited: list[dict], russian: bool) -> str:
    """Which passage of a long page the report drew on: its section and opening words."""
    if not cited:
        return ""
    first = cited[0]
    opening, closing = ("«", "»") if russian else ("“", "”")
    section = f"§ {_plain(first['heading'])}: " if first["heading"] else ""
    more = f" (+{len(cited) - 1})" if len(cited) > 1 else ""
    return f" — {section}{opening}{_plain(first['quote'])}{closing}{more}"


def _escape(title: str) -> str:
    return title.replace("[", "(").replace("]", ")")


def _plain(title: str) -> str:
    """A title without a link (a private document's name) as literal Markdown text."""
    return MARKDOWN_SPECIAL.sub(r"\\\g<0>", title)
