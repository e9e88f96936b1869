"""Scoring on five 0–10 criteria (`Scores`), shared by the stages that score — hits
(`score_hits.py`), summaries (`score_summaries.py`) and the overlapped round (`overlap.py`) — and
no stage itself.

Rows are scored in batches of ten, one LLM call per batch; answers are matched back by title. An
item the LLM skipped gets the default score; a batch whose call fails is scored by the extractive
engine instead. Hits and summaries are asked with one prompt; their answers are cached apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from django.utils.translation import gettext_noop

from mindsearch.clients import llm as llm_client
from mindsearch.clients.llm import parse_json
from research.models import CacheEntry, Scores
from research.pipeline import extractive, window
from research.pipeline.context import RunContext, db
from research.pipeline.prompting import Asking, data_block, image_labels_block, load_prompt
from research.pipeline.replies import default_scores, match_scores
from research.pipeline.stage import StageName

BATCH_SIZE = 10
T = TypeVar("T")


def in_batches(rows: list[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """`rows` in batches of at most BATCH_SIZE, each of rows with the same `key`, in order."""
    groups: dict[Hashable, list[T]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return [group[i : i + BATCH_SIZE] for group in groups.values() for i in range(0, len(group), BATCH_SIZE)]


async def score_all(
    ctx: RunContext,
    stage: StageName,
    batches: list[list[T]],
    score: Callable[[list[T]], Awaitable[dict[str, Any] | None]],
    *,
    message: str,
    total: int,
    done: int,
) -> None:
    """Every batch scored at once (`score` saves a batch's scores and returns the event's data);
    each batch answered is announced with the running count (`message`: a msgid with %(count)s)."""

    async def one(batch: list[T]) -> None:
        nonlocal done
        data = await score(batch)
        done += len(batch)
        await db(ctx.emit)(stage, message, args={"count": len(batch)}, done=done, total=total, data=data)

    await asyncio.gather(*(one(batch) for batch in batches))


async def score_batch(
    ctx: RunContext, stage: StageName, direction: str, items: list[tuple[str, str]], *, private: bool = False
) -> tuple[list[dict[str, float]], list[str]]:
    """Five criteria per (title, text) item, and where each came from (llm or fallback).

    Shared by hit and summary scoring: both use prompts/score.txt and the same criteria.
    """
    parts = await _split_to_fit(ctx, direction, items)
    if len(parts) > 1:
        scored = [await score_batch(ctx, stage, direction, part, private=private) for part in parts]
        return [s for scores, _ in scored for s in scores], [o for _, origins in scored for o in origins]
    if not await _fits(ctx, direction, items):  # one item, and the prompt alone fills the window
        await db(ctx.fell_back)(stage, _scoring(stage).failed, llm_client.LLMContextOverflow(NO_ROOM))
        return extractive.score_texts(ctx.question, direction, items), [Scores.Origin.FALLBACK] * len(items)
    titles = [title for title, _ in items]
    fitted = await _fitted(ctx, stage, direction, items)
    request = _scoring_request(ctx.asked, direction, fitted) + image_labels_block(ctx)
    matched = await _scoring(stage).answer(
        ctx,
        stage,
        request,
        lambda text: match_scores(titles, parse_json(text, expect=(list, dict))),
        private=private,
        max_tokens=score_tokens(titles),
    )
    if matched is not None:
        return [m or default_scores() for m in matched], [_origin(m) for m in matched]
    fallback = extractive.score_texts(ctx.question, direction, items)
    return fallback, [Scores.Origin.FALLBACK] * len(items)


# One item's scores as prompts/score.txt asks for them, without its title: the answer is a JSON
# object per item, and a small model writes up to any limit, so the limit is the items' worth.
SCORED_ITEM = (
    '{"заголовок": "", "соответствие_запросу": 10, "соответствие_направлению": 10, "полнота": 10, '
    '"точность": 10, "структура": 10, "итоговый_рейтинг": 10},\n'
)
# What an item's text keeps at least, in a batch fitted to a small window: less, and the batch is
# split in two instead (a text trimmed to nothing cannot be scored).
MIN_SCORED_TOKENS = 96


NO_ROOM = "the scoring prompt with one result and its scores does not fit the model's context window"


def score_tokens(titles: list[str]) -> int:
    """The token limit of the scores of items with these `titles`."""
    item = llm_client.estimate_tokens(SCORED_ITEM)
    return item + sum(item + llm_client.estimate_tokens(title) for title in titles)


async def _split_to_fit(
    ctx: RunContext, direction: str, items: list[tuple[str, str]]
) -> list[list[tuple[str, str]]]:
    """`items` as one batch, or in halves (each split again as needed) when the model's window is
    known and too small for the batch (`_fits`)."""
    if len(items) < 2 or await _fits(ctx, direction, items):
        return [items]
    half = len(items) // 2
    return [
        *await _split_to_fit(ctx, direction, items[:half]),
        *await _split_to_fit(ctx, direction, items[half:]),
    ]


async def _fits(ctx: RunContext, direction: str, items: list[tuple[str, str]]) -> bool:
    """Whether the model's window (when it is known) holds the batch's prompt, its scores and
    `MIN_SCORED_TOKENS` of every text (less where a text is shorter)."""
    window_tokens = await llm_client.context_window() if ctx.llm_enabled else None
    if window_tokens is None:
        return True
    empty = [(title, "") for title, _ in items]
    request = _scoring_request(ctx.asked, direction, empty) + image_labels_block(ctx)
    fixed = llm_client.estimate_tokens(load_prompt("score").text + request)
    texts = sum(min(llm_client.estimate_tokens(text), MIN_SCORED_TOKENS) for _, text in items)
    wanted = score_tokens([title for title, _ in items])
    answer = window.answer_room(window_tokens, wanted)
    return answer >= wanted and fixed + answer + texts + window.margin(window_tokens) <= window_tokens


async def _fitted(
    ctx: RunContext, stage: StageName, direction: str, items: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The items with their texts fitted to the model's window when it is known (`window`); a
    refusal of a window not known yet is this batch's keyword fallback, and later batches fit."""
    if not ctx.llm_enabled:
        return items
    titles = [title for title, _ in items]

    def build(texts: dict[int, str]) -> str:
        listed = [(title, texts[i]) for i, title in enumerate(titles, 1)]
        return _scoring_request(ctx.asked, direction, listed) + image_labels_block(ctx)

    texts = {i: text for i, (_title, text) in enumerate(items, 1)}
    prompt = load_prompt("score")
    fitted = await window.fitted_to_known_window(
        ctx, stage, texts, ctx.question, build, fixed=prompt.text, answer_tokens=score_tokens(titles)
    )
    return [(title, fitted[i]) for i, title in enumerate(titles, 1)]


def _scoring(stage: StageName) -> Asking:
    """Scoring hits or summaries: the same prompt, answers cached apart."""
    hits = stage == StageName.SCORE_HITS
    kind = CacheEntry.Kind.RANKED_RESULTS if hits else CacheEntry.Kind.RANKED_SUMMARIES
    return Asking("score", kind, gettext_noop("LLM scoring failed (%(error)s); scored by keywords instead."))


def _origin(matched: dict[str, float] | None) -> str:
    return Scores.Origin.LLM if matched is not None else Scores.Origin.FALLBACK


def _scoring_request(question: str, direction: str, items: list[tuple[str, str]]) -> str:
    listing = "\n\n".join(f"{i}. Заголовок: {title}\n{text}" for i, (title, text) in enumerate(items, 1))
    return (
        f"Исходный запрос: {question}\nТекущее направление поиска: {direction}\n\n"
        f"Результаты для оценки ({len(items)}):\n{data_block(listing)}"
    )
