"""Deep mode: rounds of search that go on while they still find something new.

After each round the information growth rate is measured: relevant documents new in the round
over relevant documents known before it ("relevant": summary score of `RESEARCH_MIN_SCORE` or
more). Under `RESEARCH_DEEP_GROWTH_THRESHOLD`, or at `RESEARCH_DEEP_MAX_ROUNDS`, the search
stops. Otherwise the next round's sub-queries are drawn from what was learned:

1. for each sub-query of the round, the LLM reads the summaries found for it and proposes new
   sub-queries, each scored 0–10 for how much the original question needs it (without an LLM,
   the names and terms the summaries add are proposed, scored by how closely their sentences
   keep to the question);
2. all proposals go into one pool and the best are chosen globally (not a fixed number per
   sub-query), skipping what was already asked;
3. each is merged with the question's subject, so a bare name still searches the topic.

The round's sub-queries then go through the same stages as the first round's; every stage
skips what is done, so a run that dies in round 3 resumes in round 3.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Q
from django.utils.translation import gettext_noop

from mindsearch.clients.llm import LLMError
from research.event_text import phrase
from research.models import CacheEntry, Document, Round, SubQuery, Topic
from research.pipeline import cap, passages
from research.pipeline.context import RunContext, db
from research.pipeline.prompting import LINE_TOKENS, ask, data_block, image_labels_block, load_prompt
from research.pipeline.question_domain import merge_with_question
from research.pipeline.replies import parse_prefixed_lines
from research.pipeline.stage import Outcome, StageName
from research.pipeline.text import tokenize

STAGE = StageName.DEEP
PROPOSALS_PER_SUBQUERY = 5
SUMMARIES_PER_SUBQUERY = 5
# A proposal whose words are mostly those of an asked sub-query asks nothing new.
DUPLICATE_SHARE = 0.8
# Without an LLM, a run of new words is a weaker lead than a name.
WORDS_WEIGHT = 0.6
_SCORE = re.compile(
    r"\s*[|;]?\s*(?:оценка|score|relevance|релевантность)\s*[:：=]\s*(\d+(?:[.,]\d+)?)\s*(?:/\s*10)?\s*$",
    re.I,
)
_NAME = re.compile(r"[A-ZА-ЯЁ][\w\-]*(?:\s+(?:of\s+|de\s+|и\s+)?[A-ZА-ЯЁ0-9][\w\-]*)*")


@dataclass(frozen=True)
class Proposal:
    text: str
    score: float  # 0–10: how much the original question needs it


def run(ctx: RunContext) -> Outcome:
    """Measure the round just finished; ANOTHER_ROUND when the next one was planned."""
    topic = ctx.topic
    if topic.mode != Topic.Mode.DEEP:
        return Outcome.CONTINUE
    number = current_round(topic)
    measured = Round.objects.filter(topic=topic, number=number).first() or _measure(ctx, number)
    if measured.stop_reason:
        return Outcome.CONTINUE
    reason = stop_reason(measured.growth_rate, number)
    if not reason and cap.reached(topic):
        reason = Round.Stop.CAP
    if reason:
        _stop(ctx, measured, reason)
        return Outcome.CONTINUE
    texts = next_subqueries(ctx, number)
    if not texts:
        _stop(ctx, measured, Round.Stop.NO_QUERIES)
        return Outcome.CONTINUE
    _start_round(ctx, number + 1, texts)
    return Outcome.ANOTHER_ROUND


def current_round(topic: Topic) -> int:
    return topic.subqueries.aggregate(last=Max("round"))["last"] or 1


def growth_rate(new: int, known: int) -> float:
    """The growth rate: new / max(known, 1), so a first round's growth is its count of finds."""
    return new / max(known, 1)


def stop_reason(growth: float, number: int) -> str:
    if growth < settings.RESEARCH_DEEP_GROWTH_THRESHOLD:
        return Round.Stop.GROWTH
    if number >= settings.RESEARCH_DEEP_MAX_ROUNDS:
        return Round.Stop.MAX_ROUNDS
    return ""


def _measure(ctx: RunContext, number: int) -> Round:
    topic = ctx.topic
    documents = Document.objects.filter(topic=topic)
    relevant = documents.filter(summary__score__total__gte=settings.RESEARCH_MIN_SCORE)
    new = relevant.filter(round=number).count()
    known = relevant.filter(round__lt=number).count()
    measured, _ = Round.objects.get_or_create(
        topic=topic,
        number=number,
        defaults={
            "subqueries": topic.subqueries.filter(round=number).count(),
            "documents": documents.filter(round=number).count(),
            "new_documents": new,
            "known_documents": known,
            "growth_rate": growth_rate(new, known),
        },
    )
    ctx.emit(
        STAGE,
        gettext_noop(
            "Round %(round)s: %(new)s relevant new documents, %(known)s known before; growth %(growth)s"
        ),
        args={"round": number, "new": new, "known": known, "growth": f"{measured.growth_rate:.2f}"},
        data={"round": number, "new": new, "known": known, "growth": round(measured.growth_rate, 3)},
    )
    return measured


def _stop(ctx: RunContext, measured: Round, reason: str) -> None:
    measured.stop_reason = reason
    measured.save(update_fields=["stop_reason"])
    why = {
        Round.Stop.GROWTH: phrase(
            gettext_noop("growth %(growth)s is under %(threshold)s"),
            growth=f"{measured.growth_rate:.2f}",
            threshold=f"{settings.RESEARCH_DEEP_GROWTH_THRESHOLD:g}",
        ),
        Round.Stop.MAX_ROUNDS: phrase(
            gettext_noop("round %(round)s is the last allowed"), round=measured.number
        ),
        Round.Stop.NO_QUERIES: phrase(gettext_noop("no new sub-query was left to ask")),
        Round.Stop.CAP: phrase(gettext_noop("the topic reached its token cap")),
    }[Round.Stop(reason)]
    ctx.emit(
        STAGE,
        gettext_noop("Stopped searching after round %(round)s: %(why)s"),
        args={"round": measured.number, "why": why},
        data={"stop": reason},
    )


def _start_round(ctx: RunContext, number: int, texts: list[str]) -> None:
    with transaction.atomic():
        SubQuery.objects.bulk_create(
            SubQuery(topic=ctx.topic, position=i, text=text, origin=SubQuery.Origin.DEEP, round=number)
            for i, text in enumerate(texts)
        )
    ctx.emit(
        STAGE,
        gettext_noop("Round %(round)s: %(count)s new sub-queries from what was found"),
        args={"round": number, "count": len(texts)},
        data={"round": number, "subqueries": texts},
    )


# --- the next round's sub-queries ------------------------------------------------------------------


def next_subqueries(ctx: RunContext, number: int) -> list[str]:
    asked = list(ctx.topic.subqueries.values_list("text", flat=True))
    learned = _learned(ctx.topic, number)
    proposals: list[Proposal] = []
    if ctx.llm_enabled:
        proposals = async_to_sync(_propose_all)(ctx, learned, asked)
    if not proposals:
        proposals = keyword_proposals(ctx.question, learned, asked)
    chosen = choose(proposals, asked, settings.RESEARCH_DEEP_SUBQUERIES)
    return [merge_with_question(proposal.text, ctx.question) for proposal in chosen]


@dataclass(frozen=True)
class Finding:
    title: str
    summary: str
    score: float  # the summary's total, 0–10
    passages: str  # what the summary was written from


@dataclass
class Direction:
    """One sub-query of a round and what it found, best first."""

    text: str
    findings: list[Finding]
    private: bool = False


def _learned(topic: Topic, number: int) -> list[Direction]:
    # A page an earlier round's sub-query found but only this round read (read.py reads the best
    # pages of the whole topic) is new in this round, yet that direction was followed already.
    documents = (
        Document.objects.filter(topic=topic, round=number, summary__score__isnull=False)
        .filter(Q(hit__isnull=True) | Q(hit__subquery__round=number))
        .select_related("hit__subquery", "summary__score")
        .order_by("-summary__score__total", "url", "title")
    )
    if topic.sources != Topic.Sources.DOCS:
        # The next round's sub-queries go to the search engine, which private text never does.
        documents = documents.exclude(fetched_via=Document.FetchedVia.PRIVATE)
    directions: dict[str, Direction] = {}
    for document in documents:
        text = document.hit.subquery.text if document.hit else document.title
        direction = directions.setdefault(text, Direction(text, []))
        if len(direction.findings) < SUMMARIES_PER_SUBQUERY:
            excerpt = passages.document_excerpt(document, topic.question, passages.SUMMARY_BUDGET)
            summary = document.summary
            direction.findings.append(
                Finding(document.title or document.url, summary.text, summary.score.total, excerpt)
            )
            direction.private |= document.fetched_via == Document.FetchedVia.PRIVATE
    return list(directions.values())


async def _propose_all(ctx: RunContext, learned: list[Direction], asked: list[str]) -> list[Proposal]:
    found = await asyncio.gather(*(_propose(ctx, direction, asked) for direction in learned))
    return [proposal for proposals in found for proposal in proposals]


async def _propose(ctx: RunContext, direction: Direction, asked: list[str]) -> list[Proposal]:
    listing = "\n\n".join(f"[{n}] {f.title}\n{f.summary}" for n, f in enumerate(direction.findings, 1))
    request = (
        f"Исходный запрос: {ctx.asked}\nНаправление поиска: {direction.text}\n"
        "Уже заданные подзапросы:\n" + "\n".join(f"- {text}" for text in asked) + "\n\n"
        f"Найдено по этому направлению:\n{data_block(listing)}" + image_labels_block(ctx)
    )
    try:
        answer = await ask(
            ctx,
            STAGE,
            load_prompt("expand"),
            request,
            kind=CacheEntry.Kind.SEARCH_QUERIES,
            private=direction.private,
            max_tokens=LINE_TOKENS * (PROPOSALS_PER_SUBQUERY + 1),
        )
    except LLMError as exc:
        await db(ctx.warn)(STAGE, f"The LLM could not propose sub-queries ({exc}); using keywords.")
        return []
    return parse_proposals(answer)[:PROPOSALS_PER_SUBQUERY]


def parse_proposals(answer: str) -> list[Proposal]:
    """ПОДЗАПРОС: lines with their ОЦЕНКА ("… | ОЦЕНКА: 8"); a proposal without one scores 5."""
    proposals = []
    for line in parse_prefixed_lines(answer, "ПОДЗАПРОС:"):
        found = _SCORE.search(line)
        text = line[: found.start()] if found else line
        text = text.strip(" |;—-\"'«»")
        score = min(10.0, float(found.group(1).replace(",", "."))) if found else 5.0
        if tokenize(text):
            proposals.append(Proposal(text, score))
    return proposals


def keyword_proposals(question: str, learned: list[Direction], asked: list[str]) -> list[Proposal]:
    """Without an LLM: names and terms the pages add, scored by how closely their sentence
    keeps to the question and how good the page's summary was; a name counts more than a
    run of words. The passages are read, not the summaries: an extractive summary keeps the
    sentences that repeat the question and drops the ones that lead elsewhere."""
    known = set(tokenize(" ".join([question, *asked])))
    wanted = set(tokenize(question))
    best: dict[str, Proposal] = {}
    for direction in learned:
        focus = wanted | set(tokenize(direction.text))
        for finding in direction.findings:
            for sentence in _sentences(finding.passages):
                phrase, is_name = novel_phrase(sentence, known)
                if not phrase:
                    continue
                # The page's score says how much it is about the question; how closely the
                # sentence itself keeps to the question only breaks ties within the page.
                tokens = set(tokenize(sentence))
                closeness = min(1.0, len(tokens & focus) / max(len(wanted), 1))
                weight = (1.0 if is_name else WORDS_WEIGHT) * (0.5 + 0.5 * closeness)
                proposal = Proposal(phrase, round(finding.score * weight, 1))
                key = phrase.casefold()
                if key not in best or best[key].score < proposal.score:
                    best[key] = proposal
    return sorted(best.values(), key=lambda proposal: -proposal.score)


def _sentences(markdown: str) -> list[str]:
    """The sentences of the text, headings left out (a heading's capitals are no names)."""
    text = markdown.replace(passages.SEPARATOR.strip(), "\n")
    lines = [line for line in text.splitlines() if not re.match(r"\s*(?:#|§)", line)]
    return [s for s in re.split(r"(?<=[.!?…])\s+", passages.plain("\n".join(lines))) if s]


def novel_phrase(sentence: str, known: set[str]) -> tuple[str, bool]:
    """(phrase, is it a name): the first capitalised run of words the question and sub-queries
    do not name (a lone capital at the start of the sentence is no name), or else the longest
    run of new content words (two to four)."""
    for match in _NAME.finditer(sentence):
        words = [word for word in match.group(0).split() if tokenize(word)]
        if match.start() == 0 and len(words) == 1:
            continue
        novel = [word for word in words if not set(tokenize(word)) <= known]
        if novel:
            return " ".join(match.group(0).split()), True
    runs, current = [], []
    for word in re.findall(r"[^\W_][\w\-]*", sentence):
        tokens = tokenize(word)
        if tokens and not set(tokens) <= known:
            current.append(word)
        else:
            runs.append(current)
            current = []
    runs.append(current)
    longest = max(runs, key=len)
    return (" ".join(longest[:4]), False) if len(longest) >= 2 else ("", False)


def choose(proposals: list[Proposal], asked: list[str], limit: int) -> list[Proposal]:
    """The best proposals of the whole pool, none repeating what is asked or already chosen."""
    taken = [set(tokenize(text)) for text in asked]
    chosen: list[Proposal] = []
    for proposal in sorted(proposals, key=lambda p: -p.score):
        if len(chosen) >= limit:
            break
        tokens = set(tokenize(proposal.text))
        if tokens and not any(len(tokens & other) >= DUPLICATE_SHARE * len(tokens) for other in taken):
            chosen.append(proposal)
            taken.append(tokens)
    return chosen


# --- for the topic page ----------------------------------------------------------------------------


def rounds_of(topic: Topic) -> list[dict]:
    """Each round of a deep topic: its sub-queries, documents, growth and why it stopped; the
    round under way has no growth yet."""
    if topic.mode != Topic.Mode.DEEP:
        return []
    measured = {row.number: row for row in topic.rounds.all()}
    # A follow-up's search (research/pipeline/followup.py) is not a round of the run.
    rounds = topic.subqueries.exclude(origin=SubQuery.Origin.FOLLOWUP)
    asked = dict(rounds.values_list("round").annotate(n=Count("id")))
    read = dict(Document.objects.filter(topic=topic).values_list("round").annotate(n=Count("id")))
    rows = []
    for number in sorted(set(asked) | set(measured)):
        row = measured.get(number)
        rows.append(
            {
                "number": number,
                "subqueries": asked.get(number, 0),
                "documents": read.get(number, 0),
                "new": row.new_documents if row else None,
                "known": row.known_documents if row else None,
                "growth": row.growth_rate if row else None,
                "stop": row.get_stop_reason_display() if row and row.stop_reason else "",
                "stop_reason": row.stop_reason if row else "",
            }
        )
    return rows
