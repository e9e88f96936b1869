"""Strict readers for the process environment (and an optional `.env`).

Settings is the only module that calls these; everything else reads `django.conf.settings`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
N = TypeVar("N", int, float)


def load_env_file(path: Path) -> None:
    """Read `.env` without overriding what the real environment already says."""
    if path.is_file():
        load_dotenv(path, override=False)


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_name(name: str, *aliases: str) -> str:
    """The first of a setting's names the environment gives a value, else its own name."""
    return next((n for n in (name, *aliases) if os.environ.get(n, "").strip()), name)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_int(name: str, default: int) -> int:
    return _env_number(name, default, int, "an integer")


def env_float(name: str, default: float) -> float:
    return _env_number(name, default, float, "a number")


def _env_number(name: str, default: N, kind: Callable[[str], N], what: str) -> N:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be {what}, got {raw!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_prices(name: str) -> dict[str, tuple[float, float]]:
    """Per-model prices per 1k tokens: `model=input/output`, comma-separated.

    The model name is everything before the last `=`, so names with slashes or colons
    (`openai/gpt-4o-mini`, `llama3.1:8b`) need no quoting.
    """
    prices = {}
    for item in env_list(name, []):
        model, _, pair = item.rpartition("=")
        input_price, _, output_price = pair.partition("/")
        try:
            prices[model.strip()] = (float(input_price), float(output_price))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} must look like model=input/output,other=input/output; got {item!r}"
            ) from None
        if not model.strip():
            raise ImproperlyConfigured(f"{name}: {item!r} names no model")
    return prices
