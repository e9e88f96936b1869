"""Status lines beside the services': what the configured LLM can do, the vision model and the
domain-data providers.

Run with the other checks (`mindsearch/status.py`, cached a minute). Open-Meteo, Nominatim,
TheSportsDB and OSRM are asked for real (under their global limits); the vision model only
through the endpoint's model list (a picture would cost a vision call per minute); Alpha Vantage
only without its key (the free key has 25 requests a day, which a status page would spend).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from django.conf import settings
from django.utils.functional import Promise as StrPromise
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from mindsearch.clients import (
    alphavantage,
    arxiv,
    crossref,
    llm,
    nominatim,
    openalex,
    openmeteo,
    osrm,
    probe,
    pubmed,
    scholarly,
    thesportsdb,
)
from mindsearch.status_check import ERROR, OFF, OK, WARN, Check


def _context_line(profile: llm.ModelProfile) -> str:
    if profile.context_tokens is None:
        return _(
            "context window unknown: set AITUNNEL_CONTEXT_TOKENS (Ollama cuts longer prompts silently at "
            "its num_ctx)"
        )
    where = {
        "setting": _("from AITUNNEL_CONTEXT_TOKENS"),
        "server": _("as the server reports it"),
        "learned": _("learned from the endpoint's refusal of a longer prompt"),
    }.get(profile.context_source, profile.context_source)
    window = {"tokens": profile.context_tokens, "where": where}
    return _("context window %(tokens)s tokens, %(where)s") % window


def _streaming_line(streaming: bool | None) -> str:
    if streaming is None:
        return _("streaming not seen yet")
    if streaming:
        return _("streams its answers")
    return _("does not stream: a report appears when it is finished")


async def check_abilities() -> Check:
    """What the LLM client knows of the model (`llm.profile()`): its context window and where
    that came from, whether it reasons, whether it streamed, the parameters it refused. Nothing
    that costs tokens is asked (the server's own /props or /models at most)."""
    name = _("LLM abilities")
    if not llm.is_configured():
        return Check(name, OFF, _("Not configured"))
    profile = await llm.profile()
    reasoning = _("a reasoning model: its reasoning is kept out of the answers") if profile.reasoning else ""
    lines = (_context_line(profile), reasoning, _streaming_line(profile.streaming))
    refused = (
        _("parameters the endpoint refused, now left out or renamed: %s") % ", ".join(profile.refused)
        if profile.refused
        else _("no parameter refused so far")
    )
    state = OK if profile.context_tokens else WARN
    return Check(name, state, "; ".join(line for line in lines if line), f"{profile.model} — {refused}")


async def check_vision() -> Check:
    name = _("Vision model (questions with a picture)")
    if not settings.VISION_MODEL:
        return Check(
            name,
            OFF,
            _("Not configured"),
            _("Set VISION_MODEL to a vision-capable model; until then a picture is kept and shown only."),
        )
    if not llm.is_configured():
        return Check(name, ERROR, _("VISION_MODEL is set, but no LLM endpoint is configured"))
    try:
        answer = await llm.list_models(settings.STATUS_CHECK_TIMEOUT)
    except probe.Unreachable as exc:
        return Check(name, ERROR, _("Not reachable"), f"{settings.AITUNNEL_BASE_URL}: {exc}")
    if answer.models and settings.VISION_MODEL not in answer.models:
        return Check(name, WARN, _("Model %s is not listed by the endpoint") % settings.VISION_MODEL)
    return Check(name, OK, settings.VISION_MODEL, settings.AITUNNEL_BASE_URL)


class Provider(NamedTuple):
    """A domain-data provider's status line: off with the `hint` when it is not configured, an
    error with the client's message when the `probe` fails with the client's `error`, else the
    probe's own line (given the line's name)."""

    name: StrPromise
    configured: Callable[[], bool]
    hint: StrPromise
    error: type[Exception]
    probe: Callable[[str], Awaitable[Check]]

    async def check(self) -> Check:
        name = str(self.name)
        if not self.configured():
            return Check(name, OFF, _("Not configured"), str(self.hint))
        try:
            return await self.probe(name)
        except self.error as exc:
            return Check(name, ERROR, _("Not working"), str(exc))


def _per_minute(limit: float) -> str:
    return _("%(limit)g requests a minute") % {"limit": limit}


def _per_second(limit: float) -> str:
    return _("%(limit)g requests a second") % {"limit": limit}


async def _weather(name: str) -> Check:
    place = await openmeteo.geocode("Berlin", language="en", user=None)
    if place is None:
        return Check(name, WARN, _("The geocoding API found no Berlin"), settings.OPEN_METEO_GEOCODING_URL)
    await openmeteo.forecast(place, user=None, days=1)
    urls = f"{settings.OPEN_METEO_URL} · {settings.OPEN_METEO_GEOCODING_URL}"
    return Check(name, OK, _per_minute(settings.LIMIT_OPEN_METEO_RPM), urls)


async def _places(name: str) -> Check:
    if await nominatim.search("Berlin", language="en", user=None) is None:
        return Check(name, WARN, _("The search found no Berlin"), settings.NOMINATIM_URL)
    return Check(name, OK, _per_second(settings.LIMIT_NOMINATIM_RPS), settings.NOMINATIM_URL)


async def _finance(name: str) -> Check:
    await alphavantage.reachable()
    detail = _("%(url)s (reachable; the key is checked by the first question, not spent here)") % {
        "url": settings.ALPHA_VANTAGE_URL
    }
    return Check(name, OK, _per_minute(settings.LIMIT_ALPHA_VANTAGE_RPM), detail)


async def _sports(name: str) -> Check:
    if not await thesportsdb.search_teams("Arsenal", user=None):
        return Check(name, WARN, _("The search found no Arsenal"), settings.THESPORTSDB_URL)
    return Check(name, OK, _per_minute(settings.LIMIT_THESPORTSDB_RPM), settings.THESPORTSDB_URL)


async def _routes(name: str) -> Check:
    # two points in central Berlin, as OSRM's own documentation asks
    await osrm.route(osrm.Point(52.517037, 13.388860), osrm.Point(52.529407, 13.397634), user=None)
    if not nominatim.is_configured():
        empty = _("OSRM works, but NOMINATIM_URL is empty: no place can be found")
        return Check(name, WARN, empty, settings.OSRM_URL)
    detail = f"{settings.OSRM_URL} ({settings.OSRM_PROFILE})"
    return Check(name, OK, _per_second(settings.LIMIT_OSRM_RPS), detail)


PROVIDERS = (
    Provider(
        gettext_lazy("Weather data (Open-Meteo)"),
        openmeteo.is_configured,
        gettext_lazy(
            "Set OPEN_METEO_URL and OPEN_METEO_GEOCODING_URL; weather questions use the web alone until then."
        ),
        openmeteo.OpenMeteoError,
        _weather,
    ),
    Provider(
        gettext_lazy("Place data (OpenStreetMap Nominatim)"),
        nominatim.is_configured,
        gettext_lazy("Set NOMINATIM_URL; questions about places use the web alone until then."),
        nominatim.NominatimError,
        _places,
    ),
    Provider(
        gettext_lazy("Finance data (Alpha Vantage)"),
        alphavantage.is_configured,
        gettext_lazy(
            "Set ALPHA_VANTAGE_API_KEY (a free key at alphavantage.co); finance questions use the web "
            "alone until then."
        ),
        alphavantage.AlphaVantageError,
        _finance,
    ),
    Provider(
        gettext_lazy("Sports data (TheSportsDB)"),
        thesportsdb.is_configured,
        gettext_lazy("Set THESPORTSDB_URL; sports questions use the web alone until then."),
        thesportsdb.SportsDBError,
        _sports,
    ),
    Provider(
        gettext_lazy("Route data (OSRM)"),
        osrm.is_configured,
        gettext_lazy(
            "Set OSRM_URL (and NOMINATIM_URL for the places); route questions use the web alone until then."
        ),
        osrm.OsrmError,
        _routes,
    ),
)


# --- Papers: the scholarly indexes (research/pipeline/papers.py), each asked one real search -----


def _paper_probe(
    search: Callable[..., Awaitable[list]], url: str, limit: str
) -> Callable[[str], Awaitable[Check]]:
    async def probe(name: str) -> Check:
        if not await search("photosynthesis", limit=1, user=None):
            return Check(name, WARN, _("A search for “photosynthesis” found nothing"), url)
        return Check(
            name, OK, limit, url + (" · " + settings.SCHOLARLY_MAILTO if settings.SCHOLARLY_MAILTO else "")
        )

    return probe


def _paper_index(label: StrPromise, module: Any, url_setting: str, limit: str) -> Provider:
    hint: Any = format_lazy(
        gettext_lazy("Set {}; the Papers source does without this index until then."), url_setting
    )
    url = getattr(settings, url_setting)
    return Provider(
        label, module.is_configured, hint, scholarly.ScholarlyError, _paper_probe(module.search, url, limit)
    )


def paper_indexes() -> tuple[Provider, ...]:
    return (
        _paper_index(
            gettext_lazy("Papers: OpenAlex"),
            openalex,
            "OPENALEX_URL",
            _per_second(settings.LIMIT_OPENALEX_RPS),
        ),
        _paper_index(
            gettext_lazy("Papers: arXiv"), arxiv, "ARXIV_URL", _per_minute(settings.LIMIT_ARXIV_RPM)
        ),
        _paper_index(
            gettext_lazy("Papers: PubMed (E-utilities)"),
            pubmed,
            "PUBMED_URL",
            _per_second(settings.LIMIT_PUBMED_RPS),
        ),
        _paper_index(
            gettext_lazy("Papers: Crossref"),
            crossref,
            "CROSSREF_URL",
            _per_second(settings.LIMIT_CROSSREF_RPS),
        ),
    )


async def service_checks() -> list[Check]:
    checks = [await check_vision()] + [await provider.check() for provider in PROVIDERS]
    return checks + [await index.check() for index in paper_indexes()]
