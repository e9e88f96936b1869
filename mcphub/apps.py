from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class McphubConfig(AppConfig):
    name = "mcphub"
    verbose_name = _("MCP")
