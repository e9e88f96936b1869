"""Move a library to the configured embedding model, document by document, without downtime."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from retrieval.reembed import documents_to_move, reembed_documents


class Command(BaseCommand):
    help = (
        "Embed again, with the configured model (EMBEDDING_BACKEND / EMBEDDING_MODEL), every ready "
        "document whose passages came from another model. Each document's passages are replaced in "
        "one transaction: until then its old ones are still found by their words, and nothing is "
        "ever missing. Safe to interrupt and to run again; it goes on where it stopped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", help="only this user's documents (a username)")
        parser.add_argument("--batch", type=int, default=16, help="documents embedded together (default 16)")
        parser.add_argument("--dry-run", action="store_true", help="only say how many documents would move")
        parser.add_argument(
            "--all",
            action="store_true",
            dest="every",
            help="every ready document, also those already on the model: chunked and embedded again as "
            "a new upload is (after an upgrade that changed chunking); not resumable, it starts over",
        )

    def handle(
        self, *args: Any, user: str | None, batch: int, dry_run: bool, every: bool, **options: Any
    ) -> None:
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        documents = documents_to_move(username=user, every=every)
        total = len(documents)
        from retrieval.embeddings import model_id

        if not total:
            self.stdout.write(f"Every document is already embedded with {model_id()}.")
            return
        self.stdout.write(f"{total} document(s) to embed again with {model_id()}.")
        if dry_run:
            return
        outcome = reembed_documents(documents, batch=batch, progress=self._progress)
        self.stdout.write(
            f"Moved {outcome.moved} of {total} document(s) ({outcome.chunks} passages); "
            f"{outcome.from_passages} rebuilt from their stored passages (file unreadable)."
        )
        for name, problem in outcome.failed:
            self.stderr.write(f"Not moved: {name}: {problem} (its old passages stay searchable by words)")
        if outcome.failed:
            raise CommandError(f"{len(outcome.failed)} document(s) could not be moved; run again to retry")

    def _progress(self, done: int, total: int) -> None:
        self.stdout.write(f"  {done} of {total}")
