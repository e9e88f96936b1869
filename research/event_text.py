"""Progress lines written once by the worker and read in whatever language the reader has.

The worker runs in no reader's language, so an event keeps two things: `RunEvent.message`, the
line in English (the admin, API, console and archives read it), and under `data["i18n"]` the
msgid it came from with its arguments, which the topic page translates when it shows the line.
An argument that is itself a fixed phrase (a stop reason, a domain) is a nested `phrase()` and is
translated too, and so is a list of such phrases (SearXNG's categories, a report's marks), shown
joined by commas; anything else (a URL, a query, an error from elsewhere) is shown as it came.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

from django.db.models import Choices
from django.utils import translation

I18N_KEY = "i18n"
# Live lines are short; these bound what any stored line (an imported archive's included) can
# cost to show: a phrase nests one level at most, arguments are flat strings and numbers, and
# nothing grows past these lengths however its placeholders repeat.
MAX_MSGID_CHARS = 500
MAX_ARG_CHARS = 2000
MAX_LINE_CHARS = 4000
MAX_LIST_ITEMS = 20


def phrase(msgid: str, **args: Any) -> dict[str, Any]:
    """A message to translate later: `msgid` must be marked with gettext_noop where it is written."""
    return {"msgid": msgid, "args": args}


def choice_phrase(choice: Choices) -> dict[str, Any]:
    """The label of a model choice as a phrase: its msgid, whatever language is active now."""
    with translation.override(None):
        return phrase(str(choice.label))


def phrases(*specs: dict[str, Any]) -> list[dict[str, Any]]:
    """Phrases shown as one argument, each translated, joined by commas."""
    return list(specs)


def is_phrase_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) <= MAX_LIST_ITEMS
        and all(
            _is_phrase(item) and all(is_flat(arg) for arg in (item.get("args") or {}).values())
            for item in value
        )
    )


def english(spec: dict[str, Any]) -> str:
    return render(spec, lambda msgid: msgid)


def render(spec: dict[str, Any], translate: Callable[[str], str], *, nested: bool = False) -> str:
    """The phrase formatted; a nested phrase's own arguments must be flat (no deeper phrases)."""
    msgid = spec["msgid"]
    if len(msgid) > MAX_MSGID_CHARS:
        raise ValueError("msgid too long")
    args = {}
    for name, value in (spec.get("args") or {}).items():
        if _is_phrase(value) and not nested:
            args[name] = render(value, translate, nested=True)[:MAX_ARG_CHARS]
        elif is_phrase_list(value) and not nested:
            shown = (render(item, translate, nested=True) for item in value)
            args[name] = ", ".join(shown)[:MAX_ARG_CHARS]
        elif is_flat(value) and not isinstance(value, str):
            args[name] = value
        else:  # text, or what live code never writes (an archive's checks refuse it)
            args[name] = str(value)[:MAX_ARG_CHARS]
    text = (translate(msgid) if msgid else "") % args  # gettext("") is the catalogue's header
    return text[:MAX_LINE_CHARS]


def is_flat(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool))


def translated(data: Any, fallback: str) -> str:
    """The event's line in the active language; `fallback` (the stored English) for rows written
    before lines were translated, or when a catalogue entry's placeholders do not fit."""
    spec = data.get(I18N_KEY) if isinstance(data, dict) else None
    if not _is_phrase(spec):
        return fallback
    try:
        return render(spec, translation.gettext)
    except (KeyError, TypeError, ValueError, AttributeError):
        return fallback


def _is_phrase(value: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(value, dict) and isinstance(value.get("msgid"), str)
