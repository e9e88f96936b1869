"""Stage 0: what kind of question this is, and whether it needs a search at all (seed 001).

The LLM sorts the question into one of the seed's seven domains and says whether a search is
needed; when it cannot, keywords decide the domain. The domain adds a hint to the search
queries and picks SearXNG's categories. A time phrase in the question becomes the topic's
`time_range` (unless the user chose one) and the period its private documents are filtered to.

Greetings and questions that need no search are answered here, in one short LLM call (or a
fixed reply without an LLM), and the topic is done: no plan, no search, no pages — unless the
owner has documents that match the question: then it is answered from them (`local_rag.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from mindsearch.clients.llm import LLMError, parse_json
from research.event_text import choice_phrase, phrase
from research.models import CacheEntry, Report, Topic
from research.pipeline import timeparse, vision
from research.pipeline.context import RunContext
from research.pipeline.llm import ask, load_prompt
from research.pipeline.parsing import is_russian
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.ROUTE
Domain = Topic.Domain
# The LLM's "no search needed" is trusted for short messages only: a long question put to a
# research tool wants research, whatever a classifier thinks.
MAX_WORDS_WITHOUT_SEARCH = 30
DIRECT_MAX_TOKENS = 400
_WINDOW_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}


@dataclass(frozen=True)
class Route:
    domain: str
    needs_search: bool
    by_llm: bool


def run(ctx: RunContext) -> Outcome:
    """Route the topic once; ANSWERED when it was answered directly and needs nothing more."""
    topic = ctx.topic
    if topic.domain:
        return Outcome.ANSWERED if answered_directly(topic) else Outcome.CONTINUE
    # Relative phrases are read on the day the question was asked, so a resumed run agrees.
    today = timezone.localdate(topic.created_at)
    period = timeparse.parse_period(topic.question, today)
    route = (
        Route(Domain.GENERAL, False, False)
        if looks_like_small_talk(topic.question)
        else _classify(ctx, period)
    )
    if not route.needs_search and _may_skip_search(topic, route):
        if not looks_like_small_talk(topic.question) and _answered_from_documents(ctx, route, period):
            return Outcome.ANSWERED
        markdown, model = _direct_answer(ctx)
        if markdown:
            _save_direct_answer(ctx, route, markdown, model)
            return Outcome.ANSWERED
    _save_route(topic, route, period, today)
    template, args = _describe(topic, route)
    ctx.emit(STAGE, template, args=args, done=1, total=1, data=_route_data(topic, route))
    return Outcome.CONTINUE


def classify(ctx: RunContext) -> Route:
    """The domain and whether a search is needed for `ctx.question` (a follow-up's too), read as
    the route stage reads a topic's question: small talk needs none; the LLM, or keywords."""
    if looks_like_small_talk(ctx.question):
        return Route(Domain.GENERAL, False, False)
    today = timezone.localdate(ctx.topic.created_at)
    return _classify(ctx, timeparse.parse_period(ctx.question, today))


def _answered_from_documents(ctx: RunContext, route: Route, period: timeparse.Period | None) -> bool:
    """The seed's Local RAG branch (`local_rag.py`): True when the owner's documents answered."""
    from research.pipeline import local_rag  # it imports private, which imports this module

    published = (period.start, period.end) if period is not None else None
    if not local_rag.run(ctx, published):
        return False
    ctx.topic.domain = route.domain
    ctx.topic.save(update_fields=["domain", "updated_at"])
    return True


def answered_directly(topic: Topic) -> bool:
    return Report.objects.filter(topic=topic).exists() and not topic.subqueries.exists()


# --- classification ---------------------------------------------------------------------------------


def _classify(ctx: RunContext, period: timeparse.Period | None) -> Route:
    fallback = Route(classify_by_keywords(ctx.question, period), True, False)
    if not ctx.llm_enabled:
        return fallback
    try:
        answer = async_to_sync(ask)(
            ctx,
            STAGE,
            load_prompt("route"),
            f'Запрос: "{ctx.asked}"' + vision.labels_block(ctx),
            kind=CacheEntry.Kind.SEARCH_QUERIES,
            max_tokens=60,
        )
        return parse_route(parse_json(answer), fallback)
    except LLMError as exc:
        ctx.warn(
            STAGE,
            gettext_noop("The LLM could not classify the question (%(error)s); classified by keywords."),
            args={"error": str(exc)},
        )
        return fallback


def parse_route(answer: object, fallback: Route) -> Route:
    """The LLM's {"domain": …, "needs_search": …}; what it left out or got wrong comes from keywords."""
    if not isinstance(answer, dict):
        return fallback
    domain = str(answer.get("domain", "")).strip().lower().replace("-", "_").replace(" ", "_")
    needs = answer.get("needs_search", True)
    if isinstance(needs, str):
        needs = needs.strip().lower() not in ("false", "no", "нет", "0")
    known = domain in Domain.values
    return Route(domain if known else fallback.domain, bool(needs), by_llm=known)


def _may_skip_search(topic: Topic, route: Route) -> bool:
    """Small talk never needs a search; a question only when the LLM said so and it is a short
    one about the web (the user's documents are searched whatever the LLM knows). A topic
    with a plan already (a copy researched again) is searched as planned."""
    if topic.subqueries.exists():
        return False
    if looks_like_small_talk(topic.question):
        return True
    return (
        route.by_llm
        and topic.sources == Topic.Sources.WEB
        and len(topic.question.split()) <= MAX_WORDS_WITHOUT_SEARCH
    )


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
    evidence of change over time (the seed's "QS ranking 2015–2023").
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


# --- direct answers --------------------------------------------------------------------------------


def _direct_answer(ctx: RunContext) -> tuple[str, str]:
    """(Markdown, model) of a short reply; ("", "") when only a search can answer."""
    if ctx.llm_enabled:
        try:
            text = async_to_sync(ask)(
                ctx,
                StageName.ANSWER,
                load_prompt("direct"),
                f"Сообщение пользователя: {ctx.asked}" + vision.labels_block(ctx),
                kind=CacheEntry.Kind.ANSWERS,
                max_tokens=DIRECT_MAX_TOKENS,
            )
        except LLMError as exc:
            ctx.warn(
                STAGE,
                gettext_noop("The LLM could not answer directly (%(error)s)."),
                args={"error": str(exc)},
            )
        else:
            if text.strip():
                return text.strip(), ctx.model
    if looks_like_small_talk(ctx.question):
        return _fixed_reply(ctx.question), ""
    return "", ""


def _fixed_reply(question: str) -> str:
    if is_russian(question):
        return (
            "Здравствуйте! Я MindSearch: задайте тему, и я найду источники в интернете и в ваших "
            "документах и напишу отчёт со ссылками на них."
        )
    return (
        "Hello! I am MindSearch: give me a topic and I will research it in web sources and your "
        "documents and write a report that cites them."
    )


def _save_direct_answer(ctx: RunContext, route: Route, markdown: str, model: str) -> None:
    topic = ctx.topic
    with transaction.atomic():
        Report.objects.get_or_create(
            topic=topic, defaults={"markdown": markdown, "sources": [], "model": model}
        )
        topic.domain = route.domain
        topic.save(update_fields=["domain", "updated_at"])
    ctx.emit(
        StageName.ANSWER,
        gettext_noop("Answered directly: this message needs no search"),
        args={},
        done=1,
        total=1,
    )


# --- what the route changes in the search --------------------------------------------------------


def _save_route(topic: Topic, route: Route, period: timeparse.Period | None, today: date) -> None:
    topic.domain = route.domain
    if period is not None and not topic.time_range:
        topic.time_range = period.time_range
    if period is not None:
        topic.period_start, topic.period_end = period.start, period.end
    elif topic.time_range:
        topic.period_start = today - timedelta(days=_WINDOW_DAYS[topic.time_range])
        topic.period_end = today
    topic.save(update_fields=["domain", "time_range", "period_start", "period_end", "updated_at"])


def _describe(topic: Topic, route: Route) -> tuple[str, dict]:
    """The route event's msgid and arguments; a whole sentence per case, for the translators."""
    args = {
        "domain": choice_phrase(Domain(topic.domain)),
        "how": phrase(gettext_noop("by the LLM") if route.by_llm else gettext_noop("by keywords")),
        "categories": categories_for(topic.domain, topic.question, topic.time_range) or "general",
    }
    if not topic.period_start:  # a time range always comes with its period (_save_route)
        return gettext_noop("Domain: %(domain)s (%(how)s); search categories: %(categories)s"), args
    args |= {"start": f"{topic.period_start:%Y-%m-%d}", "end": f"{topic.period_end:%Y-%m-%d}"}
    if not topic.time_range:
        return gettext_noop(
            "Domain: %(domain)s (%(how)s); search categories: %(categories)s; period %(start)s – %(end)s"
        ), args
    args["time_range"] = choice_phrase(Topic.TimeRange(topic.time_range))
    return gettext_noop(
        "Domain: %(domain)s (%(how)s); search categories: %(categories)s; period %(start)s – %(end)s; "
        "time range: %(time_range)s"
    ), args


def _route_data(topic: Topic, route: Route) -> dict:
    return {
        "domain": topic.domain,
        "by_llm": route.by_llm,
        "time_range": topic.time_range,
        "period": [str(topic.period_start), str(topic.period_end)] if topic.period_start else None,
    }


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


def period_of(topic: Topic) -> tuple[date | None, date | None] | None:
    """The date filter for the topic's private documents, or None when it has no period."""
    if topic.period_start is None and topic.period_end is None:
        return None
    return topic.period_start, topic.period_end
