"""The deterministic engine: every pipeline stage without a language model.

Used when no LLM is configured and as the fallback when LLM calls keep failing. Keyword
sub-queries, BM25 scoring, extractive summaries and an extractive cited report — same input,
same output, no network.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from research.pipeline.parsing import is_russian


def _words(text: str) -> list[str]:
    return text.split()


_RUSSIAN_STOP_WORDS = frozenset(
    _words(
        """
    а без более бы был была были было быть в вам вас весь во вот все всего всех вы где да даже
    для до его ее ей ему если есть еще же за здесь и из или им их к как какая какие каким каких
    какой ко когда кто ли либо между меня мне много может можно мой мы на над нам нас не него нее
    нет ни них но ну о об обо однако он она они оно от очень по под после при про раз с свой себя
    со так также такое такой там те тем то того тоже той только том тот ту тут ты у уже хотя чего
    чем через что чтобы эта эти это этого этой этом этот эту я который которая которые которых
    почему зачем каков какова каковы ним ней нем расскажи расскажите объясни объясните опиши опишите
    поясни пожалуйста числе
        """
    )
)
_ENGLISH_STOP_WORDS = frozenset(
    _words(
        """
    a about above after again all also am an and any are as at be been before being below between
    both but by can could did do does doing down during each few for from further had has have
    having he her here hers him his how i if in into is it its itself just me more most my no nor
    not now of off on once only or other our out over own same she should so some such than that
    the their them then there these they this those through to too under until up very was we
    were what when where which while who whom why will with would you your describe explain tell
    please etc via vs
        """
    )
)
_WORD = re.compile(r"[^\W_]+")
_RUSSIAN_ENDINGS = sorted(
    _words(
        """
    ами ями ыми ими ого его ому ему ется ются ться ают яют уют ют ах ях ам ям ов ев ей ом ем ой ою
    ую юю ая яя ое ее ые ие ый ий ых их ым им ся сь а я о е ы и у ю ь й
        """
    ),
    key=len,
    reverse=True,
)
_MIN_STEM = 3


def tokenize(text: str) -> list[str]:
    """Lower-cased, lightly stemmed word tokens without stop words (Russian and English)."""
    words = _WORD.findall((text or "").lower().replace("ё", "е"))
    return [_stem(word) for word in words if _is_content_word(word)]


def _is_content_word(word: str) -> bool:
    if len(word) == 1 and not word.isdigit():
        return False
    return word not in _RUSSIAN_STOP_WORDS and word not in _ENGLISH_STOP_WORDS


def _stem(word: str) -> str:
    if re.fullmatch(r"[а-я]+", word):
        return _stem_russian(word)
    if re.fullmatch(r"[a-z]+", word):
        return _stem_english(word)
    return word


def _stem_russian(word: str) -> str:
    for ending in _RUSSIAN_ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= _MIN_STEM:
            word = word[: -len(ending)]
            break
    # "технология" → "технологи" but "технологий" → "технолог": drop the soft tail too.
    if word[-1] in "иьй" and len(word) > _MIN_STEM:
        word = word[:-1]
    return word


def _stem_english(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and len(word) > 3 and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


class BM25:
    """Okapi BM25 over tokenised documents, with an idf that never goes negative."""

    def __init__(self, documents: list[list[str]], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self.frequencies = [Counter(document) for document in documents]
        self.lengths = [len(document) for document in documents]
        self.average_length = sum(self.lengths) / len(documents) if documents else 0.0
        counts = Counter(term for frequency in self.frequencies for term in frequency)
        total = len(documents)
        self.idf = {term: math.log(1 + (total - df + 0.5) / (df + 0.5)) for term, df in counts.items()}

    def scores(self, query_tokens: list[str]) -> list[float]:
        return [self._score(index, query_tokens) for index in range(len(self.frequencies))]

    def _score(self, index: int, query_tokens: list[str]) -> float:
        frequency = self.frequencies[index]
        relative_length = self.lengths[index] / self.average_length if self.average_length else 0.0
        norm = self.k1 * (1 - self.b + self.b * relative_length)
        total = 0.0
        for term in query_tokens:
            tf = frequency.get(term, 0)
            if tf:
                total += self.idf[term] * tf * (self.k1 + 1) / (tf + norm)
        return total


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
    pattern = _TERM_OR_WORD if is_russian(text) else _WORD
    kept = [match.group(0) for match in pattern.finditer(text) if tokenize(match.group(0))]
    words = " ".join(kept)
    return words if len(words.split()) <= len(text.split()) - 2 else ""


def _distinct(queries: list[str]) -> list[str]:
    """Queries with content words, dropping repeats that differ only in case or punctuation."""
    seen: set[tuple[str, ...]] = set()
    kept = []
    for query in queries:
        key = tuple(_WORD.findall(query.casefold().replace("ё", "е")))
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
    _words(
        """
    e.g i.e etc vs mr mrs ms dr prof fig no al approx inc ltd jr sr st
    т.е т.д т.п т.к др г гг им см рис стр тыс млн млрд руб ок ср напр проф
        """
    )
)
_POSITION_BONUS = 0.25


def extractive_summary(text: str, question: str, max_sentences: int = 5) -> str:
    """The sentences of `text` most about `question`, in their original order."""
    sentences = _sentences_in(text)
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


def _substitute(text: str, rules: tuple[tuple[re.Pattern[str], str], ...]) -> str:
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text


def _plain_line(line: str) -> str:
    if re.match(r"\s*(?:#{1,6}\s|\||[-=*_]{3,}\s*$)", line):
        return ""  # headings, table rows and rules are not sentences
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


def _section_body(
    question: str, title: str, texts: list[tuple[int, str]], known: set[int], russian: bool
) -> str:
    paragraphs = []
    for number, text in texts:
        summary = extractive_summary(text, f"{question} {title}", _SECTION_SENTENCES)
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
            f"Отчёт охватывает {len(titles)} {noun} исследования{': ' + listed if listed else ''}. "
            "Он составлен из дословных выдержек без обобщения, поэтому выводы стоит сверить с источниками."
        )
    noun = "direction" if len(titles) == 1 else "directions"
    return (
        f"The report covers {len(titles)} research {noun}{': ' + listed if listed else ''}. "
        "It quotes the sources verbatim without synthesis, so check conclusions against them."
    )


def _source_list(sources: list[tuple[int, str, str]]) -> str:
    lines = {}
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
