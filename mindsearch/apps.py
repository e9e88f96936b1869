from __future__ import annotations

from django.apps import AppConfig


class MindSearchConfig(AppConfig):
    name = "mindsearch"
    verbose_name = "MindSearch"
