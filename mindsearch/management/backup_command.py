"""What `manage.py backup` and `restore` share: one FILE argument, and a BackupError shown as the
command's error (exit status 1, the message on stderr) rather than a traceback."""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mindsearch.backup import BackupError


class BackupFileCommand(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)

    def handle(self, *args: Any, file: Path, **options: Any) -> None:
        try:
            self.stdout.write(self.run(file))
        except BackupError as exc:
            raise CommandError(str(exc)) from exc

    @abstractmethod
    def run(self, file: Path) -> str:
        """Do the work on `file`; the line to print when it is done."""
