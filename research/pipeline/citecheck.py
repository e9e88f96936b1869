"""Claim-level citation check: is each cited sentence of a report backed by the text of its source?

Every sentence of the report that carries `[n]` is a claim; it is compared with the text that was
actually sent to the model for source n (`passages.document_excerpt`), cut into windows of one or
two consecutive sentences. The best window is the one with the highest score, where

    score = LEXICAL_WEIGHT × coverage + (1 − LEXICAL_WEIGHT) × similarity

coverage is the share of the claim's content words (stemmed, Russian and English; a shared
prefix of PREFIX_MATCH letters counts, so "trained" finds "training") found in the window, and
similarity the cosine of the two sentence embeddings (`retrieval.embeddings.embed`, whichever
model is configured) put on a common scale: models differ in where their cosines lie (one puts
unrelated sentences at 0.1, another at 0.75), so each process measures its model once on a few
fixed sentence pairs — unrelated ones are 0, restatements 1 (`similarity_scale`).

A number the claim states that the source does not contain at all makes the claim unsupported,
whatever its score. Above SUPPORTED_SCORE a claim is supported, under UNSUPPORTED_SCORE
unsupported, weak in between; the thresholds were chosen on SciFact's claims and abstracts
(`bench/citecheck.py`), not on anything MindSearch wrote.

A claim in one language citing a source in the other cannot be judged by its words: then only
the embedding similarity speaks, and without a number that contradicts the source the local
check says no worse than weak (an English-only embedding model cannot tell a translation from
an unrelated sentence, and calling a true claim unsupported costs the reader's trust).

When an LLM is configured, the claims and their best windows go to it in batches (`verify`), and
its verdict replaces the local one where it gave a usable one; its answer is untrusted JSON, so
anything broken, wrapped in prose or cut short falls back to the local verdict.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mindsearch.clients.llm import LLMError, parse_json
from research.pipeline import passages
from research.pipeline.replies import is_russian
from research.pipeline.text import tokenize

log = logging.getLogger(__name__)

SUPPORTED, WEAK, UNSUPPORTED = "supported", "weak", "unsupported"
LOCAL, LEXICAL, LLM = "local", "lexical", "llm"

# Chosen on SciFact's tune half (bench/citecheck.py; with embeddings from a 25-claims-per-kind
# run, the words-only ones from 150 per kind); see the module docstring and docs/BENCHMARKS.md.
LEXICAL_WEIGHT = 0.7
SUPPORTED_SCORE = 0.86
UNSUPPORTED_SCORE = 0.56
# Without embeddings (the model could not be loaded or the endpoint failed): coverage alone.
SUPPORTED_COVERAGE = 0.75
UNSUPPORTED_COVERAGE = 0.42
# Across languages: the embedding similarity alone can only call a claim supported.
SUPPORTED_SIMILARITY_ACROSS = 0.6

PREFIX_MATCH = 5
# Sentences of a source (with their neighbours) a claim is compared with by embedding.
CANDIDATES_SAME = 3
CANDIDATES_ACROSS = 8
PASSAGE_CHARS = 600  # the best window as stored and shown
LLM_PASSAGE_CHARS = 1_000  # what the LLM sees of a source for one claim
LLM_BATCH = 12  # claims per verification call
# A verdict's JSON object with its one short reason: a batch's answer is a verdict per claim and one more.
VERDICT_TOKENS = 64
# A local verdict the LLM's does not overturn: a number the source does not contain, or a claim
# whose words the source holds nearly all. A verifier slips now and then (SciFact pairs and the
# evidence benchmark both show it), and on these two the words are the better witness.
SETTLED_COVERAGE = 0.95
MAX_WINDOWS_PER_SOURCE = 400  # a 5,000-character excerpt has about 50 sentences

CITATION = re.compile(r"\[(\d{1,3})\](?!\()")
# A sentence ends at a full stop (its citations after it belong to it), and also at a colon or
# semicolon its writer cited: "… Tesla stated: [2] Тесла умер в 1943 году. [3]" is two claims of
# two sources, not one that neither source backs (the evidence benchmark's false alarms).
# Linear on any text (issue 26): a run of stops is tried from its first stop only (the
# look-behind) and never given back (possessive), so 15,000 dots are one attempt, not 15,000
# attempts of 15,000 steps each; what follows each part cannot be what it holds, so nothing
# that matched before is lost.
_SENTENCE_END = re.compile(
    r"(?:(?<![.!?…])[.!?…]++[»\"”’)]*+(?:\s*\[\d{1,3}\])*+"
    r"|[:;][»\"”’)]*+(?:\s*\[\d{1,3}\])+)(?=\s+[«\"“„(*_]*[A-ZА-ЯЁ0-9])",
    re.UNICODE,
)
_NOT_PROSE = re.compile(r"^\s*(?:#{1,6}\s|```|~~~|[-*_]{3,}\s*$|\|?\s*:?-{3,})")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?![\w])")
_GROUPED_THOUSANDS = re.compile(r"(?<![\w.,])\d{1,3}(?:[ \u00a0\u202f]\d{3})+(?![\w])")
_NUMBER_WORDS = {
    **dict.fromkeys(("zero", "ноль", "нуль"), "0"),
    **dict.fromkeys(("one", "один", "одна", "одно", "одного", "одной"), "1"),
    **dict.fromkeys(("two", "twice", "два", "две", "двух", "вдвое", "дважды"), "2"),
    **dict.fromkeys(("three", "три", "трёх", "трех", "втрое", "трижды"), "3"),
    **dict.fromkeys(("four", "четыре", "четырёх", "четырех", "вчетверо"), "4"),
    **dict.fromkeys(("five", "пять", "пяти"), "5"),
    **dict.fromkeys(("six", "шесть", "шести"), "6"),
    **dict.fromkeys(("seven", "семь", "семи"), "7"),
    **dict.fromkeys(("eight", "восемь", "восьми"), "8"),
    **dict.fromkeys(("nine", "девять", "девяти"), "9"),
    **dict.fromkeys(("ten", "десять", "десяти"), "10"),
    **dict.fromkeys(("hundred", "сто", "ста"), "100"),
}


@dataclass(frozen=True)
class Claim:
    """A sentence of the report that cites sources: its place, its plain text, the numbers cited."""

    index: int
    text: str
    sources: tuple[int, ...]


@dataclass
class Verdict:
    """One claim checked against one of the sources it cites."""

    index: int
    sentence: str
    n: int
    verdict: str
    score: float
    coverage: float
    similarity: float | None
    passage: str
    method: str
    note: str = ""
    local_verdict: str = ""
    # The best windows for the LLM, most relevant first (not stored).
    candidates: list[str] = field(default_factory=list, repr=False)

    def row(self) -> dict[str, Any]:
        """What is stored of it: a report's `Citation` row, a follow-up's `citations` item."""
        stored = {name: getattr(self, name) for name in ROW_FIELDS if name != "sentence_index"}
        return {"sentence_index": self.index, **stored}


# The stored fields of a verdict (`Citation`'s columns but the report and the time).
ROW_FIELDS = (
    "sentence_index",
    "sentence",
    "n",
    "verdict",
    "local_verdict",
    "method",
    "score",
    "coverage",
    "similarity",
    "passage",
    "note",
)


# --- Claims -------------------------------------------------------------------------------------


def sentence_spans(body: str) -> list[tuple[int, int]]:
    """The report's prose sentences as (start, end) offsets; headings, rules, code and table
    separators are not sentences. A citation after the full stop belongs to the sentence."""
    spans: list[tuple[int, int]] = []
    offset = 0
    fenced = False
    for line in body.splitlines(keepends=True):
        start, end = offset, offset + len(line.rstrip("\r\n"))
        offset += len(line)
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or not line.strip() or _NOT_PROSE.match(line):
            continue
        bullet = _BULLET.match(line)
        if bullet:
            start += bullet.end()
        spans.extend(_split_sentences(body, start, end))
    return spans


def _split_sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans, begin = [], start
    for match in _SENTENCE_END.finditer(text, start, end):
        spans.append((begin, match.end()))
        begin = match.end()
    spans.append((begin, end))
    return [(s + _leading_space(text[s:e]), e) for s, e in spans if text[s:e].strip()]


def _leading_space(text: str) -> int:
    return len(text) - len(text.lstrip())


def claims(body: str, source_count: int) -> list[Claim]:
    """Every sentence that cites at least one existing source, in the order of the report."""
    found = []
    for index, (start, end) in enumerate(sentence_spans(body)):
        sentence = body[start:end]
        cited = tuple(
            dict.fromkeys(int(n) for n in CITATION.findall(sentence) if 1 <= int(n) <= source_count)
        )
        text = plain_claim(sentence)
        if cited and tokenize(text):
            found.append(Claim(index, text, cited))
    return found


def plain_claim(sentence: str) -> str:
    return passages.plain(CITATION.sub(" ", sentence)).replace(" .", ".").replace(" ,", ",").strip()


def citation_occurrences(body: str, source_count: int) -> list[tuple[int, int]]:
    """(sentence index, n) for each `[n]` in the body in reading order, the way `render_markdown`
    meets them, so the page can mark each citation with its verdict; a citation outside any
    sentence (a heading) gets index -1."""
    spans = sentence_spans(body)
    starts = [start for start, _end in spans]
    found = []
    for match in CITATION.finditer(body):
        n = int(match.group(1))
        if 1 <= n <= source_count:
            found.append((_sentence_at(spans, starts, match.start()), n))
    return found


def _sentence_at(spans: list[tuple[int, int]], starts: list[int], offset: int) -> int:
    """The index of the sentence holding `offset` (the spans are sorted and apart), or -1."""
    index = bisect.bisect_right(starts, offset) - 1
    return index if index >= 0 and offset < spans[index][1] else -1


# --- Local check --------------------------------------------------------------------------------


@dataclass
class _Window:
    text: str
    tokens: frozenset[str]
    russian: bool
    parts: tuple[int, ...]  # the source sentences it is made of
    vector: Any = None


def source_windows(text: str) -> list[_Window]:
    """A source's sentences and each pair of neighbouring ones: claims often join two."""
    sentences = [passages.plain(text[s:e]) for s, e in sentence_spans(text)]
    sentences = [s for s in sentences if tokenize(s)][: MAX_WINDOWS_PER_SOURCE // 2]
    found = [_window(s, (i,)) for i, s in enumerate(sentences)]
    found += [_window(f"{a} {b}", (i, i + 1)) for i, (a, b) in enumerate(itertools.pairwise(sentences))]
    return found


def numbers(text: str) -> set[str]:
    """The numbers a text states, normalised ("1,200" and "1200"; "3,5" and "3.5"; "three" is 3)."""
    found = set()
    text = _GROUPED_THOUSANDS.sub(lambda m: re.sub(r"[\s\u00a0\u202f]", "", m.group(0)), text)
    for raw in _NUMBER.findall(text):
        found.add(raw.replace(",", "."))
        found.add(re.sub(r"[.,]", "", raw) if re.fullmatch(r"\d{1,3}(?:[,.]\d{3})+", raw) else raw)
    return found


def _source_numbers(text: str) -> set[str]:
    words = re.findall(r"[^\W\d_]+", text.lower())
    return numbers(text) | {_NUMBER_WORDS[word] for word in words if word in _NUMBER_WORDS}


def _claim_numbers(text: str) -> set[str]:
    """Numbers the claim states as facts (0 and 1 are too often words in the source)."""
    return {n for n in numbers(text) if n not in ("0", "1")}


def coverage(claim_tokens: Sequence[str], window_tokens: frozenset[str]) -> float:
    """The share of the claim's distinct content words found in the window (prefix matches too)."""
    wanted = {t for t in claim_tokens if not t.isdigit()}
    if not wanted:
        return 0.0
    prefixes = {t[:PREFIX_MATCH] for t in window_tokens if len(t) >= PREFIX_MATCH}
    found = sum(
        1 for t in wanted if t in window_tokens or (len(t) >= PREFIX_MATCH and t[:PREFIX_MATCH] in prefixes)
    )
    return found / len(wanted)


def _embed(texts: list[str], embed: Callable[[list[str]], list[list[float]]] | None = None) -> Any:
    """Normalised vectors (a numpy matrix) from the project's embedding model, or None when it
    cannot be had: the check then goes on by words alone.

    The project model's vectors are remembered per process (`_remembered`): a report written
    again from the same sources, or a follow-up on them, checks the same sentences, and
    embedding them was most of the check's time (2.6 s of a 7-s cached re-run on a busy machine)."""
    import numpy as np

    from retrieval import embeddings

    if not texts:
        return np.zeros((0, 1))
    try:
        if embed is not None:
            return np.asarray(embed(texts), dtype=np.float32)
        return np.asarray(_remembered(embeddings.model_id(), texts, embeddings.embed), dtype=np.float32)
    except Exception as exc:
        log.warning("citation check without embeddings: %s", exc)
        return None


REMEMBERED_VECTORS = 20_000  # sentences (~1.5 KB each at 384 dimensions): ~30 MB at most
_vectors: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
_vectors_lock = threading.Lock()


def _remembered(
    model: str, texts: list[str], embed: Callable[[list[str]], list[list[float]]]
) -> list[list[float]]:
    """`embed(texts)`, embedding only the texts this process has not embedded with `model` yet
    (the least recently used are forgotten past REMEMBERED_VECTORS)."""
    with _vectors_lock:
        missing = [text for text in dict.fromkeys(texts) if (model, text) not in _vectors]
    fresh = dict(zip(missing, embed(missing), strict=True)) if missing else {}
    with _vectors_lock:
        found = {}
        for text in dict.fromkeys(texts):
            vector = fresh.get(text)
            if vector is None:
                vector = _vectors.get((model, text))
            if vector is None:  # forgotten meanwhile by another thread's additions
                vector = embed([text])[0]
            _vectors[(model, text)] = vector
            _vectors.move_to_end((model, text))
            found[text] = vector
        while len(_vectors) > REMEMBERED_VECTORS:
            _vectors.popitem(last=False)
    return [found[text] for text in texts]


# The calibration pairs: each statement beside a restatement of it (other words, or the other
# language), and beside a sentence about something else. Only their average similarities are
# used, as the two ends of the scale.
_RESTATED = (
    ("The bridge was closed for repairs in March.", "Repair work shut the bridge in March."),
    ("Prices of wheat rose sharply after the drought.", "The drought made wheat much more expensive."),
    (
        "The vaccine reduced hospital admissions among older adults.",
        "Fewer older people were hospitalised after vaccination.",
    ),
    ("The library opens at nine on weekdays.", "On working days the library opens at 9 a.m."),
    ("Солнечные панели дают меньше энергии зимой.", "Зимой выработка солнечных панелей падает."),
    ("Компания открыла новый завод в Казани.", "В Казани у компании заработал новый завод."),
    ("The river froze early this year.", "В этом году река замёрзла рано."),
    (
        "Команда выиграла чемпионат второй раз подряд.",
        "The team won the championship for the second year running.",
    ),
)
_UNRELATED = (
    ("The bridge was closed for repairs in March.", "Most owls hunt at night."),
    ("Prices of wheat rose sharply after the drought.", "The novel was translated into twelve languages."),
    ("The vaccine reduced hospital admissions among older adults.", "The stadium has a retractable roof."),
    ("The library opens at nine on weekdays.", "Copper conducts electricity well."),
    ("Солнечные панели дают меньше энергии зимой.", "Этот роман перевели на двенадцать языков."),
    ("Компания открыла новый завод в Казани.", "Большинство сов охотится ночью."),
    ("The river froze early this year.", "Медь хорошо проводит электричество."),
    ("Команда выиграла чемпионат второй раз подряд.", "The recipe needs two eggs and a cup of flour."),
)
_scales: dict[Any, tuple[float, float] | None] = {}


def similarity_scale(
    embed: Callable[[list[str]], list[list[float]]] | None = None,
) -> tuple[float, float] | None:
    """(cosine of unrelated sentences, cosine of restatements) for the configured model, measured
    once per process (and per model setting); None when the model cannot embed."""
    from django.conf import settings

    key = embed or (settings.EMBEDDING_BACKEND, getattr(settings, "EMBEDDING_MODEL", ""))
    if key not in _scales:
        pairs = _RESTATED + _UNRELATED
        matrix = _embed([text for pair in pairs for text in pair], embed)
        if matrix is None:
            return None  # not remembered: the model may be back next time
        cosines = [float(matrix[2 * i] @ matrix[2 * i + 1]) for i in range(len(pairs))]
        high = sum(cosines[: len(_RESTATED)]) / len(_RESTATED)
        low = sum(cosines[len(_RESTATED) :]) / len(_UNRELATED)
        _scales[key] = (low, high) if high - low > 0.05 else None
    return _scales[key]


def prepare(
    claim_list: list[Claim],
    sources: dict[int, str],
    *,
    use_embeddings: bool = True,
    embed: Callable[[list[str]], list[list[float]]] | None = None,
) -> Prepared:
    """Windows of every cited source and, with embeddings, a vector for each claim and for the
    windows it is compared with.

    Embedding is what costs: so a claim is compared only with the windows around the sentences
    of its source that share most of its words (CANDIDATES_SAME; CANDIDATES_ACROSS when the
    source is in the other language, where words say little), and only sentences are embedded —
    a two-sentence window gets the normalised mean of its two."""
    import numpy as np

    cited = sorted({n for claim in claim_list for n in claim.sources if n in sources})
    per_source = {n: source_windows(sources[n]) for n in cited}
    prepared = Prepared(
        claim_list,
        [tokenize(claim.text) for claim in claim_list],
        per_source,
        {n: _source_numbers(sources[n]) for n in cited},
    )
    if not use_embeddings:
        return prepared
    chosen, needed = _candidates(prepared)
    scale = similarity_scale(embed)
    order = sorted(needed)
    matrix = _embed([claim.text for claim in claim_list] + [per_source[n][i].text for n, i in order], embed)
    if matrix is None or scale is None:
        return prepared
    prepared.scale, prepared.chosen = scale, chosen
    prepared.claim_vectors = matrix[: len(claim_list)]
    for (n, i), vector in zip(order, matrix[len(claim_list) :], strict=True):
        per_source[n][i].vector = vector
    for n in cited:
        sentences = per_source[n]
        for window in sentences:
            if len(window.parts) == 2 and all(sentences[i].vector is not None for i in window.parts):
                mean = sentences[window.parts[0]].vector + sentences[window.parts[1]].vector
                window.vector = mean / (float(np.linalg.norm(mean)) or 1.0)
    return prepared


def _candidates(prepared: Prepared) -> tuple[dict[tuple[int, int], list[int]], set[tuple[int, int]]]:
    """For each claim and cited source, the windows to compare (indexes), and every (source,
    sentence) they are made of. A source's first windows are its sentences, in order."""
    chosen: dict[tuple[int, int], list[int]] = {}
    needed: set[tuple[int, int]] = set()
    for position, claim in enumerate(prepared.claims):
        russian = is_russian(claim.text)
        for n in claim.sources:
            windows = prepared.windows.get(n, [])
            sentences = [w for w in windows if len(w.parts) == 1]
            across = sum(w.russian != russian for w in sentences) * 2 > len(sentences)
            ranked = sorted(
                sentences, key=lambda w: (-coverage(prepared.tokens[position], w.tokens), w.parts[0])
            )
            best = {w.parts[0] for w in ranked[: CANDIDATES_ACROSS if across else CANDIDATES_SAME]}
            picked = [i for i, window in enumerate(windows) if best & set(window.parts)]
            chosen[(position, n)] = picked
            needed.update((n, part) for i in picked for part in windows[i].parts)
    return chosen, needed


@dataclass
class Prepared:
    claims: list[Claim]
    tokens: list[list[str]]
    windows: dict[int, list[_Window]]
    numbers: dict[int, set[str]]
    claim_vectors: Any = None
    scale: tuple[float, float] = (0.0, 1.0)
    # With embeddings: the windows each (claim, source) is compared with; None: all of them.
    chosen: dict[tuple[int, int], list[int]] | None = None

    def features(self, position: int, n: int) -> list[tuple[float, float | None, bool, _Window]]:
        """(coverage, similarity, across languages, window) for each window of source n that
        the claim is compared with."""
        claim = self.claims[position]
        russian = is_russian(claim.text)
        vector = self.claim_vectors[position] if self.claim_vectors is not None else None
        windows = self.windows.get(n, [])
        if self.chosen is not None:
            windows = [windows[i] for i in self.chosen.get((position, n), [])]
        found = []
        for window in windows:
            similarity = None
            if vector is not None and window.vector is not None:
                low, high = self.scale
                similarity = min(1.0, max(0.0, (float(vector @ window.vector) - low) / (high - low)))
            found.append(
                (
                    coverage(self.tokens[position], window.tokens),
                    similarity,
                    window.russian != russian,
                    window,
                )
            )
        return found

    def missing_numbers(self, position: int, n: int) -> list[str]:
        wanted = _claim_numbers(self.claims[position].text)
        return sorted(wanted - self.numbers.get(n, set()), key=lambda x: (len(x), x))


def check(claim_list: list[Claim], sources: dict[int, str], *, use_embeddings: bool = True) -> list[Verdict]:
    """One verdict per claim and cited source, judged locally (words, numbers, embeddings)."""
    prepared = prepare(claim_list, sources, use_embeddings=use_embeddings)
    return [_judge(prepared, position, n) for position, claim in enumerate(claim_list) for n in claim.sources]


def _window(text: str, parts: tuple[int, ...]) -> _Window:
    return _Window(text=text, tokens=frozenset(tokenize(text)), russian=is_russian(text), parts=parts)


def _judge(prepared: Prepared, position: int, n: int) -> Verdict:
    claim = prepared.claims[position]
    scored = [
        (_score(cover, similarity, across), cover, similarity, across, window)
        for cover, similarity, across, window in prepared.features(position, n)
    ]
    if not scored:
        return Verdict(
            claim.index,
            claim.text,
            n,
            UNSUPPORTED,
            0.0,
            0.0,
            None,
            "",
            LEXICAL,
            "the source has no text",
            local_verdict=UNSUPPORTED,
        )
    scored.sort(key=lambda item: -item[0])
    score, cover, similarity, across, best = scored[0]
    verdict, note = _verdict(score, similarity, across, prepared.missing_numbers(position, n))
    return Verdict(
        index=claim.index,
        sentence=claim.text,
        n=n,
        verdict=verdict,
        score=round(score, 4),
        coverage=round(cover, 4),
        similarity=None if similarity is None else round(similarity, 4),
        passage=_clip(best.text, PASSAGE_CHARS),
        method=LOCAL if similarity is not None else LEXICAL,
        note=note,
        local_verdict=verdict,
        candidates=[_clip(item[4].text, LLM_PASSAGE_CHARS) for item in scored[:3]],
    )


def _score(cover: float, similarity: float | None, across: bool) -> float:
    if across:
        return similarity if similarity is not None else cover
    if similarity is None:
        return cover
    return LEXICAL_WEIGHT * cover + (1 - LEXICAL_WEIGHT) * similarity


def _verdict(score: float, similarity: float | None, across: bool, missing: list[str]) -> tuple[str, str]:
    if missing:
        return UNSUPPORTED, "not in the source: " + ", ".join(missing[:5])
    if across:
        supported = similarity is not None and similarity >= SUPPORTED_SIMILARITY_ACROSS
        return (SUPPORTED, "") if supported else (WEAK, "the source is in another language")
    high, low = (
        (SUPPORTED_SCORE, UNSUPPORTED_SCORE)
        if similarity is not None
        else (SUPPORTED_COVERAGE, UNSUPPORTED_COVERAGE)
    )
    if score >= high:
        return SUPPORTED, ""
    if score < low:
        return UNSUPPORTED, ""
    return WEAK, ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "…"


# --- Summary ------------------------------------------------------------------------------------


def counts(verdicts: Sequence[Any]) -> dict[str, int]:
    """How many citations got each verdict, and in all (rows or Verdicts alike)."""
    tally = {SUPPORTED: 0, WEAK: 0, UNSUPPORTED: 0}
    for item in verdicts:
        tally[item.verdict] = tally.get(item.verdict, 0) + 1
    return {**tally, "total": len(verdicts)}


def mostly_unsupported(verdicts: Sequence[Verdict]) -> bool:
    """More than half of at least two citations unsupported: worth asking the model again."""
    tally = counts(verdicts)
    return tally["total"] >= 2 and tally[UNSUPPORTED] * 2 > tally["total"]


def quality(verdicts: Sequence[Verdict]) -> float:
    """What "the better answer" means: its share of supported citations less its unsupported
    share; an answer that cites nothing is worst."""
    tally = counts(verdicts)
    if not tally["total"]:
        return -2.0
    return (tally[SUPPORTED] - tally[UNSUPPORTED]) / tally["total"]


def feedback(verdicts: Sequence[Verdict], *, russian: bool) -> str:
    """The verdicts as they are given to the model when it is asked again."""
    bad = [v for v in verdicts if v.verdict != SUPPORTED]
    if russian:
        lines = ["Проверка показала, что источники не подтверждают эти утверждения прошлого ответа:"]
        lines += [f"- «{v.sentence}» [{v.n}]: {_ru_verdict(v.verdict)}" for v in bad]
        lines.append(
            "Перепиши ответ: каждое утверждение должно прямо следовать из текста источника, на который "
            "оно ссылается; то, чего в источниках нет, не пиши."
        )
    else:
        lines = ["A check found that the sources do not back these statements of the previous answer:"]
        lines += [f"- “{v.sentence}” [{v.n}]: {v.verdict}" for v in bad]
        lines.append(
            "Rewrite the answer: every statement must follow directly from the text of the source it "
            "cites; leave out what the sources do not say."
        )
    return "\n".join(lines)


def _ru_verdict(verdict: str) -> str:
    return {UNSUPPORTED: "не подтверждается", WEAK: "подтверждается слабо"}.get(verdict, verdict)


# --- LLM verification ---------------------------------------------------------------------------

_VERDICT_WORDS = {
    SUPPORTED: SUPPORTED,
    "supports": SUPPORTED,
    "support": SUPPORTED,
    "yes": SUPPORTED,
    "true": SUPPORTED,
    "подтверждается": SUPPORTED,
    "поддерживается": SUPPORTED,
    "да": SUPPORTED,
    WEAK: WEAK,
    "partial": WEAK,
    "partially": WEAK,
    "partially supported": WEAK,
    "частично": WEAK,
    "слабо": WEAK,
    UNSUPPORTED: UNSUPPORTED,
    "not supported": UNSUPPORTED,
    "contradicted": UNSUPPORTED,
    "contradicts": UNSUPPORTED,
    "no": UNSUPPORTED,
    "false": UNSUPPORTED,
    "не подтверждается": UNSUPPORTED,
    "не поддерживается": UNSUPPORTED,
    "противоречит": UNSUPPORTED,
    "нет": UNSUPPORTED,
}


def verification_request(batch: Sequence[Verdict], question: str) -> str:
    """The claims of one batch, each with the windows of its source most like it."""
    from research.pipeline.prompting import data_block

    blocks = []
    for number, verdict in enumerate(batch, 1):
        passages_text = "\n…\n".join(verdict.candidates) or "(пусто)"
        blocks.append(
            f"### {number}\nУтверждение: {verdict.sentence}\nИсточник [{verdict.n}]:\n{passages_text}"
        )
    return f"Исходный запрос: {question}\n\nУтверждения:\n" + data_block("\n\n".join(blocks))


def parse_verification(answer: str, size: int) -> dict[int, tuple[str, str]]:
    """{claim number in the batch: (verdict, reason)} from the model's JSON; whatever is not
    a usable item (unknown numbers, unknown verdicts, broken JSON) is left out."""
    try:
        value = parse_json(answer, expect=(list, dict))
    except LLMError:
        return {}
    if isinstance(value, dict):
        items = next((v for v in value.values() if isinstance(v, list)), [value])
    elif isinstance(value, list):
        items = value
    else:
        return {}
    found: dict[int, tuple[str, str]] = {}
    for position, item in enumerate(items, 1):
        if not isinstance(item, dict):
            continue
        number = _item_number(item, position if len(items) == size else None)
        verdict = _VERDICT_WORDS.get(str(item.get("verdict", item.get("вердикт", ""))).strip().lower())
        if number is None or not 1 <= number <= size or verdict is None:
            continue
        reason = item.get("reason", item.get("причина", ""))
        found[number] = (verdict, reason.strip()[:500] if isinstance(reason, str) else "")
    return found


def _item_number(item: dict, fallback: int | None) -> int | None:
    raw = item.get("id", item.get("номер", item.get("n")))
    if type(raw) is int:
        return raw
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw.strip())
    return fallback


def settled_locally(verdict: Verdict) -> bool:
    missing_number = verdict.local_verdict == UNSUPPORTED and verdict.note.startswith("not in the source:")
    copied = verdict.local_verdict == SUPPORTED and verdict.coverage >= SETTLED_COVERAGE
    return missing_number or copied


def _with_llm(verdict: Verdict, judged: str, reason: str) -> Verdict:
    """The LLM's verdict, unless it turns a settled local one into its opposite (then the LLM's
    is kept as a note); "weak" from the LLM always stands."""
    opposite = {SUPPORTED: UNSUPPORTED, UNSUPPORTED: SUPPORTED}.get(verdict.local_verdict)
    if settled_locally(verdict) and judged == opposite:
        note = f"{verdict.note}; the LLM said {judged}" if verdict.note else f"the LLM said {judged}"
        return replace(verdict, note=note[:500])
    return replace(verdict, verdict=judged, method=LLM, note=reason)


async def verify(ctx: Any, verdicts: list[Verdict], *, private: bool, stage: str) -> list[Verdict]:
    """The verdicts with the LLM's where it gave a usable one; batches go out concurrently (the
    client's global rate limit paces them). A failed call leaves its batch's local verdicts."""
    from research.models import CacheEntry
    from research.pipeline.prompting import ask, image_labels_block, load_prompt

    prompt = load_prompt("citecheck")
    batches = [verdicts[i : i + LLM_BATCH] for i in range(0, len(verdicts), LLM_BATCH)]

    async def one(batch: list[Verdict]) -> list[Verdict]:
        try:
            answer = await ask(
                ctx,
                stage,
                prompt,
                verification_request(batch, ctx.asked) + image_labels_block(ctx),
                kind=CacheEntry.Kind.CITATION_CHECKS,
                private=private,
                max_tokens=VERDICT_TOKENS * (len(batch) + 1),
            )
        except LLMError as exc:
            log.info("citation verification failed: %s", exc)
            return batch
        judged = parse_verification(answer, len(batch))
        return [_with_llm(v, *judged[i]) if i in judged else v for i, v in enumerate(batch, 1)]

    results = await asyncio.gather(*(one(batch) for batch in batches))
    return [verdict for batch in results for verdict in batch]
