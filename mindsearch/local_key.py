"""A development SECRET_KEY kept in the data directory, so that `manage.py …` works in a fresh
clone without configuring anything, and sessions survive restarts.

Only for development: settings use it when SECRET_KEY is unset and DEBUG is on, unset or empty
(`.env.example` leaves it empty). An explicit DEBUG=0 without SECRET_KEY still refuses to start.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

FILENAME = "secret_key"


def local_secret_key(data_dir: Path) -> str:
    """The key stored in `data_dir`, written there (owner-only) on first use."""
    path = data_dir / FILENAME
    try:
        key = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        key = ""
    if key:
        return key
    data_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    partial = path.with_name(f".{FILENAME}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as file:
        file.write(key + "\n")
    try:
        # Two processes starting together: the first key written wins, both use it.
        os.link(partial, path)
    except FileExistsError:
        key = path.read_text(encoding="ascii").strip() or key
    finally:
        partial.unlink(missing_ok=True)
    return key
