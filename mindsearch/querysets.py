from __future__ import annotations

from typing import Any, Self

from django.db import models


class OwnedQuerySet(models.QuerySet):
    """Rows that belong to a user through `owner_field` (a lookup path such as "topic__owner")."""

    owner_field = "owner"

    def for_user(self, user: Any) -> Self:
        """What this user owns; nothing at all for an anonymous visitor."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(**{self.owner_field: user})
