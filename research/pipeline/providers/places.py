"""Places: what OpenStreetMap Nominatim knows of the place a question names."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils.translation import gettext_noop

from mindsearch.clients import nominatim
from research.models import Topic
from research.pipeline.context import RunContext
from research.pipeline.providers.common import STAGE, cached, fetched, language_of, publish, web_alone
from research.pipeline.question_domain import place_candidates

DOMAIN = Topic.Domain.LOCATION
NOT_CONFIGURED = gettext_noop(
    "Place data is not configured (NOMINATIM_URL is empty): the topic goes on with the web alone."
)
# Why a topic gets no data from this provider, each a whole sentence for the translators.
NOMINATIM_FAILED = gettext_noop(
    "OpenStreetMap Nominatim failed (%(error)s): the topic goes on with the web alone."
)
NO_OSM_PLACE = gettext_noop(
    "OpenStreetMap knows no place named in the question: the topic goes on with the web alone."
)


def fetch(ctx: RunContext) -> None:
    topic = ctx.topic
    language = language_of(topic)
    ctx.emit(STAGE, gettext_noop("Looking the place up in OpenStreetMap"), args={}, done=0, total=1)
    try:
        found = find_osm(ctx, place_candidates(topic.question, ctx.image_labels), language)
    except nominatim.NominatimError as exc:
        web_alone(ctx, NOMINATIM_FAILED, error=str(exc))
        return
    if found is None:
        web_alone(ctx, NO_OSM_PLACE)
        return
    place, url, fetched_at = found
    name = str(place.get("name") or place.get("display_name") or "?")
    publish(
        ctx,
        fetched_at,
        "nominatim",
        url=url,
        text=place_markdown(place, fetched_at, language),
        ru=f"OpenStreetMap: {name}",
        en=f"OpenStreetMap: {name}",
        message=gettext_noop("%(place)s from OpenStreetMap, fetched %(time)s"),
        args={"place": str(place.get("display_name") or name)},
    )


def find_osm(ctx: RunContext, names: list[str], language: str) -> tuple[dict[str, Any], str, datetime] | None:
    """The first of `names` OpenStreetMap knows: (place, its openstreetmap.org page, fetched at)."""
    for candidate in names:
        found = cached(
            ctx,
            ("nominatim", settings.NOMINATIM_URL, candidate.lower(), language),
            lambda name=candidate: {
                "place": async_to_sync(nominatim.search)(name, language=language, user=ctx.owner_id),
                "url": nominatim.search_url(name, language),
            },
        )
        if found.get("place"):
            place, fetched_at = found["place"], datetime.fromisoformat(found["_fetched_at"])
            return place, nominatim.place_url(place) or found["url"], fetched_at
    return None


PLACE_TAGS = {
    "opening_hours": ("Часы работы", "Opening hours"),
    "website": ("Сайт", "Website"),
    "phone": ("Телефон", "Phone"),
    "wheelchair": ("Доступ для колясок", "Wheelchair access"),
    "wikipedia": ("Википедия", "Wikipedia"),
}


def place_markdown(place: dict[str, Any], fetched_at: datetime, language: str) -> str:
    """What OpenStreetMap knows of a place, as short lines of facts."""
    ru = language == "ru"
    when = fetched(fetched_at)
    kind = f"{place.get('category') or place.get('class') or ''}/{place.get('type') or ''}".strip("/")
    lines = [
        f"# {place.get('display_name') or place.get('name')}",
        "",
        (
            f"Источник: OpenStreetMap Nominatim (данные © участники OpenStreetMap, ODbL 1.0), "
            f"получены {when}."
            if ru
            else f"Source: OpenStreetMap Nominatim (data © OpenStreetMap contributors, ODbL 1.0), "
            f"fetched {when}."
        ),
        "",
        f"- {'Адрес' if ru else 'Address'}: {place.get('display_name', '—')}",
        f"- {'Координаты' if ru else 'Coordinates'}: {float(place['lat']):.5f}, {float(place['lon']):.5f}",
    ]
    if kind:
        lines.append(f"- {'Тип объекта' if ru else 'Kind of place'}: {kind}")
    tags = place.get("extratags") or {}
    for tag, names in PLACE_TAGS.items():
        if tags.get(tag):
            lines.append(f"- {names[0] if ru else names[1]}: {tags[tag]}")
    return "\n".join(lines) + "\n"


def is_configured() -> bool:
    return nominatim.is_configured()
