"""Rows the project-wide services keep: the rate-limit reservation log."""

from __future__ import annotations

from django.db import models


class RateLimitGrant(models.Model):
    """One reserved request slot of an outside service (see `mindsearch.clients.ratelimit`).

    `granted_at` may lie in the future: a caller reserves its slot, then sleeps until it.
    """

    name = models.CharField(max_length=100)
    granted_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["name", "-granted_at"], name="ratelimit_name_recent")]

    def __str__(self) -> str:
        return f"{self.name} @ {self.granted_at.isoformat()}"
