"""What a question is about, as plain knowledge (no stage, no database): its domain by keywords
(`classify_by_keywords`), whether it is small talk, what the domain changes in the search
(SearXNG categories, a hint added to the first query: `QUERY_HINTS`), and the names in it that a
domain-data provider is asked about — a place, a company, a team, a route's two ends; and its
subject (`question_subject`), which a deep round's sub-queries and a follow-up's search are tied
to (`merge_with_question`).

The route stage (`route.py`) decides the domain, with the LLM or these keywords; the domain stage
(`domain.py`) asks the provider; queries and search read the hints and categories. All of them
read the question through this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from research.models import Topic
from research.pipeline import extractive, timeparse
from research.pipeline.text import tokenize

Domain = Topic.Domain

# --- the domain of a question: keywords ------------------------------------------------------------


def _words(*phrases: str) -> tuple[re.Pattern[str], ...]:
    """Patterns matched at word starts; a stem ends where its phrase says (`\\b` or `\\w*`)."""
    return tuple(re.compile(rf"(?<!\w){phrase}") for phrase in phrases)


@dataclass(frozen=True)
class Terms:
    """A domain's words: a strong one decides alone; a weak one (a word with other common
    senses — "train" a model, an IP "address", network "traffic") only with another."""

    strong: tuple[re.Pattern[str], ...]
    weak: tuple[re.Pattern[str], ...] = ()


# Matched in lower-cased text with ё as е. Russian stems take their endings explicitly where a
# longer word would mean something else ("маршрутизация" is routing, not a route).
DOMAIN_TERMS: dict[str, Terms] = {
    Domain.WEATHER: Terms(
        strong=_words(
            r"погод\w*", r"прогноз\w* погод\w*", r"метеопрогноз\w*", r"осадк\w*", r"снегопад\w*",
            r"заморозк\w*", r"гололед\w*", r"штормов\w* предупрежд\w*", r"weather\b", r"snowfall\b",
            r"humid\w*", r"heatwaves?\b", r"rainfall\b", r"precipitation\b", r"storm warnings?\b",
        ),
        weak=_words(
            r"дожд\w*", r"температур\w*", r"ливн\w*", r"гроз[аыу]\b", r"ветер\b", r"ветр\w*", r"снег\w*",
            r"зонт(?:ик)?(?:а|у|ом)?\b", r"холодн\w*", r"жар[аук]\w*", r"forecasts?\b", r"temperatures?\b",
            r"rain(?:y|ing|s)?\b", r"storms?\b", r"snow(?:y|ing)?\b", r"wind(?:y)?\b", r"sunny\b",
            r"umbrella\b", r"coat\b", r"градус\w*", r"degrees\b",
        ),
    ),
    Domain.TRANSPORTATION: Terms(
        strong=_words(
            r"электричк\w*", r"авиабилет\w*", r"аэропорт\w*", r"метро\b", r"автобус\w*", r"трамва\w*",
            r"троллейбус\w*", r"такси\b", r"ржд\b", r"авиарейс\w*", r"flights\b", r"airports?\b",
            r"airlines?\b", r"timetables?\b", r"railways?\b", r"subway\b", r"commut\w*",
            r"train (?:tickets?|schedules?|stations?|times)\b", r"public transport\w*",
            r"bus (?:routes?|schedules?|stops?|tickets?|stations?)\b", r"маршрут\w* (?:от|из)\b",
            r"(?:route|directions|drive|driving|distance|how far) from\b", r"(?:сколько|как долго) ехать\b",
            r"расстояни\w* (?:от|между)\b", r"driving (?:time|distance)\b", r"travel time\b",
            r"время в пути\b", r"(?:доехать|добраться) (?:от|из) .{1,40} (?:до|в)\b",
        ),
        weak=_words(
            r"поезд\w*", r"вокзал\w*", r"рейс(?:ы|ов|а|ам)?\b", r"маршрут(?:ы|а|ов|у|ом|ах)?\b", r"пробк\w*",
            r"расписани\w*", r"билет\w*", r"задерж\w*", r"flight\b", r"trains?\b", r"buse?s?\b",
            r"trams?\b", r"metro\b", r"routes?\b", r"traffic\b", r"transit\b", r"schedules?\b",
            r"tickets?\b", r"delay(?:ed|s)?\b", r"cancell?ations?\b",
        ),
    ),
    Domain.FINANCE: Terms(
        strong=_words(
            r"котировк\w*", r"курс\w* (?:доллар|евро|рубл|юан|валют|биткоин)\w*", r"бирж\w*",
            r"инфляци\w*", r"ключев\w+ ставк\w*", r"дивиденд\w*", r"капитализаци\w*", r"облигаци\w*",
            r"биткоин\w*", r"криптовалют\w*", r"ipo\b", r"share prices?\b", r"stock prices?\b",
            r"stock market\b", r"nasdaq\b", r"nyse\b", r"s&p\b", r"market cap\w*", r"dividends?\b",
            r"interest rates?\b", r"mortgage rates?\b", r"bitcoin\b", r"exchange rates?\b", r"p/e\b",
            r"мосбирж\w*", r"(?:курс|цен|стоимост)\w* акци\w*", r"тикер\w*", r"ticker\b",
            r"stock quotes?\b",
        ),
        weak=_words(
            r"акци[яийею]\b", r"акциям\w*", r"выручк\w*", r"прибыл\w*", r"финанс\w*", r"ставк\w*",
            r"сто(?:ит|ят|имост\w*)\b", r"цен[аыу]\b", r"золот\w*", r"stocks?\b", r"shares\b",
            r"earnings\b", r"inflation\b", r"crypto\w*", r"revenue\b", r"bonds?\b", r"financ\w*",
            r"invest\w*", r"инвест\w*", r"quarterly\b", r"квартал\w*", r"prices?\b", r"gold\b", r"fed\b",
            r"mortgage\w*", r"rates?\b",
        ),
    ),
    Domain.SPORTS: Terms(
        strong=_words(
            r"чемпионат\w*", r"футбол\w*", r"хокке\w*", r"баскетбол\w*", r"волейбол\w*", r"теннис\w*",
            r"биатлон\w*", r"нхл\b", r"кхл\b", r"рпл\b", r"нба\b", r"nba\b", r"nhl\b", r"nfl\b", r"fifa\b",
            r"uefa\b", r"premier league\b", r"champions league\b", r"лиг\w* чемпионов\b",
            r"championships?\b", r"football\b", r"soccer\b", r"basketball\b", r"tennis\b", r"biathlon\b",
            r"world cup\b", r"кубк\w* мира\b", r"grand prix\b", r"standings\b", r"формул\w* 1\b",
            r"formula 1\b", r"олимпийск\w* игр\w*", r"olympic games\b", r"wimbledon\b", r"super bowl\b",
            r"stanley cup\b", r"tour de france\b", r"roland garros\b", r"ufc\b",
            r"play(?:s|ing)? next\b", r"next (?:game|match|fixture)(?:es|s)?\b", r"fixtures\b",
            r"kick-?off\b", r"когда (?:играет|играют|сыграет|сыграют)\b",
            r"(?:следующ|ближайш)\w+ (?:матч|игр)\w*",
        ),
        weak=_words(
            r"турнир(?:а|е|у|ом|ы|ов|ах|ам)?\b", r"матч(?:а|е|и|ей|ам|ах|у|ем)?\b", r"лиг[аиуе]\b",
            r"кубок\w*", r"сборн\w*", r"сч[её]т(?:ом|а)?\b", r"tournaments?\b", r"match(?:es)?\b",
            r"leagues?\b", r"olympic\w*", r"rosters?\b", r"scores?\b", r"rankings?\b", r"players?\b",
            r"игрок\w*", r"команд[аыу]\b", r"teams?\b", r"goals?\b", r"game\b", r"final\b", r"seeds?\b",
        ),
    ),
    Domain.TEMPORAL_CHANGE: Terms(
        strong=_words(
            r"по годам\b", r"за (?:последние )?(?:\d+ )?(?:годы|лет)\b", r"как (?:менял|изменял|изменил)\w*",
            r"over the (?:years|decades?)\b", r"year over year\b", r"year-on-year\b",
            r"how (?:has|have|did) .{0,60}(?:chang|evolv|grow|grew|declin|ris[ei])\w*", r"over time\b",
        ),
        weak=_words(
            r"динамик\w*", r"эволюци\w*", r"тенденци\w*", r"тренд\w*", r"history of\b", r"changed\b",
            r"trends?\b", r"evolution\b", r"timeline\b", r"изменени\w*", r"compare\w*", r"сравн\w*",
        ),
    ),
    Domain.LOCATION: Terms(
        strong=_words(
            r"как (?:добраться|доехать|дойти|пройти к)\b", r"на карте\b", r"directions to\b",
            r"near me\b", r"how (?:do i|to|can i) get (?:to|from)\b", r"opening hours\b",
            r"часы работы\b", r"где ближайш\w*",
        ),
        weak=_words(
            r"находится\b", r"адрес\w*", r"рядом с\b", r"поблизости\b", r"ближайш\w*", r"район\w*",
            r"address\b", r"located\b", r"nearby\b", r"closest\b", r"nearest\b", r"near\b",
            r"close to\b", r"map\b", r"district\b", r"museum\b", r"restaurants?\b", r"cafes?\b",
            r"coffee shops?\b", r"pharmac\w*", r"hotels?\b", r"музе\w*", r"галере\w*", r"ресторан\w*",
            r"кафе\b", r"аптек\w*", r"гостиниц\w*", r"отел\w*", r"банкомат\w*",
        ),
    ),
}  # fmt: skip
# Questions for live data are about now: a word of the near past or future ("tomorrow", "на
# выходных", "right now") is one more piece of weak evidence for the live domains.
NEAR_TIME = _words(
    r"сегодня\w*", r"завтра\w*", r"вчера\w*", r"послезавтра\b", r"сейчас\b", r"на выходны[хе]\b",
    r"на (?:этой|следующей) неделе\b", r"(?:утром|вечером|ночью)\b",
    r"(?:в|во|на) (?:понедельник|вторник|среду|четверг|пятницу|субботу|воскресенье)\b",
    r"today\b", r"tomorrow\b", r"tonight\b", r"yesterday\b", r"last night\b", r"right now\b",
    r"this (?:week|weekend|morning|afternoon|evening)\b", r"next (?:week|weekend|few days)\b",
    r"on (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
)  # fmt: skip
_LIVE = (Domain.WEATHER, Domain.TRANSPORTATION, Domain.FINANCE, Domain.SPORTS)
# Ties go to the more specific domain.
_DOMAIN_ORDER = (
    Domain.WEATHER,
    Domain.TRANSPORTATION,
    Domain.FINANCE,
    Domain.SPORTS,
    Domain.LOCATION,
    Domain.TEMPORAL_CHANGE,
)
STRONG, WEAK, DECIDES = 2, 1, 2


def classify_by_keywords(question: str, period: timeparse.Period | None = None) -> str:
    """The domain with strong evidence in the question, else "general" (and so no query hint).

    A strong term counts 2, a weak one 1, and a domain needs 2: "What hardware is needed to
    train a model" has one weak transport word and stays general; "train tickets to Kazan" or
    "trains … timetable" do not. A word of the near past or future counts once more for a live
    domain already suggested ("rain" + "this weekend"). A span of two or more years is strong
    evidence of change over time ("QS ranking 2015–2023").
    """
    text = _normal(question)
    counts = {domain: _evidence(DOMAIN_TERMS[domain], text) for domain in _DOMAIN_ORDER}
    if any(word.search(text) for word in NEAR_TIME):
        for domain in _LIVE:
            counts[domain] += WEAK if counts[domain] else 0
    if period is not None and len(period.years) >= 2:
        counts[Domain.TEMPORAL_CHANGE] += STRONG
    best = max(_DOMAIN_ORDER, key=lambda domain: counts[domain])
    return best if counts[best] >= DECIDES else Domain.GENERAL


def _evidence(terms: Terms, text: str) -> int:
    return STRONG * sum(1 for word in terms.strong if word.search(text)) + WEAK * sum(
        1 for word in terms.weak if word.search(text)
    )


def _normal(text: str) -> str:
    return " ".join((text or "").lower().replace("ё", "е").split())


# --- small talk ------------------------------------------------------------------------------------

_SMALL_TALK = re.compile(
    r"привет\w*|здравству\w*|добр\w+ (?:утро|день|вечер|ночи)|хай|салют|спасибо|благодар\w+|пока"
    r"|до свидания|как (?:у (?:тебя|вас) )?дела|как ты|как поживаешь|кто ты|ты кто|что ты умеешь"
    r"|что умеешь|ок|окей|hi|hello|hey|hiya|greetings|good (?:morning|afternoon|evening|night)"
    r"|thanks|thank you|bye|goodbye|how are you(?: doing)?|who are you|what can you do|ok|okay"
)
_FILLER = re.compile(
    r"большое|огромное|очень|тебе|вам|всем|еще|снова|дорогой|друг|бот|mindsearch|there|so much"
    r"|very much|a lot|again|friend|mate|bot|you|и|and"
)
_SMALL_TALK_TEXT = re.compile(rf"(?:(?:{_SMALL_TALK.pattern}|{_FILLER.pattern})(?:\s+|$))+")


def looks_like_small_talk(question: str) -> bool:
    """A message made only of greetings, thanks and pleasantries ("Привет! Как дела?")."""
    text = re.sub(r"[^\w\s&]", " ", _normal(question))
    text = " ".join(text.split())
    return bool(text) and _SMALL_TALK_TEXT.fullmatch(text + " ") is not None


# --- what the domain changes in the search ---------------------------------------------------------

_NEWS_DOMAINS = {Domain.FINANCE, Domain.SPORTS, Domain.TRANSPORTATION, Domain.WEATHER}
_SCIENCE = _words(
    "исследовани", "научн", "статья", "статьи", "учены", "клиническ", r"физик", r"биолог", r"хими",
    r"медицин", r"генет", r"research", r"papers?\b", r"stud(?:y|ies)\b", "scientific", r"arxiv",
    r"clinical", r"physics", r"biolog", r"chemi", r"genom", r"theorem", r"теорем",
)  # fmt: skip
_IT = _words(
    r"python", r"javascript", r"typescript", r"java\b", r"rust\b", r"golang", r"c\+\+", r"sql\b",
    r"api\b", r"linux", r"docker", r"kubernetes", r"github", r"framework", r"библиотек", r"программ",
    r"software", r"programming", r"код\b", r"code\b", r"compiler", r"компилятор", r"database",
    r"баз[аеы] данных", r"django", r"react\b", r"nginx", r"postgres",
)  # fmt: skip


def categories_for(domain: str, question: str, time_range: str = "") -> str:
    """SearXNG categories for the topic ("" = the instance's default, general)."""
    text = _normal(question)
    chosen = []
    if domain in _NEWS_DOMAINS or time_range in ("day", "week"):
        chosen.append("news")
    if domain == Domain.GENERAL and any(word.search(text) for word in _IT):
        chosen.append("it")
    if domain in (Domain.GENERAL, Domain.TEMPORAL_CHANGE) and any(word.search(text) for word in _SCIENCE):
        chosen.append("science")
    return ",".join([*chosen, "general"]) if chosen else ""


# What each domain adds to a sub-query's first search query in each language (ISE's
# generate_domain_specific_query).
QUERY_HINTS: dict[str, dict[str, str]] = {
    Domain.WEATHER: {"ru": "прогноз погоды", "en": "weather forecast"},
    Domain.TRANSPORTATION: {"ru": "расписание маршрут", "en": "schedule route"},
    Domain.FINANCE: {"ru": "котировки отчётность", "en": "stock price earnings"},
    Domain.SPORTS: {"ru": "статистика результаты составы", "en": "latest stats rankings team roster"},
    Domain.TEMPORAL_CHANGE: {"ru": "исторические данные по годам", "en": "historical data year over year"},
    Domain.LOCATION: {"ru": "адрес на карте", "en": "address map location"},
}


def enhance_queries(queries: list[str], domain: str, language: str) -> list[str]:
    """The domain's hint appended to the first query, unless it already says as much."""
    hint = QUERY_HINTS.get(domain, {}).get(language, "")
    if not hint or not queries:
        return list(queries)
    first = queries[0]
    hint_words = [word for word in hint.split() if word.lower() not in _normal(first)]
    if len(hint_words) < len(hint.split()) / 2:
        return list(queries)
    return [f"{first} {' '.join(hint_words)}", *queries[1:]]


# --- the names a provider is asked about -------------------------------------------------------------

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


# --- a currency pair ---------------------------------------------------------------------------------

CURRENCIES = (
    ("USD", r"доллар\w*|usd\b|dollars?\b"),
    ("EUR", r"евро\b|eur\b|euros?\b"),
    ("RUB", r"рубл\w*|rub\b|roubles?\b|rubles?\b"),
    ("CNY", r"юан\w*|cny\b|yuan\b|renminbi\b"),
    ("GBP", r"фунт\w* стерлинг\w*|gbp\b|pounds? sterling\b|british pounds?\b"),
    ("JPY", r"[ий]ен[аыу]?\b|jpy\b|yen\b"),
    ("BTC", r"биткоин\w*|btc\b|bitcoins?\b"),
)
_STOCKS = re.compile(
    r"(?<!\w)(?:акци|stock|shares?\b|тикер|ticker|котировк\w* компани|earnings|revenue|выручк|прибыл"
    r"|dividend|дивиденд|market cap|капитализац)"
)


def currency_pair(question: str) -> tuple[str, str] | None:
    """The currencies of an exchange-rate question, in the order asked ("курс евро к доллару" →
    EUR, USD); one alone is priced in roubles in a Russian question, else in dollars (in euros
    when it is the dollar). None for a question about stocks, or without a currency."""
    text = question.lower().replace("ё", "е")
    if _STOCKS.search(text):
        return None
    found = sorted(
        (match.start(), code)
        for code, pattern in CURRENCIES
        for match in [re.search(rf"(?<!\w)(?:{pattern})", text)]
        if match
    )
    codes = list(dict.fromkeys(code for _, code in found))
    if len(codes) >= 2:
        return codes[0], codes[1]
    if not codes:
        return None
    home = "RUB" if re.search(r"[а-я]", text) else "USD"
    if codes[0] == home:
        home = "USD" if home == "RUB" else "EUR"
    return codes[0], home


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


# --- what a question is about: its subject ------------------------------------------------------

SUBJECT_WORDS = 8
_CLAUSE_END = re.compile(r"[,;:?!.]|\s(?:и|а также|в том числе|включая|and|including|as well as)\s", re.I)


def question_subject(question: str) -> str:
    """What the question is about: its first clause without the request words, a few words long."""
    cleaned = (extractive.keyword_subqueries(question, limit=1) or [question])[0]
    subject = _CLAUSE_END.split(cleaned, maxsplit=1)[0].strip()
    subject = re.sub(r"^(?:the|a|an)\s+", "", subject, flags=re.IGNORECASE)
    return " ".join(subject.split()[:SUBJECT_WORDS])


def merge_with_question(text: str, question: str) -> str:
    """`text` (a deep round's proposal, a follow-up's question), with the question's subject added
    when `text` does not name it, so a bare name still searches the topic."""
    subject = question_subject(question)
    if not subject or set(tokenize(subject)) <= set(tokenize(text)):
        return text
    return f"{text} — {subject}"
