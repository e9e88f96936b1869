from __future__ import annotations

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class MindSearchConfig(AppConfig):
    name = "mindsearch"
    verbose_name = "MindSearch"

    def ready(self) -> None:
        from django.contrib.auth.models import User
        from django.db.models.signals import post_save

        from mindsearch import (
            admin_charts,  # noqa: F401 — registers the service charts in the admin
            checks,  # noqa: F401 — registers the deploy checks
        )
        from mindsearch.models import revoke_tokens_on_password_change

        post_save.connect(
            revoke_tokens_on_password_change, sender=User, dispatch_uid="revoke-tokens-on-password"
        )


class MindSearchAdminConfig(admin_apps.AdminConfig):
    """Django's admin with MindSearch's site (mindsearch/admin_site.py) as `admin.site`; named in
    INSTALLED_APPS, so not this module's default (that is MindSearchConfig, for "mindsearch")."""

    default = False

    default_site = "mindsearch.admin_site.GuardedAdminSite"
