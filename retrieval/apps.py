from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = _("Private documents")
