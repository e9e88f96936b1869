from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from research import archive


class Command(BaseCommand):
    help = "Create a topic from an archive made by export_topic (or the topic page), owned by --user."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--user", required=True, help="Username of the new topic's owner.")

    def handle(self, *args: Any, path: Path, user: str, **options: Any) -> None:
        owner = get_user_model().objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"There is no user {user!r}.")
        if not path.is_file():
            raise CommandError(f"{path} is not a file.")
        if path.stat().st_size > archive.MAX_ARCHIVE_BYTES:
            raise CommandError(f"{path} is larger than {archive.MAX_ARCHIVE_BYTES // 2**20} MB.")
        try:
            with path.open("rb") as upload:
                topic = archive.import_archive(upload, owner)
        except archive.ArchiveError as exc:
            raise CommandError(f"Nothing was imported: {exc}") from None
        self.stdout.write(f"Imported topic {topic.pk} for {owner.get_username()}: {topic.question[:80]}")
