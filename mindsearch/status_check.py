"""What one status check answers, and its states: shared by `mindsearch/status.py`, which runs
the checks, and the modules that contribute checks of their own (`status_services.py`, an app's
`status.py` registered with `mindsearch.status.add_check`)."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, OFF, ERROR = "ok", "warn", "off", "error"


@dataclass(frozen=True)
class Check:
    name: str
    state: str
    summary: str
    detail: str = ""
