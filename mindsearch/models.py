"""Rows the project-wide services keep: the rate-limit reservation log, personal API tokens and
invites, and the base of every secret handed out as a link or a token (`HashedToken`)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any, Self

from django.conf import settings
from django.contrib.auth.models import User
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from mindsearch.querysets import OwnedQuerySet

# A recognisable prefix lets people (and secret scanners) tell a MindSearch token at a glance.
API_TOKEN_PREFIX = "mst_"  # noqa: S105 — a prefix, not a secret
# Writing last_used_at on every request would turn every API read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class TokenScope(models.TextChoices):
    """What an API token may do (docs/API.md, "Scopes"). Every API operation and MCP tool needs one."""

    READ = "read", pgettext_lazy("API token scope", "read")
    RESEARCH = "research", pgettext_lazy("API token scope", "research")
    DOCUMENTS = "documents", pgettext_lazy("API token scope", "documents")
    SHARE = "share", pgettext_lazy("API token scope", "share")


# What each scope allows, as the tokens page explains it.
SCOPE_HELP = {
    TokenScope.READ: _("read your topics, plans, reports, documents and notes; search"),
    TokenScope.RESEARCH: _("start, edit, approve, rerun, cancel and delete topics; ask follow-ups"),
    TokenScope.DOCUMENTS: _("upload and delete documents; write notes"),
    TokenScope.SHARE: _("make and revoke share links"),
}


def missing_scope(scope: str, what: str) -> str:
    """The refusal of an operation (`what`) to a token without the `scope` it needs."""
    return (
        f"This API token lacks the '{scope}' scope, which {what} needs; "
        "make a token with that scope at /settings/tokens/."
    )


def all_scopes() -> list[str]:
    """Every scope: a token made before scopes existed (and the default of a new one) has them all."""
    return list(TokenScope.values)


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


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class HashedTokenQuerySet(models.QuerySet):
    """Finding a `HashedToken` by the plain secret someone presented."""

    find_related: tuple[str, ...] = ()  # what the caller of `find` reads next

    def usable(self) -> Self:
        return self.filter(**{f"{self.model.SPENT_FIELD}__isnull": True}).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        )

    def find(self, token: str) -> Any:
        """The usable row for a presented secret, or None."""
        if not token:
            return None
        return self.usable().select_related(*self.find_related).filter(token_hash=hash_token(token)).first()


class HashedToken(models.Model):
    """A secret handed out once (an API token, a share link, an invite); only its hash is stored.

    It is usable until it expires or its `SPENT_FIELD` is set (revoked; used, for an invite)."""

    SPENT_FIELD: str
    PREFIX = ""  # lets people (and secret scanners) tell the kind of a token at a glance
    BYTES = 32

    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @classmethod
    def new_secret(cls, expires_in: timedelta | None = None) -> tuple[str, dict[str, Any]]:
        """A fresh plain secret, and the fields that store it (its hash and expiry)."""
        token = cls.PREFIX + secrets.token_urlsafe(cls.BYTES)
        expires_at = timezone.now() + expires_in if expires_in else None
        return token, {"token_hash": hash_token(token), "expires_at": expires_at}

    @property
    def is_usable(self) -> bool:
        if getattr(self, self.SPENT_FIELD) is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()


class RevocableToken(HashedToken):
    SPENT_FIELD = "revoked_at"

    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])


# django-stubs gives each queryset class its own `as_manager` type, which two bases then disagree on.
class ApiTokenQuerySet(OwnedQuerySet, HashedTokenQuerySet):  # type: ignore[override]
    find_related = ("owner",)


class ApiToken(RevocableToken):
    """A personal token a script sends as `Authorization: Bearer <token>` to act as its owner."""

    PREFIX = API_TOKEN_PREFIX

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(_("name"), max_length=100)
    last_used_at = models.DateTimeField(null=True, blank=True)
    scopes = models.JSONField(_("scopes"), default=all_scopes)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return self.name

    @classmethod
    def issue(
        cls, owner: User, name: str, expires_in: timedelta | None = None, scopes: list[str] | None = None
    ) -> tuple[ApiToken, str]:
        """Create a token (with every scope unless told which); the plain value is returned once
        and never stored."""
        chosen = all_scopes() if scopes is None else [scope for scope in TokenScope.values if scope in scopes]
        unknown = sorted(set(scopes or ()) - set(TokenScope.values))
        if unknown:
            raise ValueError(f"Unknown API token scopes: {', '.join(unknown)}")
        token, stored = cls.new_secret(expires_in)
        return cls.objects.create(owner=owner, name=name, scopes=chosen, **stored), token

    def allows(self, scope: str) -> bool:
        return scope in (self.scopes or ())

    @property
    def scope_labels(self) -> list[str]:
        """The token's scopes as the settings page names them, in the scopes' own order."""
        return [str(label) for value, label in TokenScope.choices if value in (self.scopes or ())]

    def touch(self) -> None:
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at >= LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now


class InviteQuerySet(HashedTokenQuerySet):
    pass


class Invite(HashedToken):
    """A single-use sign-up link the operator makes in the admin (with SIGNUP=invite)."""

    SPENT_FIELD = "used_at"
    BYTES = 24

    note = models.CharField(_("note"), max_length=200, blank=True, default="", help_text=_("Who it is for."))
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
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
        token, stored = cls.new_secret(expires_in)
        return cls.objects.create(note=note, created_by=created_by, **stored), token


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


class LimitCounter(models.Model):
    """One count behind a limit that must hold under concurrency (sign-ups per address, the login
    guard's failures): changed only by one conditional statement each (mindsearch/limits.py).
    Times are epoch seconds, so the code that asks sets "now"."""

    key = models.CharField(max_length=200, unique=True)
    count = models.IntegerField(default=0)
    last = models.FloatField(default=0.0)
    expires = models.FloatField(default=0.0, db_index=True)

    def __str__(self) -> str:
        return f"{self.key}: {self.count}"


def revoke_tokens_on_password_change(sender: type, instance: User, created: bool, **kwargs: Any) -> None:
    """A new password ends the account's API tokens, as it ends its other sessions: a token
    copied by whoever knew the old password stops working with it. Django marks a real change
    (`set_password` then `save`) with `_password`; a hash upgraded at sign-in clears it first and
    so keeps the tokens. Connected in `MindSearchConfig.ready`."""
    if created or getattr(instance, "_password", None) is None:
        return
    ApiToken.objects.filter(owner=instance, revoked_at__isnull=True).update(revoked_at=timezone.now())


class EmailAddress(models.Model):
    """The address an account's scheduled research is delivered to; nothing is sent to it before
    its owner opened the link mailed to it (`mindsearch/email_address.py`)."""

    user = models.OneToOneField(User, on_delete=models.CASCADE, related_name="email_address")
    email = models.EmailField()
    verified_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When the last verification link was sent.")
    )

    def __str__(self) -> str:
        return f"{self.email} ({'verified' if self.verified_at else 'not verified'})"

    @property
    def verified(self) -> bool:
        return self.verified_at is not None
