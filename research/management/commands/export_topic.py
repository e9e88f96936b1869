from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from research import archive
from research.models import Topic


class Command(BaseCommand):
    help = "Write a topic and everything its run produced to a zip archive that import_topic reads."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("topic_id", type=int)
        parser.add_argument(
            "-o", "--output", type=Path, help="Archive path (default: a name from the topic)."
        )

    def handle(self, *args: Any, topic_id: int, output: Path | None, **options: Any) -> None:
        topic = Topic.objects.filter(pk=topic_id).first()
        if topic is None:
            raise CommandError(f"There is no topic {topic_id}.")
        try:
            content = archive.export_topic(topic)
        except archive.ArchiveError as exc:
            raise CommandError(str(exc)) from None
        path = output or Path(archive.filename(topic))
        path.write_bytes(content)
        self.stdout.write(f"Wrote topic {topic.pk} ({len(content)} bytes) to {path}")
