"""What a few tests need from the machine beyond Python (a Redis, Debian's chromium, tesseract).

When it is absent such a test is skipped by name, with how to get it; under CI (`CI=true`),
where everything must run, it fails instead."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def absent(how: str) -> NoReturn:
    """Skip the test saying `how` to run it, or fail it under CI."""
    if under_ci():
        pytest.fail(f"{how} — CI requires it")
    pytest.skip(f"{how}; CI runs it")
