"""Sports: TheSportsDB's team a question names, its next events and its last results."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils.translation import gettext_noop

from mindsearch.clients import thesportsdb
from research.models import Topic
from research.pipeline.context import RunContext
from research.pipeline.providers.common import STAGE, cached, fetched, language_of, publish, web_alone
from research.pipeline.question_domain import name_candidates

DOMAIN = Topic.Domain.SPORTS
NOT_CONFIGURED = gettext_noop(
    "Sports data is not configured (THESPORTSDB_URL is empty): the topic goes on with the web alone."
)
# Why a topic gets no data from this provider, each a whole sentence for the translators.
NO_TEAM = gettext_noop(
    "TheSportsDB knows no team named in the question: the topic goes on with the web alone."
)
NO_TEAM_ID = gettext_noop("TheSportsDB gave no id for %(team)s: the topic goes on with the web alone.")
SPORTSDB_FAILED = gettext_noop("TheSportsDB failed (%(error)s): the topic goes on with the web alone.")


def fetch(ctx: RunContext) -> None:
    topic = ctx.topic
    language = language_of(topic)
    ctx.emit(STAGE, gettext_noop("Looking the team up in TheSportsDB"), args={}, done=0, total=1)
    # The key changes what TheSportsDB answers (the free key lists less): it names the cache entry,
    # by a hash, so the key is not written into the cache's description.
    source = (settings.THESPORTSDB_URL, hashlib.sha256(settings.THESPORTSDB_API_KEY.encode()).hexdigest()[:8])
    try:
        team = None
        for name in name_candidates(topic.question, ctx.image_labels):
            found = cached(
                ctx,
                ("thesportsdb teams", *source, name.lower()),
                lambda name=name: {"teams": async_to_sync(thesportsdb.search_teams)(name, user=ctx.owner_id)},
            )
            if found["teams"]:
                team = _best_team(found["teams"], name)
                break
        if team is None:
            web_alone(ctx, NO_TEAM)
            return
        team_id = str(team.get("idTeam") or "")
        if not team_id.isdigit():  # its events can't be asked for, nor its page linked
            web_alone(ctx, NO_TEAM_ID, team=str(team.get("strTeam") or name))
            return
        events = cached(ctx, ("thesportsdb events", *source, team_id), lambda: _team_events(ctx, team_id))
    except thesportsdb.SportsDBError as exc:
        web_alone(ctx, SPORTSDB_FAILED, error=str(exc))
        return
    fetched_at = datetime.fromisoformat(events["_fetched_at"])
    name = str(team.get("strTeam") or "?")
    publish(
        ctx,
        fetched_at,
        "thesportsdb",
        url=thesportsdb.team_url(team),  # never an API address: those hold the key
        text=sports_markdown(team, events["next"], events["last"], fetched_at, language),
        ru=f"TheSportsDB: {name}, ближайшие и последние матчи",
        en=f"TheSportsDB: {name}, next and last events",
        message=gettext_noop("%(team)s from TheSportsDB, fetched %(time)s"),
        args={"team": name},
    )


def _best_team(teams: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The team whose name is the one asked for, else TheSportsDB's first."""
    wanted = name.lower()
    exact = [t for t in teams if str(t.get("strTeam") or "").lower() == wanted]
    return (exact or teams)[0]


def _team_events(ctx: RunContext, team_id: str) -> dict[str, Any]:
    return {
        "next": async_to_sync(thesportsdb.next_events)(team_id, user=ctx.owner_id),
        "last": async_to_sync(thesportsdb.last_events)(team_id, user=ctx.owner_id),
    }


def _text(value: object) -> str:
    return " ".join(str(value).split()) if value not in (None, "") else ""


def _event_time(event: dict[str, Any]) -> str:
    """When the event is, in UTC: its timestamp, or its date and time; a time not fixed yet (null,
    or "00:00:00" beside no timestamp) is left out."""
    stamp = _text(event.get("strTimestamp"))
    if stamp and "T" in stamp:
        day, clock = stamp.split("T", 1)
        return f"{day} {clock[:5]} UTC"
    day, clock = _text(event.get("dateEvent")), _text(event.get("strTime"))
    if day and clock and clock[:5] != "00:00":
        return f"{day} {clock[:5]} UTC"
    return day or "?"


ROUTINE_STATUSES = ("Match Finished", "FT", "NS", "Not Started")


def _event_line(event: dict[str, Any], language: str, *, played: bool) -> str:
    ru = language == "ru"
    home, away = _text(event.get("strHomeTeam")), _text(event.get("strAwayTeam"))
    title = f"{home} – {away}" if home and away else _text(event.get("strEvent")) or "?"
    scores = (_text(event.get("intHomeScore")), _text(event.get("intAwayScore")))
    if played:
        unknown = "счёт неизвестен" if ru else "score not known"
        score = f"{scores[0]}:{scores[1]}" if all(scores) else unknown
        title = f"{home} {score} {away}" if home and away else f"{title} ({score})"
    details = [_text(event.get("strLeague"))]
    if _text(event.get("intRound")) and _text(event.get("intRound")) != "0":
        details.append(f"{'тур' if ru else 'round'} {_text(event.get('intRound'))}")
    venue = _text(event.get("strVenue"))
    where = f"; {'стадион' if ru else 'venue'} {venue}" if venue else ""
    status = _text(event.get("strStatus"))
    shown_status = f"; {status}" if status and status not in ROUTINE_STATUSES else ""
    detail = ", ".join(d for d in details if d)
    return f"- {_event_time(event)}: {title}" + (f" ({detail})" if detail else "") + where + shown_status


def sports_markdown(
    team: dict[str, Any],
    upcoming: list[dict[str, Any]],
    last: list[dict[str, Any]],
    fetched_at: datetime,
    language: str,
) -> str:
    """The team, its next events and its last results as short lines, times in UTC."""
    ru = language == "ru"
    name = _text(team.get("strTeam")) or "?"
    facts = [
        (("Лига", "League"), _text(team.get("strLeague"))),
        (("Вид спорта", "Sport"), _text(team.get("strSport"))),
        (("Страна", "Country"), _text(team.get("strCountry"))),
        (("Стадион", "Stadium"), _text(team.get("strStadium"))),
        (("Основан", "Founded"), _text(team.get("intFormedYear"))),
    ]
    lines = [
        f"# {name}",
        "",
        (
            f"Источник: TheSportsDB, данные получены {fetched(fetched_at)}; время матчей – UTC."
            if ru
            else f"Source: TheSportsDB, fetched {fetched(fetched_at)}; event times are UTC."
        ),
        "",
    ]
    lines += [
        f"- {label[0] if ru else label[1]}: {value}" for label, value in facts if value not in ("", "0")
    ]
    lines += ["", "## Ближайшие матчи" if ru else "## Next events", ""]
    lines += [_event_line(e, language, played=False) for e in upcoming] or [
        "- TheSportsDB не знает ближайших матчей (бесплатный ключ показывает не все)."
        if ru
        else "- TheSportsDB lists no upcoming event (its free key lists only some)."
    ]
    lines += ["", "## Последние результаты" if ru else "## Last results", ""]
    lines += [_event_line(e, language, played=True) for e in last] or [
        "- TheSportsDB не знает последних матчей." if ru else "- TheSportsDB lists no past event."
    ]
    return "\n".join(lines) + "\n"


def is_configured() -> bool:
    return thesportsdb.is_configured()
