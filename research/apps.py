from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ResearchConfig(AppConfig):
    name = "research"
    verbose_name = _("Research")

    def ready(self) -> None:
        from django.db.models.signals import post_delete

        from research import export
        from research.models import Topic

        post_delete.connect(export.forget_pdfs_of_deleted, sender=Topic, dispatch_uid="research.forget_pdfs")
