"""What a question is about, as plain knowledge (no stage, no database): the names in it that a
domain-data provider is asked about — a place, a company, a team, a route's two ends.

The route stage (`route.py`) decides the domain; the domain stage (`domain.py`) asks the
provider; both read the question through this module.
"""

from __future__ import annotations

import re

# Place names: a capitalised word or two after a preposition ("weather in New York", "погода в
# Казани"), then any capitalised word that does not start the sentence, then the picture's labels.
_AFTER_PREPOSITION = re.compile(
    r"(?:^|\s)(?:in|at|for|near|around|в|во|на|для|около|возле|под|из)\s+"
    r"((?:[A-ZА-ЯЁ][\w'’.-]+)(?:[\s-](?:[A-ZА-ЯЁ][\w'’.-]+))?)"
)
_CAPITALISED = re.compile(r"(?<=[\w,;:]\s)([A-ZА-ЯЁ][\w'’-]{2,}(?:\s[A-ZА-ЯЁ][\w'’-]{2,})?)")
_RUSSIAN_ENDINGS = ("ами", "ях", "ом", "ой", "ем", "ах", "е", "у", "ы", "и", "а")
MAX_CANDIDATES = 3


def place_candidates(question: str, labels: list[str] | None = None) -> list[str]:
    """Up to MAX_CANDIDATES names to geocode, most likely first; a Russian name in an oblique
    case ("в Казани") is also tried as its stem (Open-Meteo matches 3+ letters fuzzily)."""
    found = [m.group(1).rstrip(".") for m in _AFTER_PREPOSITION.finditer(question)]
    found += [m.group(1) for m in _CAPITALISED.finditer(question)]
    found += [label for label in (labels or []) if label[:1].isupper()]
    names: list[str] = []
    for name in found:
        names.append(name)
        stem = russian_stem(name)
        if stem:
            names.append(stem)
    return list(dict.fromkeys(names))[:MAX_CANDIDATES]


def russian_stem(name: str) -> str:
    if not re.fullmatch(r"[А-ЯЁа-яё-]+", name) or len(name) < 5:
        return ""
    for ending in _RUSSIAN_ENDINGS:
        if name.endswith(ending):
            return name[: -len(ending)]
    return ""


# --- companies and teams: names for providers that know them in Latin letters ------------------

# Capitalised words that start questions rather than name anything.
_QUESTION_WORDS = frozenset(
    re.findall(
        r"\S+",
        "what when where which who whom whose why how is are was were will would do does did can could "
        "should the a an show tell give list compare please "
        "какой какая какое какие каков какова каковы сколько когда где как что кто почему зачем "
        "покажи расскажи скажи дай сравни во в на",
    )
)
_NAME = re.compile(r"\$?[A-ZА-ЯЁ][\w&'’.-]*(?:\s+[A-ZА-ЯЁ][\w&'’.-]*)*")
# A few names whose usual Latin spelling is not their letter-by-letter transliteration.
LATIN_NAMES = {
    "яндекс": "Yandex",
    "лукойл": "Lukoil",
    "норникель": "Nornickel",
    "цска": "CSKA",
    "ливерпуль": "Liverpool",
    "реал": "Real Madrid",
    "бавария": "Bayern",
    "ювентус": "Juventus",
    "манчестер юнайтед": "Manchester United",
    "манчестер сити": "Manchester City",
}
_TRANSLIT = dict(
    zip(
        "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
        re.findall(r"\S+", "a b v g d e e zh z i y k l m n o p r s t u f kh ts ch sh shch _ y _ e yu ya"),
        strict=True,
    )
)


def transliterate(text: str) -> str:
    """Russian letters in Latin ones ("Сбербанк" → "Sberbank"), each word capitalised as it was."""
    out = []
    for char in text:
        latin = _TRANSLIT.get(char.lower())
        if latin is None:
            out.append(char)
        elif latin != "_":
            out.append(latin.capitalize() if char.isupper() else latin)
    return "".join(out)


def name_candidates(question: str, labels: list[str] | None = None) -> list[str]:
    """Up to MAX_CANDIDATES names of companies or teams in Latin letters, most likely first: the
    capitalised names of the question (question words dropped; a ticker's "$" too), a Russian one
    in the nominative ("акции Сбербанка" → "Sberbank", "Спартака" → "Spartak"), then the picture's
    labels."""
    found = [m.group(0).lstrip("$") for m in _NAME.finditer(question)]
    found += [label for label in (labels or []) if label[:1].isupper()]
    names: list[str] = []
    for raw in found:
        words = raw.split()
        while words and words[0].lower().strip(".") in _QUESTION_WORDS:
            words = words[1:]
        name = " ".join(words).rstrip(".’'")
        if len(name) < 2:
            continue
        if not re.search(r"[А-ЯЁа-яё]", name):
            names.append(name)
            continue
        for form in (name, russian_stem(name)):
            if form and form.lower() in LATIN_NAMES:
                names.append(LATIN_NAMES[form.lower()])
                break
        else:
            names.append(transliterate(russian_stem(name) or name))
    return list(dict.fromkeys(names))[:MAX_CANDIDATES]


# --- a route's two ends ---------------------------------------------------------------------------

_STOP = (
    r"(?=\s+(?:by|on|via|with|tomorrow|today|tonight|this|next|now"
    r"|на|по|через|завтра|сегодня|за|сейчас)\b|[?.!,;:]|$)"
)
_ROUTE_ENDS = (
    re.compile(rf"\bfrom\s+(.+?)\s+to\s+(.+?){_STOP}", re.I),
    re.compile(rf"(?:^|\s)(?:от|из)\s+(.+?)\s+(?:до|в|во)\s+(.+?){_STOP}", re.I),
)
MAX_PLACE_WORDS = 4
# Russian oblique endings → the nominative to try after the word as written ("Москвы" → "Москва",
# "Твери" → "Тверь", "Петербурга" → "Петербург"); OpenStreetMap knows places by that form.
_NOMINATIVE = (
    ("ого", ("ий", "ое")),
    ("ой", ("ая",)),
    ("ы", ("а",)),
    ("и", ("ь", "я", "а")),
    ("а", ("",)),
    ("у", ("", "а")),
    ("е", ("а", "ь", "")),
)


def route_ends(question: str) -> tuple[str, str] | None:
    """The two places of "from X to Y" / "от X до Y" / "из X в Y", or None."""
    for pattern in _ROUTE_ENDS:
        match = pattern.search(question)
        if match:
            origin, destination = (" ".join(part.split()[:MAX_PLACE_WORDS]) for part in match.groups())
            if origin and destination:
                return origin, destination
    return None


def nominative_guesses(name: str) -> list[str]:
    """`name` as written, then up to two guesses at its Russian nominative."""
    words = name.split()
    last = words[-1] if words else ""
    guesses = [name]
    if re.fullmatch(r"[А-ЯЁа-яё-]{4,}", last):
        for ending, replacements in _NOMINATIVE:
            if last.endswith(ending):
                stem = last[: -len(ending)]
                guesses += [" ".join([*words[:-1], stem + r]) for r in replacements]
                break
    return list(dict.fromkeys(guesses))[:3]
