"""Status lines for the services of seed 001: the vision model and the domain-data providers.

Run with the other checks (`mindsearch/status.py`, cached a minute). Open-Meteo is asked for
real (a geocoding search and a one-day forecast, under its global limit); the vision model only
through the endpoint's model list (a picture would cost a vision call per minute).
"""

from __future__ import annotations

from urllib.parse import urljoin

import httpx
from django.conf import settings
from django.utils.translation import gettext as _

from mindsearch.clients import llm, nominatim, openmeteo
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


async def service_checks() -> list[Check]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(settings.STATUS_CHECK_TIMEOUT)) as client:
        return [await check_vision(client), await check_open_meteo(), await check_nominatim()]
