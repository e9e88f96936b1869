from __future__ import annotations

from django.apps import AppConfig


class MindSearchConfig(AppConfig):
    name = "mindsearch"
    verbose_name = "MindSearch"

    def ready(self) -> None:
        from mindsearch import admin_charts  # noqa: F401 — registers the service charts in the admin
