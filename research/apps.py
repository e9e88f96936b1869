from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ResearchConfig(AppConfig):
    name = "research"
    verbose_name = _("Research")
