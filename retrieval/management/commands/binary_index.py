"""Build (or drop) the binary-quantised vector index that RETRIEVAL_BINARY_QUANTIZATION uses."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from retrieval import quantized


class Command(BaseCommand):
    help = "Build the bit-string HNSW index for RETRIEVAL_BINARY_QUANTIZATION (or drop it with --drop)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--drop", action="store_true", help="drop the index instead")

    def handle(self, *args: Any, drop: bool, **options: Any) -> None:
        if drop:
            quantized.drop_index()
            self.stdout.write("Dropped the binary-quantised index; searches use the plain index.")
            return
        if quantized.index_exists():
            self.stdout.write("The binary-quantised index already exists.")
        else:
            self.stdout.write("Building the binary-quantised index (uploads go on meanwhile)…")
            quantized.create_index()
            self.stdout.write("Built.")
        if not settings.RETRIEVAL_BINARY_QUANTIZATION:
            self.stdout.write("Set RETRIEVAL_BINARY_QUANTIZATION=1 for searches to use it.")
