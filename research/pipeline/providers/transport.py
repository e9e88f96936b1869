"""Transport: OSRM's route between the two ends a question names (from … to …), each end found
through Nominatim (`places.find_osm`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils.translation import gettext_noop

from mindsearch.clients import nominatim, osrm
from research.models import Topic
from research.pipeline.context import RunContext
from research.pipeline.providers.common import STAGE, cached, fetched, language_of, publish, web_alone
from research.pipeline.providers.places import NOMINATIM_FAILED, find_osm
from research.pipeline.question_domain import nominative_guesses, route_ends

DOMAIN = Topic.Domain.TRANSPORTATION
NOT_CONFIGURED = gettext_noop(
    "Route data is not configured (OSRM_URL, and NOMINATIM_URL for the places, must be set): "
    "the topic goes on with the web alone."
)
# Why a topic gets no data from this provider, each a whole sentence for the translators.
NO_ROUTE_ASKED = gettext_noop(
    "Found no route in the question (from … to …): the topic goes on with the web alone."
)
NO_OSRM_ROUTE = gettext_noop(
    "OSRM found no route from %(origin)s to %(destination)s (%(error)s): "
    "the topic goes on with the web alone."
)
NO_ROUTE_END = gettext_noop(
    "OpenStreetMap knows no place named %(place)s: the topic goes on with the web alone."
)


def fetch(ctx: RunContext) -> None:
    topic = ctx.topic
    language = language_of(topic)
    ends = route_ends(topic.question)
    if ends is None:
        web_alone(ctx, NO_ROUTE_ASKED)
        return
    ctx.emit(STAGE, gettext_noop("Finding the route with OSRM"), args={}, done=0, total=1)
    places = []
    try:
        for end in ends:
            found = find_osm(ctx, nominative_guesses(end), language)
            if found is None:
                web_alone(ctx, NO_ROUTE_END, place=end)
                return
            places.append(found[0])
    except nominatim.NominatimError as exc:
        web_alone(ctx, NOMINATIM_FAILED, error=str(exc))
        return
    origin, destination = (osrm.Point(float(p["lat"]), float(p["lon"])) for p in places)
    ends_key = tuple(f"{p.latitude:.5f},{p.longitude:.5f}" for p in (origin, destination))
    key = ("osrm", settings.OSRM_URL, settings.OSRM_PROFILE, *ends_key)
    try:
        data = cached(ctx, key, lambda: async_to_sync(osrm.route)(origin, destination, user=ctx.owner_id))
    except osrm.OsrmError as exc:
        web_alone(ctx, NO_OSRM_ROUTE, origin=ends[0], destination=ends[1], error=str(exc))
        return
    fetched_at = datetime.fromisoformat(data["_fetched_at"])
    names = [str(p.get("name") or p.get("display_name") or "?") for p in places]
    publish(
        ctx,
        fetched_at,
        "osrm",
        url=directions_url(origin, destination),
        text=route_markdown(places, data, fetched_at, language),
        ru=f"OSRM: маршрут {names[0]} → {names[1]}",
        en=f"OSRM: route {names[0]} → {names[1]}",
        message=gettext_noop("Route %(origin)s → %(destination)s from OSRM, fetched %(time)s"),
        args={"origin": names[0], "destination": names[1]},
    )


def directions_url(origin: osrm.Point, destination: osrm.Point) -> str:
    """The route on openstreetmap.org (a page a reader can open; OSRM's data is OpenStreetMap's)."""
    points = ";".join(f"{p.latitude:.5f},{p.longitude:.5f}" for p in (origin, destination))
    route = points.replace(";", "%3B")
    return f"https://www.openstreetmap.org/directions?engine=fossgis_osrm_car&route={route}"


def _duration(seconds: float, language: str) -> str:
    minutes = round(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    if language == "ru":
        return f"{hours} ч {minutes} мин" if hours else f"{minutes} мин"
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def route_markdown(
    places: list[dict[str, Any]], data: dict[str, Any], fetched_at: datetime, language: str
) -> str:
    """The route's two ends, distance and duration as short lines."""
    ru = language == "ru"
    start, end = places
    profile = settings.OSRM_PROFILE

    def where(place: dict[str, Any]) -> str:
        return f"{place.get('display_name')} ({float(place['lat']):.5f}, {float(place['lon']):.5f})"

    names = " → ".join(str(p.get("name") or p.get("display_name")) for p in places)
    km = f"{data['distance'] / 1000:.1f} {'км' if ru else 'km'}"
    lines = [
        f"# Маршрут: {names}" if ru else f"# Route: {names}",
        "",
        (
            f"Источник: OSRM (профиль {profile}) и OpenStreetMap Nominatim (данные © участники "
            f"OpenStreetMap, ODbL 1.0), получены {fetched(fetched_at)}. Время в пути – оценка "
            "маршрутизатора без учёта пробок."
            if ru
            else f"Source: OSRM (profile {profile}) and OpenStreetMap Nominatim (data © OpenStreetMap "
            f"contributors, ODbL 1.0), fetched {fetched(fetched_at)}. The duration is the router's "
            "estimate, without live traffic."
        ),
        "",
        f"- {'Откуда' if ru else 'From'}: {where(start)}",
        f"- {'Куда' if ru else 'To'}: {where(end)}",
        f"- {'Расстояние по дорогам' if ru else 'Distance by road'}: {km}",
        f"- {'Время в пути' if ru else 'Travel time'}: {_duration(data['duration'], language)}",
    ]
    roads = [name for name in data.get("waypoints") or [] if name]
    if roads:
        label = "Дороги у начала и конца" if ru else "Roads at the start and end"
        lines.append(f"- {label}: {', '.join(roads)}")
    return "\n".join(lines) + "\n"


def is_configured() -> bool:
    return osrm.is_configured() and nominatim.is_configured()
