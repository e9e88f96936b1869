"""A prompt that carries source texts, fitted to the model's context window. No stage.

The report, a summary and a follow-up's answer send the sources' texts; a local model often runs
with a 4k–32k window, and a prompt beyond it is refused (a context-length 400) or, on Ollama,
silently cut. So before such a prompt is sent, the window (`llm.context_window`: a setting, what
the server reports, or what an earlier 400 said) is shared out: the prompt's fixed part first,
then room for the answer (its `max_tokens`), and what is left for the sources. Sources that do
not fit lose their least relevant passages first (BM25 against the question, over the passages
of all sources at once), each keeping at least its best one; if that is still too much, every
text is cut to its share. Tokens are counted with `llm.estimate_tokens` (conservative).

When the window is not known, the prompt goes as it is; a context-length 400
(`LLMContextOverflow`) then says the window (or, if it does not, the prompt is taken to be a
quarter too long), the texts are trimmed to it and the model is asked once more. Every trim is
a line in the event log: how many passages of how many sources were left out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from django.utils.translation import gettext_noop

from mindsearch.clients import llm as llm_client
from research.pipeline.context import RunContext, db
from research.pipeline.passages import SEPARATOR, split_passages
from research.pipeline.stage import StageName
from research.pipeline.text import BM25, tokenize

# The answer gets at most this share of the window (the rest is the prompt).
ANSWER_SHARE = 1 / 3
# Kept free of the estimate's errors and the chat template's own tokens.
MARGIN_SHARE = 0.05
MARGIN_TOKENS = 32
# A source keeps at least this much when every text has to be cut.
MIN_SOURCE_TOKENS = 24
# Without a window in the refusal, the prompt is taken to be this share of what fits.
OVERFLOW_SHARE = 3 / 4
TRIM_PASSAGE_CHARS = 600
Send = Callable[[str, int | None], Awaitable[llm_client.Completion]]


@dataclass(frozen=True)
class Trimmed:
    """What fitting the sources to a window left out."""

    window: int
    passages: int  # passages left out
    cut: int  # sources cut short after that
    sources: int  # sources that lost text
    before: int  # tokens of the source texts, before and after
    after: int


def answer_room(window: int | None, wanted: int) -> int:
    """The answer's `max_tokens`: `wanted`, or less when the window is small."""
    return wanted if window is None else max(1, min(wanted, int(window * ANSWER_SHARE)))


def margin(window: int) -> int:
    """Tokens of `window` kept free of the estimate's errors and the chat template's own."""
    return MARGIN_TOKENS + int(window * MARGIN_SHARE)


def source_budget(window: int, fixed_tokens: int, answer_tokens: int) -> int:
    """Tokens left for the sources' texts in `window`."""
    return window - fixed_tokens - answer_tokens - margin(window)


def tokens(texts: dict[int, str]) -> int:
    return sum(llm_client.estimate_tokens(text) for text in texts.values())


def fit(
    texts: dict[int, str], query: str, budget: int, *, window: int = 0, floor: int = MIN_SOURCE_TOKENS
) -> tuple[dict[int, str], Trimmed | None]:
    """`texts` (by source number) within `budget` tokens: least relevant passages left out
    first, then every text cut to its share; None when they fit as they are."""
    before = tokens(texts)
    if before <= budget or not texts:
        return texts, None
    pieces = {
        n: [p.text for p in split_passages(text, TRIM_PASSAGE_CHARS)] or [text] for n, text in texts.items()
    }
    kept, dropped = _drop_least_relevant(pieces, query, budget)
    fitted = {n: SEPARATOR.join(parts) for n, parts in kept.items()}
    cut = 0
    if tokens(fitted) > budget:
        fitted, cut = _cut_to_share(fitted, budget, floor)
    changed = sum(1 for n in texts if fitted[n] != texts[n])
    return fitted, Trimmed(window, dropped, cut, changed, before, tokens(fitted))


def _drop_least_relevant(
    pieces: dict[int, list[str]], query: str, budget: int
) -> tuple[dict[int, list[str]], int]:
    """Passages left out, the least relevant first, until the rest fits; each source keeps its best."""
    places = [(n, i) for n, parts in pieces.items() for i in range(len(parts))]
    scores = BM25([tokenize(pieces[n][i]) for n, i in places]).scores(tokenize(query))
    score = dict(zip(places, scores, strict=True))
    best = {n: max(range(len(parts)), key=lambda i: (score[(n, i)], -i)) for n, parts in pieces.items()}
    cost = {place: llm_client.estimate_tokens(pieces[place[0]][place[1]]) for place in places}
    total = sum(cost.values())
    left_out: set[tuple[int, int]] = set()
    # Least relevant first; among equals, the later passage of a page goes first.
    for place in sorted(places, key=lambda p: (score[p], -p[1])):
        if total <= budget:
            break
        if best[place[0]] == place[1]:
            continue
        left_out.add(place)
        total -= cost[place]
    kept = {
        n: [part for i, part in enumerate(parts) if (n, i) not in left_out] for n, parts in pieces.items()
    }
    return kept, len(left_out)


def _cut_to_share(texts: dict[int, str], budget: int, floor: int) -> tuple[dict[int, str], int]:
    """Every text over its even share of `budget` (at least `floor`) cut at a word end; how many were cut."""
    share = max(floor, budget // max(1, len(texts)))
    cut = {}
    for n, text in texts.items():
        count = llm_client.estimate_tokens(text)
        if count <= share:
            cut[n] = text
            continue
        chars = max(1, len(text) * share // count)
        while chars > 1 and llm_client.estimate_tokens(text[:chars] + "…") > share:
            chars = chars * 9 // 10
        cut[n] = text[:chars].rsplit(" ", 1)[0].rstrip() + "…"
    return cut, sum(1 for n in texts if cut[n] != texts[n])


async def ask_within(
    ctx: RunContext,
    stage: StageName,
    texts: dict[int, str],
    query: str,
    build: Callable[[dict[int, str]], str],
    send: Send,
    *,
    fixed: str,
    answer_tokens: int,
    whole_answer: bool = False,
) -> tuple[llm_client.Completion, dict[int, str]]:
    """`send(request, max_tokens)` of the request `build` makes of the sources' `texts`, fitted to
    the model's window (`fixed`: the rest of the prompt, the system message); the answer and the
    texts as they were sent. Asked once more, trimmed, after a context-length refusal. With
    `whole_answer` the answer keeps all of its room, however short that leaves the texts."""
    window = await llm_client.context_window()
    if window is not None:
        texts = await _fitted(
            ctx,
            stage,
            texts,
            query,
            build,
            fixed=fixed,
            window=window,
            answer=answer_tokens,
            whole_answer=whole_answer,
        )
    try:
        return await send(build(texts), answer_room(window, answer_tokens)), texts
    except llm_client.LLMContextOverflow as exc:
        told = exc.context_tokens
        if told is None or (window is not None and told >= window):
            sent = llm_client.estimate_tokens(fixed + build(texts))
            told = int(sent * OVERFLOW_SHARE) + answer_room(window, answer_tokens)
        texts = await _fitted(
            ctx,
            stage,
            texts,
            query,
            build,
            fixed=fixed,
            window=told,
            answer=answer_tokens,
            whole_answer=whole_answer,
        )
        return await send(build(texts), answer_room(told, answer_tokens)), texts


async def fitted_to_known_window(
    ctx: RunContext,
    stage: StageName,
    texts: dict[int, str],
    query: str,
    build: Callable[[dict[int, str]], str],
    *,
    fixed: str,
    answer_tokens: int,
) -> dict[int, str]:
    """`texts` fitted to the model's window when it is known (a setting, the server, or an
    earlier context-length 400), as they are when not: for a prompt whose stage has its own
    fallback when the model refuses it (scoring)."""
    window = await llm_client.context_window()
    if window is None:
        return texts
    return await _fitted(ctx, stage, texts, query, build, fixed=fixed, window=window, answer=answer_tokens)


async def _fitted(
    ctx: RunContext,
    stage: StageName,
    texts: dict[int, str],
    query: str,
    build: Callable[[dict[int, str]], str],
    *,
    fixed: str,
    window: int,
    answer: int,
    whole_answer: bool = False,
) -> dict[int, str]:
    """The texts fitted to `window`, with room for the answer (`answer_room`). In a small window
    every text keeps at least `MIN_SOURCE_TOKENS`, taken from up to half the answer's room; with
    `whole_answer` (a cut answer asked again) the texts are cut shorter instead. The event log
    says what was left out."""
    empty = {n: "" for n in texts}
    fixed_tokens = llm_client.estimate_tokens(fixed + build(empty))
    room = answer_room(window, answer)
    budget = source_budget(window, fixed_tokens, room)
    least = MIN_SOURCE_TOKENS * len(texts)
    if budget < least and not whole_answer:
        budget = min(least, budget + room // 2)
    budget = max(budget, 0)
    floor = MIN_SOURCE_TOKENS if budget >= least else budget // max(1, len(texts))
    fitted, trimmed = fit(texts, query, budget, window=window, floor=floor)
    # The texts' own tokens summed may be fewer than they cost inside the request (joined,
    # numbered): what the whole prompt overshoots comes off the texts once more.
    over = llm_client.estimate_tokens(fixed + build(fitted)) - (fixed_tokens + budget)
    if over > 0:
        fitted, trimmed = fit(texts, query, max(0, tokens(fitted) - over), window=window, floor=0)
    if trimmed is not None and trimmed.sources:
        await db(ctx.warn)(
            stage,
            gettext_noop(
                "The sources did not fit the model's context window (%(window)s tokens): left out "
                "%(passages)s of their least relevant passages and cut %(cut)s short, in %(sources)s "
                "sources (%(before)s → %(after)s tokens)"
            ),
            args={
                "window": trimmed.window,
                "passages": trimmed.passages,
                "cut": trimmed.cut,
                "sources": trimmed.sources,
                "before": trimmed.before,
                "after": trimmed.after,
            },
        )
    return fitted
