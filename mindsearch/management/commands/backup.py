"""`manage.py backup FILE`: the database and the uploaded files in one file (mindsearch/backup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mindsearch.backup import backup
from mindsearch.management.backup_command import BackupFileCommand


class Command(BackupFileCommand):
    help = "Back up the database (pg_dump) and the uploaded files into FILE (a .tar file)."
    done = "Backed up to {file}: database dump {database_bytes} bytes, {media_files} uploaded file(s)."

    def work(self, file: Path) -> dict[str, Any]:
        return backup(file)
