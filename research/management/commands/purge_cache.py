from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from research.pipeline import cache


class Command(BaseCommand):
    help = (
        "Delete expired cache entries (the worker also does this every hour); --stats prints usage per kind."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--stats", action="store_true", help="Print entries, bytes, hits and misses per kind."
        )

    def handle(self, *args: Any, stats: bool, **options: Any) -> None:
        deleted = cache.purge_expired()
        self.stdout.write(f"Deleted {deleted} expired cache entries.")
        if stats:
            for kind, row in cache.stats().items():
                self.stdout.write(
                    f"{kind:<18} {row['entries']:>7} entries {row['bytes']:>12} bytes "
                    f"{row['hits']:>7} hits {row['misses']:>7} misses  hit rate {row['hit_rate']:.0%}"
                )
