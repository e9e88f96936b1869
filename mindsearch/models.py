"""Rows the project-wide services keep: the rate-limit reservation log and personal API tokens."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from mindsearch.querysets import OwnedQuerySet

# A recognisable prefix lets people (and secret scanners) tell a MindSearch token at a glance.
API_TOKEN_PREFIX = "mst_"  # noqa: S105 — a prefix, not a secret
# Writing last_used_at on every request would turn every API read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class RateLimitGrant(models.Model):
    """One reserved request slot of an outside service (see `mindsearch.clients.ratelimit`).

    `granted_at` may lie in the future: a caller reserves its slot, then sleeps until it.
    `owner` is whom the call is for (a user id, or "-" for nobody): each holds one future slot.
    """

    name = models.CharField(max_length=100)
    owner = models.CharField(max_length=40, default="-")
    granted_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["name", "-granted_at"], name="ratelimit_name_recent")]

    def __str__(self) -> str:
        return f"{self.name} @ {self.granted_at.isoformat()}"


def hash_api_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ApiTokenQuerySet(OwnedQuerySet):
    def usable(self) -> ApiTokenQuerySet:
        return self.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        )

    def find(self, token: str) -> ApiToken | None:
        """The usable token a request presented, or None; only its hash is ever stored."""
        return self.usable().select_related("owner").filter(token_hash=hash_api_token(token)).first()


class ApiToken(models.Model):
    """A personal token a script sends as `Authorization: Bearer <token>` to act as its owner."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(_("name"), max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return self.name

    @classmethod
    def issue(cls, owner: Any, name: str, expires_in: timedelta | None = None) -> tuple[ApiToken, str]:
        """Create a token; the plain value is returned once and never stored."""
        token = API_TOKEN_PREFIX + secrets.token_urlsafe(32)
        expires_at = timezone.now() + expires_in if expires_in else None
        row = cls.objects.create(
            owner=owner, name=name, token_hash=hash_api_token(token), expires_at=expires_at
        )
        return row, token

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])

    def touch(self) -> None:
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at >= LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now

    @property
    def is_usable(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()


class InviteQuerySet(models.QuerySet):
    def usable(self) -> InviteQuerySet:
        return self.filter(used_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        )

    def find(self, token: str) -> Invite | None:
        """The unused, unexpired invite a sign-up link carries, or None; only hashes are stored."""
        return self.usable().filter(token_hash=hash_api_token(token)).first() if token else None


class Invite(models.Model):
    """A single-use sign-up link the operator makes in the admin (with SIGNUP=invite)."""

    token_hash = models.CharField(max_length=64, unique=True)
    note = models.CharField(_("note"), max_length=200, blank=True, default="", help_text=_("Who it is for."))
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    objects = InviteQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.note or f"Invite {self.pk}"

    @classmethod
    def issue(
        cls, created_by: Any, note: str = "", expires_in: timedelta | None = None
    ) -> tuple[Invite, str]:
        token = secrets.token_urlsafe(24)
        expires_at = timezone.now() + expires_in if expires_in else None
        invite = cls.objects.create(
            token_hash=hash_api_token(token), note=note, created_by=created_by, expires_at=expires_at
        )
        return invite, token


class RateLimitWaits(models.Model):
    """How often, and how long in all, callers waited for a service's limit (PostgreSQL store)."""

    name = models.CharField(max_length=100, unique=True)
    calls = models.BigIntegerField(default=0)
    seconds = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"{self.name}: {self.calls} calls, {self.seconds:.1f} s waited"


class MetricSample(models.Model):
    """One figure of `/metrics` at one moment, kept for the admin desk's charts (mindsearch/metrics.py)."""

    at = models.DateTimeField(db_index=True)
    name = models.CharField(max_length=100)
    labels = models.CharField(max_length=200, blank=True, default="")
    value = models.FloatField()

    class Meta:
        indexes = [models.Index(fields=["name", "at"], name="metricsample_name_at")]

    def __str__(self) -> str:
        return f"{self.name}{{{self.labels}}} = {self.value} @ {self.at.isoformat()}"
