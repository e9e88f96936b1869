"""The deterministic engine: every pipeline stage without a language model.

Used when no LLM is configured and as the fallback when LLM calls keep failing. Keyword
sub-queries, BM25 scoring, extractive summaries and an extractive cited report — same input,
same output, no network. Its words and BM25 are `text.py`'s, as everyone's.
"""

from __future__ import annotations

import math
import re

from research.pipeline.replies import is_russian
from research.pipeline.text import BM25, WORD, tokenize, words

# --- queries without an LLM -------------------------------------------------------------

_FILLER = re.compile(
    r"^\s*(?:пожалуйста[,\s]+)?"
    r"(?:(?:расскажи|расскажите|объясни|объясните|опиши|опишите|поясни|поясните|найди|найдите)"
    r"(?:\s+(?:мне|нам))?(?:\s+(?:обо|об|о|про))?"
    r"|(?:please\s+)?(?:tell\s+me|explain|describe|find)(?:\s+(?:about|on))?)\s+",
    re.IGNORECASE,
)
_CLAUSE_BREAK = re.compile(
    r"[,;]|\b(?:в том числе|включая|а также|including|as well as|и|and)\b", re.IGNORECASE
)
_LATIN_TERM = re.compile(r"[A-Za-z][A-Za-z0-9+#\-]*(?:\s+[A-Za-z0-9][A-Za-z0-9+#\-]*)*")
_TERM_OR_WORD = re.compile(rf"({_LATIN_TERM.pattern})|([^\W_]+)")


def keyword_subqueries(question: str, limit: int = 3) -> list[str]:
    """Up to `limit` distinct sub-queries: the cleaned question, one per aspect, the keywords."""
    text = _strip_filler(question)
    if not text:
        return []
    clauses = _clauses(text)
    aspects = [_aspect(clause, clauses[0]) for clause in clauses[1:]]
    found = _distinct([text, *aspects, _keywords(text)])
    return [_capitalize(query) for query in found or [text]][: max(limit, 0)]


def _strip_filler(question: str) -> str:
    text = " ".join((question or "").split())
    return _FILLER.sub("", text, count=1) or text


def _capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


def _clauses(text: str) -> list[str]:
    pieces = (piece.strip(" \t.?!…:–—-") for piece in _CLAUSE_BREAK.split(text))
    return [piece for piece in pieces if tokenize(piece)] or [text]


def _aspect(clause: str, subject: str) -> str:
    return clause if subject.casefold() in clause.casefold() else f"{clause} {subject}"


def _keywords(text: str) -> str:
    """The content words of `text` in their own form, or "" when that drops next to nothing.

    Latin terms stay whole in Russian text: "Mixture of Tokens" is one name, not two words.
    """
    pattern = _TERM_OR_WORD if is_russian(text) else WORD
    kept = [match.group(0) for match in pattern.finditer(text) if tokenize(match.group(0))]
    words = " ".join(kept)
    return words if len(words.split()) <= len(text.split()) - 2 else ""


def _distinct(queries: list[str]) -> list[str]:
    """Queries with content words, dropping repeats that differ only in case or punctuation."""
    seen: set[tuple[str, ...]] = set()
    kept = []
    for query in queries:
        key = tuple(WORD.findall(query.casefold().replace("ё", "е")))
        if tokenize(query) and key not in seen:
            seen.add(key)
            kept.append(query)
    return kept


def keyword_queries(subquery: str, limit: int = 3) -> tuple[list[str], list[str]]:
    """(russian, english) search queries; the other language gets only the terms in its script."""
    text = " ".join((subquery or "").split())
    own = _distinct([text, _keywords(text)])[: max(limit, 0)]
    if is_russian(text):
        terms = [term.strip() for term in _LATIN_TERM.findall(text)]
        return own, _distinct([" ".join(terms), *terms])[: max(limit, 0)]
    russian_words = " ".join(re.findall(r"[А-Яа-яЁё]+", text))
    return _distinct([_keywords(russian_words)])[: max(limit, 0)], own


# --- scores without an LLM --------------------------------------------------------------

_SATURATION_WORDS = 400
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")


def score_texts(question: str, direction: str, items: list[tuple[str, str]]) -> list[dict[str, float]]:
    """The five criteria (0–10) for each (title, text), from keywords and shape alone."""
    documents = [tokenize(f"{title} {text}") for title, text in items]
    question_tokens = tokenize(question)
    direction_tokens = tokenize(direction) or question_tokens
    to_question = _relevance(documents, question_tokens)
    to_direction = _relevance(documents, direction_tokens)
    return [
        {
            "relevance_to_question": to_question[index],
            "relevance_to_direction": to_direction[index],
            "completeness": _completeness(documents[index], question_tokens),
            "accuracy": _accuracy(text),
            "structure": _structure(text),
        }
        for index, (_title, text) in enumerate(items)
    ]


def _relevance(documents: list[list[str]], query: list[str]) -> list[float]:
    """BM25 scaled to the batch: the best matching item gets 9–10, non-matching items 0."""
    scores = BM25(documents).scores(query)
    best = max(scores, default=0.0)
    return [
        round(2 + 8 * (0.85 * score / best + 0.15 * _coverage(document, query)), 1) if score > 0 else 0.0
        for score, document in zip(scores, documents, strict=True)
    ]


def _coverage(document: list[str], query: list[str]) -> float:
    wanted = set(query)
    return len(wanted & set(document)) / len(wanted) if wanted else 0.0


def _completeness(document: list[str], query: list[str]) -> float:
    length = 1 - math.exp(-len(document) / _SATURATION_WORDS)
    if not query:
        return round(10 * length, 1)
    return round(10 * (0.6 * _coverage(document, query) + 0.4 * length), 1)


def _accuracy(text: str) -> float:
    signals = (
        r"\d",
        r"\b(?:1[89]|20)\d\d\b",
        r"\[\d+\]|\bet al\.|\bdoi\b|arxiv|https?://|\(\s*[A-ZА-Я][^()]*,\s*\d{4}\s*\)",
    )
    return 5.0 + sum(1.0 for pattern in signals if re.search(pattern, text, re.IGNORECASE))


def _structure(text: str) -> float:
    lines = text.splitlines()
    sentences = _sentences_in(text)
    score = 3.0
    score += 2.0 if len(sentences) >= 3 else 0.0
    score += 2.0 if any(re.match(r"\s*#{1,6}\s", line) for line in lines) else 0.0
    score += 2.0 if any(_LIST_ITEM.match(line) for line in lines) else 0.0
    score += 1.0 if re.search(r"\n\s*\n", text) else 0.0
    words = sum(len(sentence.split()) for sentence in sentences)
    # Walls of text without sentence breaks read badly whatever else they have.
    score -= 2.0 if sentences and words / len(sentences) > 40 else 0.0
    return min(max(score, 0.0), 10.0)


# --- summaries and the report -----------------------------------------------------------

_BLOCK_NOISE = (
    (re.compile(r"```.*?```|~~~.*?~~~", re.DOTALL), " "),
    (re.compile(r"^\s*\[[^\]]+\]:\s*\S+.*$", re.MULTILINE), " "),
)
_INLINE_NOISE = (
    # Footnote marks ("[3]", "[1, 2]", "[[4]](#cite)") from the source would pose as our own
    # citations; a link whose text is a number ("[2](url)") becomes a bare number below.
    (re.compile(r"\[\s*\d+(?:\s*[,–-]\s*\d+)*\s*\](?!\()"), ""),
    (re.compile(r"!\[[^\]]*\]\([^)]*\)"), " "),
    (re.compile(r"\[([^\]]*)\]\([^)]*\)"), r"\1"),
    (re.compile(r"<[^>]+>"), " "),
    (re.compile(r"https?://\S+"), " "),
    (re.compile(r"`([^`]*)`"), r"\1"),
    (re.compile(r"\*+|(?<!\w)_+|_+(?!\w)"), ""),
)
_SENTENCE_END = re.compile(r"[.!?…]+[\"'»”)\]]*\s+")
_ABBREVIATIONS = frozenset(
    words(
        """
    e.g i.e etc vs mr mrs ms dr prof fig no al approx inc ltd jr sr st
    т.е т.д т.п т.к др г гг им см рис стр тыс млн млрд руб ок ср напр проф
        """
    )
)
_POSITION_BONUS = 0.25
_TITLE_WORDS = 12


def extractive_summary(text: str, question: str, max_sentences: int = 5) -> str:
    """The sentences of `text` most about `question`, in their original order; a title on the
    first line of its own is no sentence to quote."""
    blocks = _plain_blocks(text)
    if len(blocks) > 1 and _is_title(blocks[0]):
        blocks = blocks[1:]
    sentences = [sentence for block in blocks for sentence in _sentences(block)]
    if len(sentences) < 3:
        return " ".join(sentences)
    weights = _sentence_weights(sentences, tokenize(question))
    ranked = sorted((index for index, weight in enumerate(weights) if weight >= 0), key=lambda i: -weights[i])
    return " ".join(sentences[index] for index in sorted(ranked[: max(max_sentences, 0)]))


def _sentences_in(markdown: str) -> list[str]:
    return [sentence for block in _plain_blocks(markdown) for sentence in _sentences(block)]


def _plain_blocks(markdown: str) -> list[str]:
    """Paragraphs and list items of `markdown` as plain one-line text."""
    text = _substitute(markdown or "", _BLOCK_NOISE)
    text = _substitute("\n".join(_plain_line(line) for line in text.splitlines()), _INLINE_NOISE)
    return [" ".join(block.split()) for block in re.split(r"\n\s*\n", text) if block.strip()]


def _is_title(block: str) -> bool:
    """A short paragraph without a sentence's end ("Energy transition in Germany")."""
    return block[-1:] not in ".!?…:;\"'»”)]" and len(block.split()) <= _TITLE_WORDS


def _substitute(text: str, rules: tuple[tuple[re.Pattern[str], str], ...]) -> str:
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text


def _plain_line(line: str) -> str:
    if re.match(r"\s*(?:#{1,6}\s|§\s|\||[-=*_]{3,}\s*$|\[(?:…|\.\.\.)\]\s*$)", line):
        # headings (a passage's, "§ …", too), table rows, rules and the gap between passages
        # ("[…]") are not sentences
        return ""
    stripped = re.sub(r"^\s*>\s?", "", line)
    item = _LIST_ITEM.sub("", stripped).strip()
    if item == stripped.strip():
        return stripped
    # A list item is a block of its own, and rarely ends in a full stop.
    return f"\n{item if item[-1:] in '.!?…:;' else item + '.'}\n"


def _sentences(text: str) -> list[str]:
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if _is_sentence_break(text, match):
            sentences.append(text[start : match.end()].strip())
            start = match.end()
    sentences.append(text[start:].strip())
    return [sentence for sentence in sentences if sentence]


def _is_sentence_break(text: str, match: re.Match[str]) -> bool:
    following = text[match.end() : match.end() + 1]
    if not (following.isupper() or following.isdigit() or following in '"«“(['):
        return False
    if text[match.start()] != ".":
        return True
    before = text[: match.start()].split()
    word = before[-1].lower().lstrip('("«“') if before else ""
    # "т. е.", "А. С. Пушкин", "et al." are not sentence ends.
    return not ((len(word) == 1 and word.isalpha()) or word in _ABBREVIATIONS)


def _sentence_weights(sentences: list[str], query: list[str]) -> list[float]:
    """BM25 share plus a lead bonus; off-topic sentences drop out once anything matches."""
    scores = BM25([tokenize(sentence) for sentence in sentences]).scores(query)
    best = max(scores, default=0.0)
    return [
        _sentence_weight(score, best, index / len(sentences), len(sentence.split()))
        for index, (score, sentence) in enumerate(zip(scores, sentences, strict=True))
    ]


def _sentence_weight(score: float, best: float, position: float, words: int) -> float:
    if best > 0 and score == 0:
        return -1.0
    weight = (score / best if best else 0.0) + _POSITION_BONUS * (1 - position)
    return weight * (0.5 if words < 4 else 1.0)


_HEADINGS = {
    True: {"intro": "Введение", "conclusion": "Заключение", "sources": "Источники"},
    False: {"intro": "Introduction", "conclusion": "Conclusion", "sources": "Sources"},
}
_SECTION_SENTENCES = 3


def extractive_report(
    question: str,
    sections: list[tuple[str, list[tuple[int, str]]]],
    sources: list[tuple[int, str, str]],
) -> str:
    """A cited Markdown report built from source sentences; cites only numbers in `sources`."""
    russian = is_russian(question)
    headings = _HEADINGS[russian]
    known = {number for number, _title, _url in sources}
    parts = [f"# {' '.join(question.split())}", f"## {headings['intro']}", _introduction(len(known), russian)]
    for title, texts in sections:
        parts += [f"## {' '.join(title.split())}", _section_body(question, title, texts, known, russian)]
    parts += [f"## {headings['conclusion']}", _conclusion([title for title, _ in sections], russian)]
    parts += [f"## {headings['sources']}", _source_list(sources)]
    return "\n\n".join(part for part in parts if part) + "\n"


def _introduction(count: int, russian: bool) -> str:
    if russian:
        noun = _plural_ru(count, "источника", "источников", "источников")
        return (
            f"Отчёт собран из {count} {noun} без языковой модели: в разделах ниже приведены "
            "наиболее относящиеся к вопросу предложения из источников со ссылками на них."
        )
    noun = "source" if count == 1 else "sources"
    return (
        f"This report was assembled from {count} {noun} without a language model: the sections "
        "below quote the sentences of each source most relevant to the question, with citations."
    )


def section_text(
    question: str,
    title: str,
    texts: list[tuple[int, str]],
    known: set[int],
    *,
    sentences: int = _SECTION_SENTENCES,
) -> str:
    """One section of a report along an outline (research/pipeline/outline.py): up to `sentences`
    sentences of each source most about the section and the question, cited."""
    return _section_body(question, title, texts, known, is_russian(question), sentences)


def _section_body(
    question: str,
    title: str,
    texts: list[tuple[int, str]],
    known: set[int],
    russian: bool,
    sentences: int = _SECTION_SENTENCES,
) -> str:
    paragraphs = []
    for number, text in texts:
        summary = extractive_summary(text, f"{question} {title}", sentences)
        if number in known and summary:
            paragraphs.append(f"{summary} [{number}]")
    if paragraphs:
        return "\n\n".join(paragraphs)
    return "Подходящих сведений в источниках не нашлось." if russian else "The sources had nothing on this."


def _conclusion(titles: list[str], russian: bool) -> str:
    listed = "; ".join(" ".join(title.split()) for title in titles)
    if russian:
        noun = _plural_ru(len(titles), "направление", "направления", "направлений")
        return (
            f"Отчёт охватывает {len(titles)} {noun} исследования{_listing(listed)} "
            "Он составлен из дословных выдержек без обобщения, поэтому выводы стоит сверить с источниками."
        )
    noun = "direction" if len(titles) == 1 else "directions"
    return (
        f"The report covers {len(titles)} research {noun}{_listing(listed)} "
        "It quotes the sources verbatim without synthesis, so check conclusions against them."
    )


def _listing(listed: str) -> str:
    """ ": a; b." after "covers N directions", without a second full stop after "…?"."""
    if not listed:
        return "."
    return f": {listed}" + ("" if listed[-1] in ".!?…" else ".")


def _source_list(sources: list[tuple[int, str, str]]) -> str:
    lines: dict[int, str] = {}
    for number, title, url in sorted(sources, key=lambda source: source[0]):
        name = " ".join((title or url or str(number)).split()).replace("[", "\\[").replace("]", "\\]")
        link = (url or "").strip().replace(" ", "%20").replace("(", "%28").replace(")", "%29")
        lines.setdefault(number, f"{number}. [{name}]({link})" if link else f"{number}. {name}")
    return "\n".join(lines.values())


def _plural_ru(count: int, one: str, few: str, many: str) -> str:
    if count % 10 == 1 and count % 100 != 11:
        return one
    if 2 <= count % 10 <= 4 and not 12 <= count % 100 <= 14:
        return few
    return many
