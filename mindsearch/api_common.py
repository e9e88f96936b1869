"""Pieces every API router shares: checked text input, the error answers' schemas, paging."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from django.db import models
from ninja import Query, Schema
from ninja.errors import ValidationError
from pydantic import AfterValidator


def _storable(value: str) -> str:
    # PostgreSQL stores neither NUL nor lone surrogates: refuse them as input, not fail at the database.
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text") from None
    return value


Text = Annotated[str, AfterValidator(_storable)]

View = TypeVar("View", bound=Callable[..., Any])
SCOPE_ATTRIBUTE = "token_scope"


def needs(scope: str) -> Callable[[View], View]:
    """Mark an operation with the API token scope it needs (a `TokenScope` value). A GET needs
    "read" unless marked; any other method must be marked, or the API refuses to start
    (mindsearch/api.py, `check_scope`). Put it under the router's decorator."""

    def mark(view: View) -> View:
        setattr(view, SCOPE_ATTRIBUTE, scope)
        return view

    return mark


def choices_enum(name: str, choices: type[models.TextChoices]) -> type[enum.Enum]:
    """The values of a model's choices as an enum of its own name in the OpenAPI schema: two
    models' `Status` classes would otherwise share one schema component."""
    members = {value.upper() or "NONE": value for value in choices.values}
    # Enum's functional API through its metaclass: mypy reads `enum.Enum(name, …)` only with a
    # literal name, and this name is the caller's.
    return enum.EnumMeta.__call__(enum.Enum, name, members, type=str)


class ErrorOut(Schema):
    detail: str


class ValidationErrorOut(Schema):
    detail: str
    errors: list[dict[str, Any]]


def errors(*codes: int) -> dict[int, type[Schema]]:
    """The error answers of an operation: its own `codes`, plus those any operation may give
    (400 unreadable body, 401 not authenticated, 403 forbidden or CSRF, 422 invalid input,
    429 a fair-use limit of the account: topics at once, plan size, daily LLM budget)."""
    found: dict[int, type[Schema]] = {
        400: ErrorOut,
        401: ErrorOut,
        403: ErrorOut,
        422: ValidationErrorOut,
        429: ErrorOut,
    }
    found.update(dict.fromkeys(codes, ErrorOut))
    return found


class Page(Schema):
    """One page of a list: `count` is the total, `items` at most `limit` from `offset`."""

    count: int
    limit: int
    offset: int


MAX_PAGE = 100
# Offsets are bounded like PostgreSQL's 32-bit integers, which keeps them sane.
MAX_OFFSET = 2**31 - 1
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]


def page_of(rows: models.QuerySet[Any], *, limit: int, offset: int) -> dict[str, Any]:
    """One page of `rows` (already in their order), as a `Page` shows it."""
    items = list(rows[offset : offset + limit])
    return {"count": rows.count(), "limit": limit, "offset": offset, "items": items}


def invalid(location: tuple[str | int, ...], messages: list[str]) -> ValidationError:
    """A 422 for input the schema allows but the application refuses (a blank question, a file
    of an unsupported type), in the same shape as the schema's own validation errors."""
    return ValidationError([{"type": "value_error", "loc": location, "msg": message} for message in messages])


def form_invalid(form: Any, location: tuple[str | int, ...] = ("body",)) -> ValidationError:
    """The errors of a Django form that validated API input, as a 422."""
    return ValidationError(
        [
            {"type": "value_error", "loc": (*location, field), "msg": str(message)}
            for field, messages in form.errors.items()
            for message in messages
        ]
    )
