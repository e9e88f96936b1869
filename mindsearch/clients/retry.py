"""One retry rule for the small JSON services asked before the web (Open-Meteo, Nominatim,
Alpha Vantage, TheSportsDB, OSRM): a failure worth another try (a timeout, a 5xx, a 429) is
tried again after a pause, and after the last attempt becomes the client's own error, which
the topic's log shows."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class Retryable(Exception):
    """A failure another attempt may not meet. A client's own retryable failure derives from it
    and from the client's error."""


async def with_retries(
    attempt: Callable[[], Awaitable[T]], *, attempts: int, pause: float, error: type[Exception]
) -> T:
    for number in range(1, attempts + 1):
        try:
            return await attempt()
        except Retryable as failure:
            if number == attempts:
                raise error(f"{failure} (gave up after {number} attempts)") from failure
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")
