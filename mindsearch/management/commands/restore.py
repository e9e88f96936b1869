"""`manage.py restore FILE`: a backup into an empty database and data folder (mindsearch/backup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mindsearch.backup import BackupError, restore


class Command(BaseCommand):
    help = "Restore a backup made by `manage.py backup` into an empty database and data folder."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)

    def handle(self, *args: Any, file: Path, **options: Any) -> None:
        try:
            manifest = restore(file)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"Restored {file} (made {manifest['created_at']}): {manifest['media_files']} uploaded file(s). "
            "Run `manage.py migrate` if this version of MindSearch is newer than the backup's."
        )
