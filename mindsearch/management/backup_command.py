"""What `manage.py backup` and `restore` share: one FILE argument, the work on it, a BackupError
shown as the command's error (exit status 1, the message on stderr) rather than a traceback, and
the line that says what was done, filled in from the backup's manifest."""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mindsearch.backup import BackupError


class BackupFileCommand(BaseCommand):
    # The line printed when the work is done: `{file}` and the manifest's keys are filled in.
    done: str

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)

    def handle(self, *args: Any, file: Path, **options: Any) -> None:
        try:
            manifest = self.work(file)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.done.format_map({**manifest, "file": file}))

    @abstractmethod
    def work(self, file: Path) -> dict[str, Any]:
        """Back up to or restore from `file`; the backup's manifest."""
