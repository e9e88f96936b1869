"""Status lines for the optional services before the web: the vision model and the domain-data providers.

Run with the other checks (`mindsearch/status.py`, cached a minute). Open-Meteo, Nominatim,
TheSportsDB and OSRM are asked for real (under their global limits); the vision model only
through the endpoint's model list (a picture would cost a vision call per minute); Alpha Vantage
only without its key (the free key has 25 requests a day, which a status page would spend).
"""

from __future__ import annotations

from urllib.parse import urljoin

import httpx
from django.conf import settings
from django.utils.translation import gettext as _

from mindsearch.clients import alphavantage, llm, nominatim, openmeteo, osrm, thesportsdb
from mindsearch.status import ERROR, OFF, OK, WARN, Check


async def check_vision(client: httpx.AsyncClient) -> Check:
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
    headers = {"Authorization": f"Bearer {settings.AITUNNEL_API_KEY}"} if settings.AITUNNEL_API_KEY else {}
    url = urljoin(settings.AITUNNEL_BASE_URL.rstrip("/") + "/", "models")
    try:
        response = await client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        return Check(
            name, ERROR, _("Not reachable"), f"{settings.AITUNNEL_BASE_URL}: {exc or type(exc).__name__}"
        )
    try:
        listed = (
            {item.get("id") for item in response.json().get("data", [])}
            if response.status_code == 200
            else set()
        )
    except (ValueError, AttributeError):
        listed = set()
    if listed and settings.VISION_MODEL not in listed:
        return Check(name, WARN, _("Model %s is not listed by the endpoint") % settings.VISION_MODEL)
    return Check(name, OK, settings.VISION_MODEL, settings.AITUNNEL_BASE_URL)


async def check_open_meteo() -> Check:
    name = _("Weather data (Open-Meteo)")
    if not openmeteo.is_configured():
        return Check(
            name,
            OFF,
            _("Not configured"),
            _(
                "Set OPEN_METEO_URL and OPEN_METEO_GEOCODING_URL; weather questions use the web alone "
                "until then."
            ),
        )
    try:
        place = await openmeteo.geocode("Berlin", language="en", user=None)
        if place is None:
            return Check(
                name, WARN, _("The geocoding API found no Berlin"), settings.OPEN_METEO_GEOCODING_URL
            )
        await openmeteo.forecast(place, user=None, days=1)
    except openmeteo.OpenMeteoError as exc:
        return Check(name, ERROR, _("Not working"), str(exc))
    limit = _("%(limit)g requests a minute") % {"limit": settings.LIMIT_OPEN_METEO_RPM}
    return Check(name, OK, limit, f"{settings.OPEN_METEO_URL} · {settings.OPEN_METEO_GEOCODING_URL}")


async def check_nominatim() -> Check:
    name = _("Place data (OpenStreetMap Nominatim)")
    if not nominatim.is_configured():
        return Check(
            name,
            OFF,
            _("Not configured"),
            _("Set NOMINATIM_URL; questions about places use the web alone until then."),
        )
    try:
        place = await nominatim.search("Berlin", language="en", user=None)
    except nominatim.NominatimError as exc:
        return Check(name, ERROR, _("Not working"), str(exc))
    if place is None:
        return Check(name, WARN, _("The search found no Berlin"), settings.NOMINATIM_URL)
    limit = _("%(limit)g requests a second") % {"limit": settings.LIMIT_NOMINATIM_RPS}
    return Check(name, OK, limit, settings.NOMINATIM_URL)


async def check_alpha_vantage() -> Check:
    name = _("Finance data (Alpha Vantage)")
    if not alphavantage.is_configured():
        return Check(
            name,
            OFF,
            _("Not configured"),
            _(
                "Set ALPHA_VANTAGE_API_KEY (a free key at alphavantage.co); finance questions use the web "
                "alone until then."
            ),
        )
    try:
        await alphavantage.reachable()
    except alphavantage.AlphaVantageError as exc:
        return Check(name, ERROR, _("Not working"), str(exc))
    limit = _("%(limit)g requests a minute") % {"limit": settings.LIMIT_ALPHA_VANTAGE_RPM}
    return Check(
        name,
        OK,
        limit,
        _("%(url)s (reachable; the key is checked by the first question, not spent here)")
        % {"url": settings.ALPHA_VANTAGE_URL},
    )


async def check_thesportsdb() -> Check:
    name = _("Sports data (TheSportsDB)")
    if not thesportsdb.is_configured():
        return Check(
            name,
            OFF,
            _("Not configured"),
            _("Set THESPORTSDB_URL; sports questions use the web alone until then."),
        )
    try:
        teams = await thesportsdb.search_teams("Arsenal", user=None)
    except thesportsdb.SportsDBError as exc:
        return Check(name, ERROR, _("Not working"), str(exc))
    if not teams:
        return Check(name, WARN, _("The search found no Arsenal"), settings.THESPORTSDB_URL)
    limit = _("%(limit)g requests a minute") % {"limit": settings.LIMIT_THESPORTSDB_RPM}
    return Check(name, OK, limit, settings.THESPORTSDB_URL)


async def check_osrm() -> Check:
    name = _("Route data (OSRM)")
    if not osrm.is_configured():
        return Check(
            name,
            OFF,
            _("Not configured"),
            _(
                "Set OSRM_URL (and NOMINATIM_URL for the places); route questions use the web alone "
                "until then."
            ),
        )
    try:  # two points in central Berlin, as OSRM's own documentation asks
        await osrm.route(osrm.Point(52.517037, 13.388860), osrm.Point(52.529407, 13.397634), user=None)
    except osrm.OsrmError as exc:
        return Check(name, ERROR, _("Not working"), str(exc))
    if not nominatim.is_configured():
        return Check(
            name, WARN, _("OSRM works, but NOMINATIM_URL is empty: no place can be found"), settings.OSRM_URL
        )
    limit = _("%(limit)g requests a second") % {"limit": settings.LIMIT_OSRM_RPS}
    return Check(name, OK, limit, f"{settings.OSRM_URL} ({settings.OSRM_PROFILE})")


async def service_checks() -> list[Check]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(settings.STATUS_CHECK_TIMEOUT)) as client:
        return [
            await check_vision(client),
            await check_open_meteo(),
            await check_nominatim(),
            await check_alpha_vantage(),
            await check_thesportsdb(),
            await check_osrm(),
        ]
