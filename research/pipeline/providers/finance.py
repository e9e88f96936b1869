"""Finance: Alpha Vantage's exchange rate of a currency pair the question names, else a company's
stock quote and facts (its name → its ticker)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils.translation import gettext_noop

from mindsearch.clients import alphavantage
from research.models import Topic
from research.pipeline.context import RunContext
from research.pipeline.providers.common import STAGE, cached, fetched, language_of, publish, web_alone
from research.pipeline.question_domain import currency_pair, name_candidates

DOMAIN = Topic.Domain.FINANCE
NOT_CONFIGURED = gettext_noop(
    "Finance data is not configured (ALPHA_VANTAGE_API_KEY is empty): the topic goes on with the web alone."
)
# Why a topic gets no data from this provider, each a whole sentence for the translators.
NO_QUOTE = gettext_noop("Alpha Vantage has no quote for %(symbol)s: the topic goes on with the web alone.")
NO_COMPANY = gettext_noop(
    "Alpha Vantage knows no company named in the question: the topic goes on with the web alone."
)
ALPHA_VANTAGE_FAILED = gettext_noop("Alpha Vantage failed (%(error)s): the topic goes on with the web alone.")


def fetch(ctx: RunContext) -> None:
    """The exchange rate of a currency pair the question names, else a company's stock quote; where
    Alpha Vantage fails, either way, the topic goes on with the web alone."""
    topic = ctx.topic
    language = language_of(topic)
    pair = currency_pair(topic.question)
    try:
        if pair is not None:
            _exchange_rate(ctx, pair, language)
        else:
            _stock_quote(ctx, language)
    except alphavantage.AlphaVantageError as exc:
        web_alone(ctx, ALPHA_VANTAGE_FAILED, error=str(exc))


def _stock_quote(ctx: RunContext, language: str) -> None:
    ctx.emit(STAGE, gettext_noop("Looking the company up at Alpha Vantage"), args={}, done=0, total=1)
    url = settings.ALPHA_VANTAGE_URL
    match = None
    for name in name_candidates(ctx.topic.question, ctx.image_labels):
        found = cached(
            ctx,
            ("alpha-vantage search", url, name.lower()),
            lambda name=name: {"matches": async_to_sync(alphavantage.search)(name, user=ctx.owner_id)},
        )
        if found["matches"]:
            match = found["matches"][0]
            break
    if match is None:
        web_alone(ctx, NO_COMPANY)
        return
    symbol = match["symbol"]
    data = cached(ctx, ("alpha-vantage quote", url, symbol), lambda: _quote_and_overview(ctx, symbol))
    if not data["quote"]:
        web_alone(ctx, NO_QUOTE, symbol=f"{symbol} ({match['name']})")
        return
    fetched_at = datetime.fromisoformat(data["_fetched_at"])
    company = (data["overview"] or {}).get("Name") or match["name"] or symbol
    publish(
        ctx,
        fetched_at,
        "alpha-vantage",
        url=alphavantage.query_url("GLOBAL_QUOTE", symbol=symbol),
        text=finance_markdown(match, data["quote"], data["overview"], fetched_at, language),
        ru=f"Alpha Vantage: котировка {company} ({symbol})",
        en=f"Alpha Vantage: {company} ({symbol}) stock quote",
        message=gettext_noop("%(company)s (%(symbol)s) from Alpha Vantage, fetched %(time)s"),
        args={"company": company, "symbol": symbol},
    )


def _exchange_rate(ctx: RunContext, pair: tuple[str, str], language: str) -> None:
    source, target = pair
    ctx.emit(STAGE, gettext_noop("Fetching the exchange rate from Alpha Vantage"), args={}, done=0, total=1)
    data = cached(
        ctx,
        ("alpha-vantage fx", settings.ALPHA_VANTAGE_URL, source, target),
        lambda: {"rate": async_to_sync(alphavantage.exchange_rate)(source, target, user=ctx.owner_id)},
    )
    if not data["rate"]:
        web_alone(ctx, NO_QUOTE, symbol=f"{source}/{target}")
        return
    fetched_at = datetime.fromisoformat(data["_fetched_at"])
    publish(
        ctx,
        fetched_at,
        "alpha-vantage",
        url=alphavantage.query_url("CURRENCY_EXCHANGE_RATE", from_currency=source, to_currency=target),
        text=rate_markdown(data["rate"], fetched_at, language),
        ru=f"Alpha Vantage: курс {source} → {target}",
        en=f"Alpha Vantage: {source} → {target} exchange rate",
        message=gettext_noop("%(pair)s exchange rate from Alpha Vantage, fetched %(time)s"),
        args={"pair": f"{source} → {target}"},
    )


def rate_markdown(rate: dict[str, str], fetched_at: datetime, language: str) -> str:
    """An exchange rate as short lines: the rate, bid and ask, and when Alpha Vantage had it."""
    ru = language == "ru"
    source, target = rate.get("From_Currency Code", "?"), rate.get("To_Currency Code", "?")
    refreshed = f"{rate.get('Last Refreshed', '—')} {rate.get('Time Zone', '')}".strip()
    lines = [
        f"# {source} → {target}",
        "",
        (
            f"Источник: Alpha Vantage, данные получены {fetched(fetched_at)}; курс обновлён {refreshed}."
            if ru
            else f"Source: Alpha Vantage, fetched {fetched(fetched_at)}; rate last refreshed {refreshed}."
        ),
        "",
        f"- 1 {rate.get('From_Currency Name', source)} ({source}) = {rate.get('Exchange Rate')} "
        f"{rate.get('To_Currency Name', target)} ({target})",
    ]
    bid, ask = _number(rate.get("Bid Price")), _number(rate.get("Ask Price"))
    if bid and ask:
        lines.append(f"- {'Покупка / продажа' if ru else 'Bid / ask'}: {bid} / {ask}")
    return "\n".join(lines) + "\n"


def _quote_and_overview(ctx: RunContext, symbol: str) -> dict[str, Any]:
    """The quote, and the company facts when Alpha Vantage has them: a limit or an error on the
    second call leaves the quote (the facts are a complement, and the day's calls are few)."""
    quote = async_to_sync(alphavantage.quote)(symbol, user=ctx.owner_id)
    overview = None
    if quote:
        try:
            overview = async_to_sync(alphavantage.overview)(symbol, user=ctx.owner_id)
        except alphavantage.AlphaVantageError:
            overview = None
    return {"quote": quote, "overview": overview}


def _number(value: object) -> str:
    """Alpha Vantage's number as given, "" for its "None", "-" and empty strings."""
    text = str(value or "").strip()
    return "" if text in ("None", "-", "0000-00-00") else text


def _big(value: str) -> str:
    try:
        number = float(value)
    except ValueError:
        return value
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if abs(number) >= size:
            return f"{number / size:.2f} {unit}"
    return value


OVERVIEW_FIELDS = (
    ("Exchange", "Биржа", "Exchange", str),
    ("Sector", "Сектор", "Sector", str),
    ("Industry", "Отрасль", "Industry", str),
    ("MarketCapitalization", "Рыночная капитализация", "Market capitalisation", _big),
    ("PERatio", "P/E", "P/E", str),
    ("EPS", "Прибыль на акцию (EPS)", "Earnings per share (EPS)", str),
    ("DividendYield", "Дивидендная доходность", "Dividend yield", str),
    ("52WeekHigh", "Максимум за 52 недели", "52-week high", str),
    ("52WeekLow", "Минимум за 52 недели", "52-week low", str),
    ("AnalystTargetPrice", "Целевая цена аналитиков", "Analyst target price", str),
    ("LatestQuarter", "Последний отчётный квартал", "Latest quarter", str),
)


def finance_markdown(
    match: dict[str, str],
    quote: dict[str, str],
    overview: dict[str, str] | None,
    fetched_at: datetime,
    language: str,
) -> str:
    """The quote and company facts as short lines, each with its unit or date."""
    ru = language == "ru"
    overview = overview or {}
    symbol = quote.get("symbol") or match.get("symbol", "?")
    currency = overview.get("Currency") or match.get("currency") or ""
    day = _number(quote.get("latest trading day"))
    name = overview.get("Name") or match.get("name") or symbol
    lines = [
        f"# {name} ({symbol})",
        "",
        (
            f"Источник: Alpha Vantage, данные получены {fetched(fetched_at)}; последний торговый день "
            f"{day or '—'}; цены в {currency or 'валюте биржи'}."
            if ru
            else f"Source: Alpha Vantage, fetched {fetched(fetched_at)}; latest trading day {day or '—'}; "
            f"prices in {currency or 'the exchange currency'}."
        ),
        "",
    ]

    def line(ru_label: str, en_label: str, value: str) -> None:
        if value:
            lines.append(f"- {ru_label if ru else en_label}: {value}")

    price = _number(quote.get("price"))
    line("Цена", "Price", f"{price} {currency}".strip())
    change, percent, before = (_number(quote.get(k)) for k in ("change", "change percent", "previous close"))
    if change:
        since = f"с закрытия {before}" if ru else f"since the previous close {before}"
        line("Изменение", "Change", f"{change} ({percent or '?'}) {since}")
    low, high, opened = (_number(quote.get(k)) for k in ("low", "high", "open"))
    if low and high:
        opening = f" ({'открытие' if ru else 'open'} {opened})" if opened else ""
        line("Диапазон дня", "Day's range", f"{low} – {high}{opening}")
    line("Объём торгов", "Volume", _number(quote.get("volume")))
    for key, ru_label, en_label, show in OVERVIEW_FIELDS:
        value = _number(overview.get(key))
        line(ru_label, en_label, show(value) if value else "")
    return "\n".join(lines) + "\n"


def is_configured() -> bool:
    return alphavantage.is_configured()
