"""`manage.py restore FILE`: a backup into an empty database and data folder (mindsearch/backup.py)."""

from __future__ import annotations

from pathlib import Path

from mindsearch.backup import restore
from mindsearch.management.backup_command import BackupFileCommand


class Command(BackupFileCommand):
    help = "Restore a backup made by `manage.py backup` into an empty database and data folder."

    def run(self, file: Path) -> str:
        manifest = restore(file)
        return (
            f"Restored {file} (made {manifest['created_at']}): {manifest['media_files']} uploaded file(s). "
            "Run `manage.py migrate` if this version of MindSearch is newer than the backup's."
        )
