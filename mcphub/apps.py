from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class McphubConfig(AppConfig):
    name = "mcphub"
    verbose_name = _("MCP")

    def ready(self) -> None:
        from mcphub.status import check_sources
        from mindsearch import status

        status.add_check(check_sources)  # the status page lists the MCP sources' state
