"""`manage.py restore FILE`: a backup into an empty database and data folder (mindsearch/backup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mindsearch.backup import restore
from mindsearch.management.backup_command import BackupFileCommand


class Command(BackupFileCommand):
    help = "Restore a backup made by `manage.py backup` into an empty database and data folder."
    done = (
        "Restored {file} (made {created_at}): {media_files} uploaded file(s). "
        "Run `manage.py migrate` if this version of MindSearch is newer than the backup's."
    )

    def work(self, file: Path) -> dict[str, Any]:
        return restore(file)
