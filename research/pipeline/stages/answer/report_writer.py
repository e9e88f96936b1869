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
from dataclasses import dataclass, replace

from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils.translation import gettext_noop

from mindsearch.clients.llm import Completion, LLMError
from research import progress
from research.event_text import choice_phrase, phrases
from research.models import CacheEntry, Citation, Document, Report, ReportDraft, Topic
from research.pipeline import cap, citecheck, extractive, outline, papers, passages, report_checks, window
from research.pipeline.context import RunContext, db
from research.pipeline.prompting import (
    Prompt,
    ask_completion,
    data_block,
    image_context_block,
    load_prompt,
)
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
# The report's answer budget (less when the model's window is small: `window.answer_room`); a
# report cut off at it is asked for again, shorter, with twice the budget where the window allows.
REPORT_TOKENS = 4_096
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


@dataclass(frozen=True)
class Answer:
    """A report's body as written, by `model` ("" for the extractive engine); `truncated`: the
    model's answer was cut off at its token limit."""

    body: str
    model: str
    truncated: bool = False


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
    answer = _write(ctx, material)
    if answer.model:
        answer = in_question_language(ctx, material, answer)
    answer = replace(answer, body=clean_citations(answer.body, len(material.sources)))
    verdicts = check_citations(ctx, answer.body, material.excerpts, private=material.private)
    if answer.model and (citecheck.mostly_unsupported(verdicts) or (material.sources and not verdicts)):
        answer, verdicts = _ask_again(ctx, material, answer, verdicts)
    _save(ctx, material, answer, verdicts)
    ctx.finish(STAGE, gettext_noop("Report written"))


def _save(ctx: RunContext, material: Material, answer: Answer, verdicts: list[citecheck.Verdict]) -> None:
    """The report with its citations' verdicts and what the checks of the whole report found."""
    from research.presenters import store_marked

    sources = material.sources
    markdown = f"{answer.body}\n\n{sources_section(ctx.question, sources)}\n"
    marks = report_checks.marks_of(
        answer.body,
        question=ctx.question,
        by_model=bool(answer.model),
        truncated=answer.truncated,
        sources=len(sources),
        verdicts=verdicts,
        capped=cap.reached(ctx.topic, besides=(STAGE, CHECK_STAGE)),  # reached before the report
    )
    without = report_checks.without_model(ctx.topic, answer.model, ctx.fallen_back) if ctx.model else []
    with transaction.atomic():
        report = Report.objects.create(
            topic=ctx.topic,
            markdown=markdown,
            sources=sources,
            model=answer.model,
            marks=marks,
            without_model=without,
        )
        Citation.objects.bulk_create(citation_rows(report, verdicts))
        store_marked(report)  # the page only reads it (issue 26)
        ReportDraft.objects.filter(topic=ctx.topic).delete()
    if marks:
        ctx.warn(
            STAGE,
            gettext_noop("The report is marked: %(marks)s"),
            args={"marks": phrases(*(choice_phrase(Report.Mark(mark)) for mark in marks))},
            data={"marks": marks},
        )


class StreamedText:
    """Hears a text as the LLM writes it: every piece goes to the listeners, and the text so far
    is saved (and so announced) at most every DRAFT_INTERVAL_SECONDS, the first words at once."""

    def __init__(self, listeners: list[Callable[[str], None]] | None = None) -> None:
        self.listeners = listeners or []
        self.text = self.saved = ""
        self.saved_at = float("-inf")
        self.thought = False

    async def __call__(self, text: str) -> None:
        self.text = text
        for listener in self.listeners:
            listener(text)
        if time.monotonic() - self.saved_at >= DRAFT_INTERVAL_SECONDS:
            await self.flush()

    async def thinking(self) -> None:
        """The model reasons and has written no answer yet: an empty draft says so, once."""
        if not self.text and not self.thought:
            self.thought = True
            await db(self.save)("")

    async def flush(self) -> None:
        if self.text != self.saved:
            self.saved, self.saved_at = self.text, time.monotonic()
            await db(self.save)(self.text)

    async def drop(self) -> None:
        self.text = self.saved = ""
        await db(self.discard)()

    async def ask(
        self, ctx: RunContext, stage: StageName, prompt: Prompt, request: str, *, private: bool
    ) -> str:
        """The LLM's answer text (`ask_completion`'s)."""
        return (await self.ask_completion(ctx, stage, prompt, request, private=private)).text

    async def ask_completion(
        self,
        ctx: RunContext,
        stage: StageName,
        prompt: Prompt,
        request: str,
        *,
        private: bool,
        max_tokens: int | None = None,
        empty_ok: bool = False,
    ) -> Completion:
        """The LLM's answer (an answer, cached as one), streamed into this text as it is written
        ("thinking…" while the model reasons first): dropped when the ask fails, saved whole
        when it is done. `empty_ok`: an empty answer is one (`prompting.ask_completion`'s)."""
        try:
            completion = await answer_completion(
                ctx,
                stage,
                prompt,
                request,
                private=private,
                max_tokens=max_tokens,
                empty_ok=empty_ok,
                heard=self,
            )
        except BaseException:
            await self.drop()
            raise
        await self.flush()
        return completion

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
    where one is configured and answers usably, the local ones elsewhere. A report that cites
    none of its sources is said to."""
    claims = citecheck.claims(body, max(excerpts, default=0))  # a section's numbers need not start at 1
    if not claims:
        if excerpts:
            ctx.warn(CHECK_STAGE, gettext_noop("The report cites none of its sources"), args={})
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
    ctx: RunContext, material: Material, answer: Answer, verdicts: list[citecheck.Verdict]
) -> tuple[Answer, list[citecheck.Verdict]]:
    """One more answer, with the verdicts (or, when the first cited nothing, the rule to cite);
    the better of the two by `citecheck.quality`."""
    tally = citecheck.counts(verdicts)
    russian = is_russian(ctx.question)
    if verdicts:
        ctx.warn(
            CHECK_STAGE,
            gettext_noop(
                "%(unsupported)s of %(total)s citations are not supported by their sources: "
                "asking the LLM once more, with the check's verdicts"
            ),
            args={"unsupported": tally["unsupported"], "total": tally["total"]},
        )
        notes = citecheck.feedback(verdicts, russian=russian)
    else:
        ctx.warn(
            CHECK_STAGE,
            gettext_noop("Asking the LLM once more, for a report that cites its sources"),
            args={},
        )
        notes = UNCITED_FEEDBACK_RU if russian else UNCITED_FEEDBACK_EN
    second = _write(ctx, material, feedback=notes)
    if not second.model:  # the LLM failed this time: the first answer stands
        return answer, verdicts
    second = replace(second, body=clean_citations(second.body, len(material.sources)))
    second_verdicts = check_citations(ctx, second.body, material.excerpts, private=material.private)
    wanted = question_language(ctx.question)
    keep_second = citecheck.quality(second_verdicts) > citecheck.quality(verdicts) and (
        _language(second.body) in (wanted, None) or _language(answer.body) not in (wanted, None)
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
        return second, second_verdicts
    return answer, verdicts


# Asked with the sources after an answer that cited none of them (`_ask_again`).
UNCITED_FEEDBACK_RU = (
    "Прошлый вариант отчёта не ссылался ни на один источник. Перепиши отчёт: после каждого утверждения "
    "укажи номер источника, из которого оно взято, в виде [n]; то, чего в источниках нет, не пиши."
)
UNCITED_FEEDBACK_EN = (
    "The previous answer cited none of the sources. Rewrite it: after every statement give the number "
    "of the source it comes from as [n]; leave out what the sources do not say."
)


def citation_rows(report: Report, verdicts: list[citecheck.Verdict]) -> list[Citation]:
    return [Citation(report=report, **v.row()) for v in verdicts]


def in_question_language(ctx: RunContext, material: Material, answer: Answer) -> Answer:
    """The LLM's report in the question's language: asked once more, with an explicit instruction,
    when it came back in the other one; when the second is no better, the one with more of the
    question's language is kept, and the event log says which."""
    wanted = question_language(ctx.question)
    found = _language(answer.body)
    if found in (wanted, None):
        return answer
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
    second = _write(ctx, material, instruction=instruction)
    if second.model and _language(second.body) in (wanted, None):
        ctx.emit(STAGE, gettext_noop("The second answer is in the question's language: it is kept"), args={})
        return second
    if second.model and language_share(second.body, wanted) > language_share(answer.body, wanted):
        answer = second
    ctx.warn(
        STAGE,
        gettext_noop(
            "The second answer is not in the question's language either: kept the one with more of it"
        ),
        args={},
    )
    return answer


def _language(body: str) -> str | None:
    """The language of the report the model wrote, its own sources list left out."""
    return report_language(SOURCES_HEADING.split(body)[0])


# Asked with the sources after an answer in the wrong language (`in_question_language`).
LANGUAGE_INSTRUCTION = (
    "Важно: предыдущий вариант отчёта был написан не на том языке. Напиши весь отчёт — заголовки, "
    "текст и выводы — на языке: {language}. Цитаты из источников переводи на этот язык или приводи "
    "в кавычках; ссылки [n] сохрани."
)
# Asked after an answer cut off at its token limit (`_ask_report`).
SHORTER_INSTRUCTION = (
    "Важно: предыдущий вариант отчёта оборвался на ограничении длины ответа. Напиши отчёт короче и "
    "закончи его: только главное, со ссылками [n]."
)


def _write(ctx: RunContext, material: Material, *, feedback: str = "", instruction: str = "") -> Answer:
    """The report's body and the model that wrote it ("" for the extractive engine). With
    `feedback` (the citation check of an earlier answer) or an `instruction` (the language an
    earlier answer missed) only the LLM is asked, not streamed: no fallback."""
    again = bool(feedback or instruction)
    if ctx.llm_enabled:
        extra = ""
        if instruction:
            extra += "\n\n" + instruction
        if feedback:
            extra += "\n\n" + data_block(feedback)
        try:
            answer = async_to_sync(_ask_report)(ctx, material, extra, streamed=not again)
        except LLMError as exc:
            if again:  # the answer before stands: nothing falls back
                ctx.warn(
                    STAGE,
                    gettext_noop(
                        "The LLM could not write the report again (%(error)s); the first answer stands."
                    ),
                    args={"error": str(exc)},
                )
            else:
                ctx.fell_back(
                    STAGE,
                    gettext_noop(
                        "The LLM could not write the report (%(error)s); writing an extractive one."
                    ),
                    exc,
                )
        else:
            if answer.body:
                return answer
    if again:
        return Answer("", "")
    return Answer(_extractive(ctx.topic, material), "")


async def _ask_report(ctx: RunContext, material: Material, extra: str, *, streamed: bool) -> Answer:
    """The LLM's report; when `streamed`, its text reaches the page and the console as it is
    written. (A second answer, asked with the citation check's verdicts, is not: the first stays
    shown.) A first answer cut off at its token limit is asked for once more, shorter, with at
    least as much room (the sources are cut shorter for it); when that is cut off too, it is kept,
    marked. A second answer (not `streamed`) is asked once: cut off, it is kept, marked."""
    prompt = load_prompt("answer")
    draft = Draft(ctx) if streamed else None
    # A second answer (for citations, for the language) keeps the room the first had, as a cut
    # first answer asked again does: the sources are cut shorter for it.
    tokens = max(REPORT_TOKENS, _length_tokens(ctx.topic))
    completion = await _ask_fitted(ctx, material, prompt, extra, draft, tokens, whole=not streamed)
    if completion.truncated and streamed:
        await db(ctx.warn)(
            STAGE,
            gettext_noop(
                "The model's report was cut off at its token limit (%(tokens)s tokens): "
                "asking for a shorter one"
            ),
            args={"tokens": completion.completion_tokens},
        )
        extra_shorter = extra + "\n\n" + SHORTER_INSTRUCTION
        second = await _ask_fitted(ctx, material, prompt, extra_shorter, draft, 2 * tokens, whole=True)
        if second.truncated:
            await db(ctx.warn)(
                STAGE,
                gettext_noop("The second report was cut off too: it is kept, marked as cut off"),
                args={},
            )
        completion = second
    body = completion.text.strip()
    if draft is not None and not body:
        await draft.drop()
    return Answer(body, ctx.model if body else "", completion.truncated)


async def _ask_fitted(
    ctx: RunContext,
    material: Material,
    prompt: Prompt,
    extra: str,
    draft: Draft | None,
    answer_tokens: int,
    *,
    whole: bool = False,
) -> Completion:
    """The report asked with the sources' texts fitted to the model's window (`window.ask_within`;
    `whole`: the answer keeps all of its room, the texts are cut shorter for it); the texts as
    sent are what the citation check reads from then on."""

    def build(texts: dict[int, str]) -> str:
        return (
            _request(ctx.asked, material, texts) + length_note(ctx.topic) + image_context_block(ctx) + extra
        )

    async def send(request: str, max_tokens: int | None) -> Completion:
        return await ask_answer(ctx, prompt, request, draft, private=material.private, max_tokens=max_tokens)

    completion, sent = await window.ask_within(
        ctx,
        STAGE,
        dict(material.excerpts),
        ctx.question,
        build,
        send,
        fixed=prompt.text,
        answer_tokens=answer_tokens,
        whole_answer=whole,
    )
    material.excerpts.update(sent)
    return completion


async def ask_answer(
    ctx: RunContext,
    prompt: Prompt,
    request: str,
    draft: StreamedText | None,
    *,
    private: bool,
    max_tokens: int | None,
    empty_ok: bool = False,
) -> Completion:
    """The LLM's answer to `request`, cached as an answer: streamed into `draft` when there is
    one (a text asked again with feedback is not shown while it is written). `empty_ok`: an
    empty answer is one (`prompting.ask_completion`'s)."""
    if draft is not None:
        return await draft.ask_completion(
            ctx, STAGE, prompt, request, private=private, max_tokens=max_tokens, empty_ok=empty_ok
        )
    return await answer_completion(
        ctx, STAGE, prompt, request, private=private, max_tokens=max_tokens, empty_ok=empty_ok
    )


async def answer_completion(
    ctx: RunContext,
    stage: StageName,
    prompt: Prompt,
    request: str,
    *,
    private: bool,
    max_tokens: int | None,
    empty_ok: bool,
    heard: StreamedText | None = None,
) -> Completion:
    """`prompting.ask_completion` of an answer (cached as one), `heard` as it is written."""
    return await ask_completion(
        ctx,
        stage,
        prompt,
        request,
        kind=CacheEntry.Kind.ANSWERS,
        private=private,
        max_tokens=max_tokens,
        on_text=heard,
        on_thinking=heard.thinking if heard is not None else None,
        empty_ok=empty_ok,
    )


def _length_tokens(topic: Topic) -> int:
    """The answer's room for the words a long report in one pass is asked for (0: no length set)."""
    length = outline.effective_length(topic.report_kind, topic.report_length)
    return outline.scale_of(length).words * 3 if length else 0


def length_note(topic: Topic) -> str:
    """The words asked of a report in one pass whose user set a length or chose a brief answer
    (research/pipeline/outline.py); "" otherwise, so other requests stay as they were."""
    length = outline.effective_length(topic.report_kind, topic.report_length)
    if not length:
        return ""
    return (
        f"\nОбъём отчёта: около {outline.scale_of(length).words} слов; не добавляй общих слов ради объёма.\n"
    )


def _request(question: str, material: Material, texts: dict[int, str]) -> str:
    blocks = [
        f"[{n}] {document.title or document.url}\n{document.url or PRIVATE_ORIGIN}\n\n{texts[n]}"
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
        **papers.source_fields(document.hit),  # a paper's doi, authors, year, venue
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
        + papers.citation_note(s)
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
