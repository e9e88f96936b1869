from __future__ import annotations

from typing import Self, TypeAlias

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models

# Whoever asks: a signed-in user or an anonymous visitor (what `request.user` may be).
AnyUser: TypeAlias = AbstractBaseUser | AnonymousUser


class OwnedQuerySet(models.QuerySet):
    """Rows that belong to a user through `owner_field` (a lookup path such as "topic__owner")."""

    owner_field = "owner"

    def for_user(self, user: AnyUser) -> Self:
        """What this user owns; nothing at all for an anonymous visitor."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(**{self.owner_field: user})
