"""Words for matching: tokens, light stemming, stop words and BM25 (Russian and English).

The one place text becomes comparable terms: the extractive engine (`extractive.py`) scores and
summarises with it, passages are ranked with it (`passages.py`), and the citation check, the
diversity of sources, deep mode's novelty and the follow-ups' coverage compare texts by its
tokens. No model, no network: same text, same tokens.
"""

from __future__ import annotations

import math
import re
from collections import Counter


def words(text: str) -> list[str]:
    return text.split()


_RUSSIAN_STOP_WORDS = frozenset(
    words(
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
    words(
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
WORD = re.compile(r"[^\W_]+")
_RUSSIAN_ENDINGS = sorted(
    words(
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
    words = WORD.findall((text or "").lower().replace("ё", "е"))
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
