"""`manage.py qcluster`: django-q2's command, with clean stops and the heartbeat watcher.

This app is listed before django_q in INSTALLED_APPS, so this command takes the name.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from mindsearch.worker import run_cluster


class Command(BaseCommand):
    help = "Run the background worker (django-q2) until SIGTERM or SIGINT, then stop cleanly."

    def handle(self, *args: Any, **options: Any) -> None:
        assert settings.SECRET_KEY  # django-q2 signs its tasks with it
        run_cluster()
