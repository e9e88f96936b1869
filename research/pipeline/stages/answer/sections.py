"""A report written section by section, along the outline of its plan (issue 30). No stage: it
writes under the answer stage's name, as `report_writer` does for a report in one pass.

For each section of `Topic.outline`, in order, as it comes to be written, the passages most about
that section — BM25 of the section's title (counted twice) and the question, over the passages of
all the documents chosen — are taken within the length's evidence budget (`outline.Scale`:
characters and sources per section, and at most twice the section's share of all the passages),
those no earlier section was given first (`Evidence`). A sentence an earlier section said (or the
section itself, from another page) is not said again (`unsaid`), and a source sentence that
backed a claim of an earlier section (its citation check's best window) is not given to a later
one (`unused`): a passage two sections share gives the second what the first left unsaid, and a
section with nothing left to say says so (`nothing_new`). So a long report is long because its
sections have more to say, not because they repeat each other. The whole report keeps one
numbering of sources: a document is numbered where a section first uses it, and the sources
list holds exactly the documents the sections were given.

Each section is asked of the LLM alone (prompts/section.txt: its title, the other sections' titles,
the words wanted, its sources), fitted to the model's window (`window.ask_within`), streamed to the
page after the sections before it, its citations cleaned to the numbers it was given and checked
against the passages it was given (`citecheck`); a section whose citations are mostly unsupported
is asked for once more with the verdicts, the better kept. When there is no LLM, when it fails for
a section, or when the topic's token cap is reached (`cap.CapReached` is an LLM error), that
section is written by the extractive engine from the same passages: the report keeps its outline.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from asgiref.sync import async_to_sync
from django.utils.translation import gettext_noop

from mindsearch.clients.llm import Completion, LLMError
from research import progress
from research.models import Document
from research.pipeline import citecheck, extractive, outline, passages, window
from research.pipeline.context import RunContext
from research.pipeline.passages import Passage
from research.pipeline.prompting import data_block, load_prompt
from research.pipeline.replies import is_russian, language_of
from research.pipeline.stage import StageName
from research.pipeline.stages.answer import diversity, report_writer
from research.pipeline.text import BM25, tokenize

STAGE = StageName.ANSWER
CHECK_STAGE = StageName.CITECHECK
# A section's answer: about this many tokens per word asked, within these bounds.
TOKENS_PER_WORD = 3
MIN_SECTION_TOKENS = 400
# A sentence of at least this many words already said in an earlier section is not said again.
REPEAT_MIN_WORDS = 5
# A section's passages: at most its share of all the passages, this many times over (a passage two
# sections are given gives the second what the first did not say).
SHARES_PER_PASSAGE = 2
PRIVATE_ORIGIN = report_writer.PRIVATE_ORIGIN
_SUBHEADING = re.compile(r"^\s{0,3}#{1,2}\s+")


@dataclass(frozen=True)
class Section:
    """A section as it is written: its title, its sources' passages by report number, and what
    was written (by `model`, "" for the extractive engine)."""

    title: str
    evidence: dict[int, list[Passage]]
    body: str = ""
    model: str = ""
    truncated: bool = False


def documents_for(ctx: RunContext) -> list[Document]:
    """The documents a sectioned report may draw on: the mode's choice, more of it for a long one."""
    scale = outline.scale_of(outline.effective_length(ctx.topic.report_kind, ctx.topic.report_length))
    return diversity.final_documents(ctx, share=scale.pool)


def write_report(ctx: RunContext, documents: list[Document]) -> None:
    """The report along `ctx.topic.outline`, from `documents` (the answer stage's choice)."""
    topic = ctx.topic
    titles = list(topic.outline)
    length = outline.effective_length(topic.report_kind, topic.report_length)
    scale = outline.scale_of(length)
    ctx.begin(
        STAGE,
        gettext_noop("Writing the report in %(sections)s sections from %(count)s sources"),
        sections=len(titles),
        count=len(documents),
    )
    # Each section's passages are chosen as it comes to be written, knowing what was said before.
    chooser = Evidence(ctx.question, documents, titles, scale)
    number: dict[int, int] = {}  # document index -> its number in the report
    used: list[Document] = []  # the documents numbered, in order
    sections: list[Section] = []
    private = any(d.fetched_via == Document.FetchedVia.PRIVATE for d in documents)
    words = outline.words_per_section(length, len(titles))
    head = f"# {' '.join(ctx.question.split())}"
    parts = [head]
    verdicts: list[citecheck.Verdict] = []
    said: set[str] = set()  # the sentences the sections before have said
    backed: set[str] = set()  # the source sentences that backed their claims
    for title in titles:
        ctx.check_cancelled()
        found = chooser.section(title, said | backed)
        for i in found:
            if i not in number:
                number[i] = len(used) + 1
                used.append(documents[i])
        section = Section(title, {number[i]: passages_ for i, passages_ in found.items()})
        before = "\n\n".join(parts) + f"\n\n## {section.title}\n\n"
        written, checked = _section(
            ctx, section, titles, used, number, words, before, scale, private=private, said=said | backed
        )
        said |= sentence_keys(written.body)
        backed |= backing_keys(checked)
        offset = len(citecheck.sentence_spans(before))
        verdicts += [replace(v, index=v.index + offset) for v in checked]
        parts.append(f"## {section.title}\n\n{written.body}")
        sections.append(written)
    body = "\n\n".join(parts)
    sources = [_source_entry(n, document, ctx.question, sections) for n, document in enumerate(used, 1)]
    model = next((s.model for s in sections if s.model), "")
    material = report_writer.Material(used, sources, {})
    answer = report_writer.Answer(body, model, any(s.truncated for s in sections))
    report_writer._save(ctx, material, answer, verdicts)
    ctx.finish(STAGE, gettext_noop("Report written"))


def evidence(
    question: str, documents: list[Document], titles: list[str], scale: outline.Scale
) -> list[dict[int, list[Passage]]]:
    """Every section's passages (`Evidence`) chosen at once, nothing said yet."""
    chooser = Evidence(question, documents, titles, scale)
    return [chooser.section(title) for title in titles]


class Evidence:
    """Per section, the passages most about it by document index, in page order: BM25 over the
    passages of all documents at once, within the scale's characters and sources per section and
    within twice the section's share of all the passages.

    A passage an earlier section was given comes after every fresh one that matches, and one
    whose every sentence was said (`said`: the report's sentences and the source sentences that
    backed them) is not given at all, so that sections do not repeat each other: a long section
    is long because it has more to say, not because it is given what was said already. A
    section nothing matches gets the opening passages of the first documents."""

    def __init__(
        self, question: str, documents: list[Document], titles: list[str], scale: outline.Scale
    ) -> None:
        self.question = question
        self.scale = scale
        self.pieces = [
            (i, p)
            for i, document in enumerate(documents)
            for p in passages.split_passages(document.text or "")
        ]
        self.ranking = BM25([tokenize(f"{p.heading} {p.text}") for _, p in self.pieces])
        # A long length's budget can exceed everything read: the first section would be given it
        # all and the others only what it had said. No section gets more than its share, twice over.
        total = sum(p.end - p.start for _, p in self.pieces)
        self.budget = min(scale.evidence_chars, -(-SHARES_PER_PASSAGE * total // max(1, len(titles))))
        self.given: set[int] = set()  # passages an earlier section was given

    def section(self, title: str, said: AbstractSet[str] = frozenset()) -> dict[int, list[Passage]]:
        pieces, scale = self.pieces, self.scale
        scores = self.ranking.scores(tokenize(f"{title} {title} {self.question}")) if pieces else []
        # A passage an earlier section had comes after the fresh ones: each section says its own.
        order = sorted(range(len(pieces)), key=lambda j: (j in self.given, -scores[j], j))
        chosen: dict[int, list[Passage]] = {}
        spent = 0
        for j in order:
            if scores[j] <= 0:
                continue
            i, passage = pieces[j]
            if i not in chosen and len(chosen) >= scale.sources:
                continue
            left = _left(passage, said)
            if left is None:
                continue  # all it says was said
            if chosen and spent + left > self.budget:
                continue
            chosen.setdefault(i, []).append(passage)
            spent += left
            self.given.add(j)
        if not chosen:
            for i, passage in pieces:
                if i not in chosen and len(chosen) < scale.sources:
                    chosen[i] = [passage]
        return {i: sorted(found, key=lambda p: p.start) for i, found in sorted(chosen.items())}


def _left(passage: Passage, said: AbstractSet[str]) -> int | None:
    """The characters of a passage not yet said; None when it has no sentence left to say."""
    if not said:
        return passage.end - passage.start
    text = _without(passage.text, said)
    if text is None:
        return passage.end - passage.start
    return len(text) if any(counted(sentence_key(x)) for x in sentences_of(text)) else None


def _section(
    ctx: RunContext,
    section: Section,
    titles: list[str],
    used: list[Document],
    number: dict[int, int],
    words: int,
    before: str,
    scale: outline.Scale,
    *,
    private: bool,
    said: AbstractSet[str] = frozenset(),
) -> tuple[Section, list[citecheck.Verdict]]:
    """One section written, cleaned and checked: the LLM's, asked again once when its citations
    are mostly unsupported, or the extractive engine's; from its passages without the sentences
    earlier sections said or drew on, and without the sentences they said (`said`). A section
    with nothing left to say says so (`nothing_new`)."""
    given = unused(section.evidence, said)
    if not given:  # all its passages hold was said above: it says so rather than repeat it
        return replace(section, body=nothing_new(ctx.question)), []
    excerpts = {n: passages.excerpt(found) for n, found in given.items()}
    documents = {n: used[n - 1] for n in excerpts}
    written = _ask(ctx, section, titles, documents, excerpts, words, before, private=private)
    if written is None:
        body = unsaid(_extractive(ctx.question, section.title, excerpts, scale), said)
        body = body or nothing_new(ctx.question)
        return replace(section, body=body), report_writer.check_citations(
            ctx, body, excerpts, private=private
        )
    body, truncated = written
    body = unsaid(clean(body, set(excerpts)), said)
    if not body:
        return replace(section, body=nothing_new(ctx.question), model=ctx.model, truncated=truncated), []
    verdicts = report_writer.check_citations(ctx, body, excerpts, private=private)
    if citecheck.mostly_unsupported(verdicts) or (excerpts and not verdicts):
        notes = (
            citecheck.feedback(verdicts, russian=is_russian(ctx.question))
            if verdicts
            else (
                report_writer.UNCITED_FEEDBACK_RU
                if is_russian(ctx.question)
                else report_writer.UNCITED_FEEDBACK_EN
            )
        )
        again = _ask(ctx, section, titles, documents, excerpts, words, "", private=private, feedback=notes)
        second = unsaid(clean(again[0], set(excerpts)), said) if again is not None else ""
        if again is not None and second:
            second_verdicts = report_writer.check_citations(ctx, second, excerpts, private=private)
            if citecheck.quality(second_verdicts) > citecheck.quality(verdicts):
                body, truncated, verdicts = second, again[1], second_verdicts
    return replace(section, body=body, model=ctx.model, truncated=truncated), verdicts


def _ask(
    ctx: RunContext,
    section: Section,
    titles: list[str],
    documents: dict[int, Document],
    excerpts: dict[int, str],
    words: int,
    before: str,
    *,
    private: bool,
    feedback: str = "",
) -> tuple[str, bool] | None:
    """The LLM's text of one section (streamed after `before` unless asked again with `feedback`)
    and whether it was cut off, "" when it found nothing to say; None when there is no LLM or it
    failed (the event log says so)."""
    if not ctx.llm_enabled or not excerpts:
        return None
    try:
        completion = async_to_sync(_ask_fitted)(
            ctx, section, titles, documents, excerpts, words, before, private=private, feedback=feedback
        )
    except LLMError as exc:
        ctx.fell_back(
            STAGE,
            gettext_noop(
                "The LLM could not write a section (%(error)s); writing it from the sources' sentences."
            ),
            exc,
        )
        return None
    text = completion.text.strip()
    if not text and completion.truncated:
        return None  # cut off before it wrote anything (a reasoning model's budget): a failure
    # An empty answer is the model finding nothing in these passages worth saying (a real model
    # does so for a section whose sources the sections above said): the section says so
    # (`nothing_new`) rather than have the extractive engine quote what the model passed over —
    # a digest's other abstracts, a page's date line. It is asked for once (`empty_ok`), not
    # paid for again and again as if the endpoint had failed.
    return text, completion.truncated


async def _ask_fitted(
    ctx: RunContext,
    section: Section,
    titles: list[str],
    documents: dict[int, Document],
    excerpts: dict[int, str],
    words: int,
    before: str,
    *,
    private: bool,
    feedback: str,
) -> Completion:
    prompt = load_prompt("section")
    draft = None if feedback else SectionDraft(ctx, before)

    def build(texts: dict[int, str]) -> str:
        request = section_request(ctx.asked, section.title, titles, words, documents, texts)
        return request + ("\n\n" + data_block(feedback) if feedback else "")

    async def send(request: str, max_tokens: int | None) -> Completion:
        # A section may rightly have nothing to say: its empty answer is asked for once.
        return await report_writer.ask_answer(
            ctx, prompt, request, draft, private=private, max_tokens=max_tokens, empty_ok=True
        )

    completion, sent = await window.ask_within(
        ctx,
        STAGE,
        dict(excerpts),
        f"{section.title} {ctx.question}",
        build,
        send,
        fixed=prompt.text,
        answer_tokens=min(report_writer.REPORT_TOKENS, max(MIN_SECTION_TOKENS, words * TOKENS_PER_WORD)),
    )
    excerpts.update(sent)  # the citation check reads what was sent
    return completion


def section_request(
    question: str,
    title: str,
    titles: list[str],
    words: int,
    documents: dict[int, Document],
    texts: dict[int, str],
) -> str:
    blocks = [
        f"[{n}] {document.title or document.url}\n{document.url or PRIVATE_ORIGIN}\n\n{texts[n]}"
        for n, document in documents.items()
    ]
    listed = "\n".join(f"{k}. {t}" for k, t in enumerate(titles, 1))
    return (
        f"Исходный запрос: {question}\nЯзык ответа: {language_of(question)}\n"
        f"Раздел: {title}\nОбъём раздела: около {words} слов\nВсе разделы отчёта:\n{listed}\n\nИсточники:\n"
        + data_block("\n\n---\n\n".join(blocks))
    )


def clean(body: str, numbers: set[int]) -> str:
    """The section's text without a heading of its own or a sources list, and without citations of
    sources it was not given."""
    body = report_writer.SOURCES_HEADING.split(body)[0].strip()
    lines = body.splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("#")):
        lines.pop(0)  # its own title (the report puts the section's heading)
    # Headings of its own are the section's subheadings: the report's sections are the outline's.
    body = "\n".join(_SUBHEADING.sub("### ", line) for line in lines).strip()
    return report_writer.CITATION.sub(lambda m: m.group(0) if int(m.group(2)) in numbers else "", body)


_LIST_MARK = re.compile(r"\s*(?:[-*+]\s+|\d+[.)]\s+|>\s*)")


def sentence_key(sentence: str) -> str:
    """A sentence as compared for repeats: its words, without citations, case or punctuation."""
    return " ".join(re.findall(r"\w+", report_writer.CITATION.sub(" ", sentence).lower()))


def sentences_of(text: str) -> list[str]:
    """A text's sentences as the citation check reads them: a stop inside a number ("0.4") or an
    abbreviation followed by a small letter ends none."""
    return [text[start:end] for start, end in citecheck.sentence_spans(text)]


def counted(key: str) -> bool:
    """Whether a sentence is long enough for its repeat to count."""
    return len(key.split()) >= REPEAT_MIN_WORDS


def sentence_keys(body: str) -> set[str]:
    """The keys of a section's sentences long enough to count as said."""
    return {key for key in map(sentence_key, sentences_of(body)) if counted(key)}


def backing_keys(verdicts: list[citecheck.Verdict]) -> set[str]:
    """The source sentences that backed a section's claims: of each claim's best window (one
    sentence or two neighbours) not found unsupported, the sentence that holds most of its words."""
    keys = set()
    for verdict in verdicts:
        if verdict.verdict == citecheck.UNSUPPORTED or not verdict.passage:
            continue
        claim = tokenize(verdict.sentence)
        best = max(
            sentences_of(verdict.passage),
            key=lambda sentence: citecheck.coverage(claim, frozenset(tokenize(sentence))),
            default="",
        )
        if counted(sentence_key(best)):
            keys.add(sentence_key(best))
    return keys


def unused(evidence: dict[int, list[Passage]], said: AbstractSet[str]) -> dict[int, list[Passage]]:
    """A section's passages without the sentences in `said`; a passage with nothing left goes,
    and a source with no passage left. Their places on the page stay (the sources list quotes
    them)."""
    if not said:
        return evidence
    left: dict[int, list[Passage]] = {}
    for n, found in evidence.items():
        kept = []
        for passage in found:
            text = _without(passage.text, said)
            if text is None:
                kept.append(passage)
            elif any(counted(sentence_key(sentence)) for sentence in sentences_of(text)):
                kept.append(replace(passage, text=text))
        if kept:
            left[n] = kept
    return left


def _without(text: str, said: AbstractSet[str]) -> str | None:
    """`text` without the sentences in `said` (a paragraph left empty goes); None if it has none.
    No mark is left where they were: a model would copy it into its sentences."""
    spans = [(s, e) for s, e in citecheck.sentence_spans(text) if sentence_key(text[s:e]) in said]
    if not spans:
        return None
    parts, last = [], 0
    for start, end in spans:
        parts.append(text[last:start])
        last = end
    parts.append(text[last:])
    lines = [" ".join(line.split()) for line in "".join(parts).splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def unsaid(body: str, said: AbstractSet[str]) -> str:
    """The section without the sentences already said — earlier in the report, or earlier in
    itself (the same sentence from two pages) — so that a long report is not long by repeating
    itself; a line all of whose sentences were said goes."""
    seen = set(said)
    lines = []
    for line in body.splitlines():
        if line.lstrip().startswith("#"):
            lines.append(line)
            continue
        kept, dropped = [], False
        for sentence in sentences_of(line):
            key = sentence_key(sentence)
            if counted(key) and key in seen:
                dropped = True
                continue
            seen.add(key)
            kept.append(sentence.strip())
        if not dropped:
            lines.append(line)
        elif kept:
            mark = _LIST_MARK.match(line)
            prefix = mark.group(0) if mark else ""
            text = " ".join(kept)
            lines.append(text if prefix.strip() and text.startswith(prefix.strip()) else prefix + text)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def nothing_new(question: str) -> str:
    """A section whose sources hold nothing the sections above did not say: it says so, in the
    question's language, rather than say it again."""
    if is_russian(question):
        return "Источники не добавляют к этому разделу ничего сверх сказанного выше."
    return "The sources add nothing to this section beyond what is said above."


def _extractive(question: str, title: str, excerpts: dict[int, str], scale: outline.Scale) -> str:
    return extractive.section_text(
        question, title, list(excerpts.items()), set(excerpts), sentences=scale.sentences
    )


def _source_entry(n: int, document: Document, question: str, sections: list[Section]) -> dict:
    """The sources list's entry: the passages the sections were given of a long page."""
    entry = report_writer.source_entry(n, document, question)
    if len(document.text or "") <= passages.LONG_PAGE_CHARS:
        entry["passages"] = []
        return entry
    seen: dict[tuple[int, int], Passage] = {}
    for section in sections:
        for p in section.evidence.get(n, []):
            seen.setdefault((p.start, p.end), p)
    entry["passages"] = [
        {"start": p.start, "end": p.end, "heading": p.heading, "quote": passages.quote(p)}
        for p in seen.values()
    ]
    return entry


class SectionDraft(report_writer.Draft):
    """A section's text as it is written, shown after the sections written before it."""

    def __init__(self, ctx: RunContext, before: str) -> None:
        super().__init__(ctx)
        self.before = before
        self.listeners = [_after(before, hear) for hear in self.listeners]

    def save(self, text: str) -> None:
        progress.save_draft(self.topic_id, self.before + text)


def _after(before: str, hear: Callable[[str], None]) -> Callable[[str], None]:
    """A listener that hears a section's text after the sections written before it."""

    def heard(text: str) -> None:
        hear(before + text)

    return heard
