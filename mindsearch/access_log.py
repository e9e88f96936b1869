"""Secrets handed out as links stay out of the logs (issue 26, finding 10): a share link's token
(`/s/<token>/…`) and an invite's (`?invite=<token>`) are written as `[redacted]` in daphne's
access log and in the records of Django's request loggers ("Not Found: /s/…"). Whoever reads the
logs could otherwise open every shared report, or sign up with an unused invite."""

from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "[redacted]"
_SHARE = re.compile(r"/s/[^/?#\s]+")
_QUERY = re.compile(r"([?&](?:invite|token)=)[^&#\s]*")


def redact(text: str) -> str:
    return _QUERY.sub(rf"\g<1>{REDACTED}", _SHARE.sub(f"/s/{REDACTED}", text))


class RedactTokens(logging.Filter):
    """A logging filter (settings.LOGGING) that redacts the arguments and message of a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        return True


def install_access_log_redaction() -> None:
    """daphne's access log (its `AccessLogGenerator`) writes each request's path with the query:
    redact it first."""
    try:
        from daphne.access import AccessLogGenerator
    except ImportError:
        return
    if getattr(AccessLogGenerator, "_mindsearch_redacted", False):
        return
    original = AccessLogGenerator.__call__

    def call(self: Any, protocol: str, action: str, details: dict[str, Any]) -> None:
        if isinstance(details.get("path"), str):
            details = {**details, "path": redact(details["path"])}
        original(self, protocol, action, details)

    AccessLogGenerator.__call__ = call
    AccessLogGenerator._mindsearch_redacted = True
