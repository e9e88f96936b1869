"""`manage.py backup FILE`: the database and the uploaded files in one file (mindsearch/backup.py)."""

from __future__ import annotations

from pathlib import Path

from mindsearch.backup import backup
from mindsearch.management.backup_command import BackupFileCommand


class Command(BackupFileCommand):
    help = "Back up the database (pg_dump) and the uploaded files into FILE (a .tar file)."

    def run(self, file: Path) -> str:
        manifest = backup(file)
        return (
            f"Backed up to {file}: database dump {manifest['database_bytes']} bytes, "
            f"{manifest['media_files']} uploaded file(s)."
        )
