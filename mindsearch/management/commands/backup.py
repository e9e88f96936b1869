"""`manage.py backup FILE`: the database and the uploaded files in one file (mindsearch/backup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mindsearch.backup import BackupError, backup


class Command(BaseCommand):
    help = "Back up the database (pg_dump) and the uploaded files into FILE (a .tar file)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)

    def handle(self, *args: Any, file: Path, **options: Any) -> None:
        try:
            manifest = backup(file)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"Backed up to {file}: database dump {manifest['database_bytes']} bytes, "
            f"{manifest['media_files']} uploaded file(s)."
        )
