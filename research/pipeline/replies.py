"""Reading LLM answers: prefixed lines (sub-queries, search queries) and hit scores.

LLM output drifts from the format a prompt asks for — bullets, bold, re-cased prefixes,
reordered or shortened titles — so everything here is tolerant and never raises.
"""

from __future__ import annotations

import difflib
import math
import re

CRITERIA = ("relevance_to_question", "relevance_to_direction", "completeness", "accuracy", "structure")

_BULLET = re.compile(r"^\s*(?:(?:[-*•+>]|#{1,6}|\d{1,3}[.)])\s+)*")
_QUOTES = {'"': '"', "'": "'", "«": "»", "“": "”", "„": "“", "`": "`"}
_CYRILLIC = re.compile(r"[а-яё]", re.IGNORECASE)
_LATIN = re.compile(r"[a-z]", re.IGNORECASE)
# Russian queries routinely carry Latin terms ("Применение Mixture of Tokens в NLP задачах"),
# while English ones almost never carry Cyrillic, so a third of the letters is enough.
_RUSSIAN_SHARE = 0.3


def parse_prefixed_lines(text: str, prefix: str, limit: int | None = None) -> list[str]:
    """Contents of the lines starting with `prefix` ("ПОДЗАПРОС:"), de-duplicated, in order."""
    pattern = _prefix_pattern(prefix)
    found: list[str] = []
    seen: set[str] = set()
    for line in (text or "").splitlines():
        content = _prefixed_content(line, pattern)
        key = content.casefold()
        if content and key not in seen:
            seen.add(key)
            found.append(content)
    return found if limit is None else found[: max(limit, 0)]


def _prefix_pattern(prefix: str) -> re.Pattern[str]:
    word = re.escape(prefix.strip().rstrip(":：").strip())
    # The prefix must start the line (after bullets and emphasis), so "ЗАПРОС" never matches
    # inside "ПОДЗАПРОС"; an optional number ("ПОДЗАПРОС 2:") sits before the colon.
    return re.compile(rf"^[*_\s]*{word}(?:\s*№?\s*\d+)?[*_\s]*[:：](.*)$", re.IGNORECASE)


def _prefixed_content(line: str, pattern: re.Pattern[str]) -> str:
    match = pattern.match(_BULLET.sub("", line, count=1))
    if not match:
        return ""
    content = match.group(1).strip().strip("*_").strip()
    return " ".join(_unquote(content).split())


def _unquote(text: str) -> str:
    while len(text) >= 2 and _QUOTES.get(text[0]) == text[-1]:
        text = text[1:-1].strip()
    return text


def is_russian(text: str) -> bool:
    cyrillic = len(_CYRILLIC.findall(text or ""))
    latin = len(_LATIN.findall(text or ""))
    return cyrillic > 0 and cyrillic >= _RUSSIAN_SHARE * (cyrillic + latin)


# What a report quotes or links is not its own language: citations, URLs and Markdown links,
# code, and text in quotation marks (a Russian report quoting an English abstract is Russian).
_NOT_OWN_WORDS = re.compile(
    r"```[\s\S]*?```|`[^`\n]*`|\]\([^)\s]*\)|https?://\S+|www\.\S+|\[\d{1,3}\]"
    r"|«[^»\n]*»|“[^”\n]*”|„[^“”\n]*[“”]|\"[^\"\n]*\""
)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.M)
# Fewer letters than this say nothing about a language ("# CRISPR-Cas9").
_MIN_LETTERS = 20


def report_language(markdown: str) -> str | None:
    """ "ru" or "en": the language a report is written in, by script; None when too little of it
    is its own words to tell.

    The report's headings are its own words and never quoted, so they decide when they have
    enough letters: a Russian report may quote English abstracts sentence by sentence, name
    English terms and cite English titles and URLs, and is still Russian. Without such headings
    the rest decides, with quotations, links, citations and code left out. A Latin-script
    language other than English counts as "en": Russian and English are told apart by script.
    """
    own = _NOT_OWN_WORDS.sub(" ", markdown or "")
    headings = " ".join(_HEADING.findall(own))
    for text in (headings, _HEADING.sub(" ", own)):
        if _letters(text) >= _MIN_LETTERS:
            return "ru" if is_russian(text) else "en"
    return None


def language_share(markdown: str, language: str) -> float:
    """The share of the report's own letters (as `report_language` reads them) in `language`'s
    script: which of two reports in the wrong language is less wrong."""
    own = _NOT_OWN_WORDS.sub(" ", markdown or "")
    cyrillic, latin = len(_CYRILLIC.findall(own)), len(_LATIN.findall(own))
    if not cyrillic + latin:
        return 0.0
    return (cyrillic if language == "ru" else latin) / (cyrillic + latin)


def question_language(question: str) -> str:
    """ "ru" or "en", as `report_language` names them."""
    return "ru" if is_russian(question) else "en"


def _letters(text: str) -> int:
    return len(_CYRILLIC.findall(text)) + len(_LATIN.findall(text))


def language_of(text: str) -> str:
    """The language a reply to `text` is written in, named for a Russian prompt: the plan, the
    report and follow-ups answer in the question's language (the search queries stay Russian
    and English whatever it is)."""
    if is_russian(text):
        return "русский"
    if _LATIN.search(text or ""):
        return "английский (English)"
    return "язык запроса"


def split_by_language(queries: list[str]) -> tuple[list[str], list[str]]:
    """(russian, english), each in the original order."""
    russian = [query for query in queries if is_russian(query)]
    english = [query for query in queries if not is_russian(query)]
    return russian, english


def default_scores(value: float = 5.0) -> dict[str, float]:
    return dict.fromkeys(CRITERIA, float(value))


# --- hit scores ---------------------------------------------------------------------------

_TITLE_KEYS = ("заголовок", "title", "название", "name", "headline")
_TOTAL_KEYS = ("итоговый_рейтинг", "итог", "total", "overall", "score", "rating")
_CRITERION_KEYS = {
    "relevance_to_question": (
        "соответствие_запросу",
        "соответствие_исходному_запросу",
        "relevance_to_question",
        "query_relevance",
        "relevance_to_query",
        "question_relevance",
    ),
    "relevance_to_direction": (
        "соответствие_направлению",
        "соответствие_направлению_поиска",
        "relevance_to_direction",
        "direction_relevance",
    ),
    "completeness": ("полнота", "полнота_информации", "completeness"),
    "accuracy": ("точность", "accuracy"),
    "structure": ("структура", "читабельность_и_структура", "читабельность", "structure", "readability"),
}
_FUZZY_RATIO = 0.85
_MIN_PREFIX = 8
_ELLIPSIS = re.compile(r"(?:…|\.\.\.)\s*$")

# One answer object as (normalised title or "", was it cut with an ellipsis, its scores).
_Entry = tuple[str, bool, dict[str, float] | None]


def match_scores(titles: list[str], answer: object) -> list[dict[str, float] | None]:
    """Scores for each title in order, matched back from the LLM's JSON; None where skipped."""
    objects = _answer_objects(answer)
    entries = [_entry(obj) for obj in objects]
    wanted = [_normal_title(title) for title in titles]
    pairs = _match_titles(wanted, entries)
    if len(entries) == len(titles):
        _match_by_position(pairs, entries)
    return [entries[pairs[i]][2] if i in pairs else None for i in range(len(titles))]


def _answer_objects(answer: object) -> list[dict]:
    if isinstance(answer, list):
        return [item for item in answer if isinstance(item, dict)]
    if not isinstance(answer, dict):
        return []
    if _looks_scored(answer):
        return [answer]
    for value in answer.values():
        if isinstance(value, list) and any(isinstance(item, dict) for item in value):
            return [item for item in value if isinstance(item, dict)]
    # {"Title": {"полнота": 8, ...}, ...}: titles used as keys.
    return [{"title": key, **value} for key, value in answer.items() if isinstance(value, dict)]


def _looks_scored(obj: dict) -> bool:
    keys = {_normal_key(key) for key in obj}
    known = set(_TITLE_KEYS) | set(_TOTAL_KEYS) | {k for ks in _CRITERION_KEYS.values() for k in ks}
    return bool(keys & known)


def _normal_key(key: object) -> str:
    return re.sub(r"[\s\-]+", "_", str(key).strip().casefold())


def _entry(obj: dict) -> _Entry:
    fields = {_normal_key(key): value for key, value in obj.items()}
    title = next((str(fields[k]) for k in _TITLE_KEYS if fields.get(k) not in (None, "")), "")
    return _normal_title(title), bool(_ELLIPSIS.search(title.strip())), _scores(fields)


def _scores(fields: dict[str, object]) -> dict[str, float] | None:
    found = {name: _first_number(fields, keys) for name, keys in _CRITERION_KEYS.items()}
    present = [value for value in found.values() if value is not None]
    if not present:
        # Only a total given: it is the mean already, so it stands for every criterion.
        total = _first_number(fields, _TOTAL_KEYS)
        return None if total is None else default_scores(total)
    mean = sum(present) / len(present)
    return {name: mean if value is None else value for name, value in found.items()}


def _first_number(fields: dict[str, object], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        number = _score_value(fields.get(key))
        if number is not None:
            return number
    return None


def _score_value(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    number = float(value) if isinstance(value, int | float) else _number_in_text(str(value))
    if number is None or math.isnan(number):
        return None
    return min(max(number, 0.0), 10.0)


def _number_in_text(text: str) -> float | None:
    match = re.search(r"(-?\d+(?:[.,]\d+)?)(?:\s*(?:/|из|out of)\s*(\d+(?:[.,]\d+)?))?", text)
    if not match:
        return None
    number = float(match.group(1).replace(",", "."))
    scale = float(match.group(2).replace(",", ".")) if match.group(2) else 10.0
    return number * 10.0 / scale if scale else None


def _normal_title(title: str) -> str:
    text = _ELLIPSIS.sub("", title.strip()).casefold().replace("ё", "е")
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def _match_titles(wanted: list[str], entries: list[_Entry]) -> dict[int, int]:
    """title index → entry index; exact matches first, then truncated, then near-misses."""
    pairs: dict[int, int] = {}
    for similarity in (_exact, _truncated, _fuzzy):
        candidates = []
        for i, title in enumerate(wanted):
            for j, (name, cut, _scores) in enumerate(entries):
                quality = similarity(title, name, cut) if title and name else 0.0
                if quality > 0:
                    candidates.append((-quality, i, j))
        _assign(pairs, sorted(candidates))
    return pairs


def _assign(pairs: dict[int, int], candidates: list[tuple[float, int, int]]) -> None:
    used = set(pairs.values())
    for _quality, i, j in candidates:
        if i not in pairs and j not in used:
            pairs[i] = j
            used.add(j)


def _exact(title: str, name: str, cut: bool) -> float:
    return 1.0 if title == name else 0.0


def _truncated(title: str, name: str, cut: bool) -> float:
    shorter, longer = sorted((title, name), key=len)
    if len(shorter) >= _MIN_PREFIX and longer.startswith(shorter):
        return len(shorter) / len(longer)
    return 0.0


def _fuzzy(title: str, name: str, cut: bool) -> float:
    if cut and len(name) < _MIN_PREFIX:
        return 0.0
    if cut:
        title = title[: len(name)]
    ratio = difflib.SequenceMatcher(None, title, name).ratio()
    return ratio if ratio >= _FUZZY_RATIO else 0.0


def _match_by_position(pairs: dict[int, int], entries: list[_Entry]) -> None:
    used = set(pairs.values())
    for j, (name, _cut, _scores) in enumerate(entries):
        if not name and j not in pairs and j not in used:
            pairs[j] = j
