"""The embedded PostgreSQL: shared by concurrent processes, kept across restarts, stopped when idle."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.processes import ROOT

pytestmark = pytest.mark.processes

# Each child starts (or joins) the server in DATA_DIR, then runs SQL on it and prints JSON.
CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import psycopg
    from mindsearch import embedded_db

    data_dir, statement, hold = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    db = embedded_db.start(data_dir)
    with psycopg.connect(host=db["HOST"], user=db["USER"], dbname=db["NAME"], autocommit=True) as conn:
        rows = []
        for part in filter(None, statement.split(";")):
            cursor = conn.execute(part)
            rows = cursor.fetchall() if cursor.description else []
        pid = conn.execute("SELECT pg_postmaster_start_time()::text").fetchone()[0]
    time.sleep(hold)
    print(json.dumps({"host": db["HOST"], "started": pid, "rows": [list(r) for r in rows]}))
    """
)


def child(data_dir: Path, statement: str = "", hold: float = 0) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data_dir), statement, str(hold)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


def postmaster_running(data_dir: Path) -> bool:
    return (data_dir / "pgdata" / "postmaster.pid").exists()


def test_concurrent_processes_share_one_server(tmp_path: Path) -> None:
    procs = [child(tmp_path, "SELECT 1", hold=1.5) for _ in range(3)]
    results = [result(proc) for proc in procs]
    assert len({r["host"] for r in results}) == 1
    assert len({r["started"] for r in results}) == 1


def test_data_survives_a_restart_and_the_last_process_stops_the_server(tmp_path: Path) -> None:
    result(child(tmp_path, "CREATE TABLE notes (body text); INSERT INTO notes VALUES ('kept')"))
    assert not postmaster_running(tmp_path)
    again = result(child(tmp_path, "SELECT body FROM notes"))
    assert again["rows"] == [["kept"]]


def test_a_killed_process_does_not_keep_the_server_alive(tmp_path: Path) -> None:
    holder = child(tmp_path, "SELECT 1", hold=60)
    handles = tmp_path / "pgdata" / ".handle_pids.json"
    # The holder is registered once its server is up; kill it only then, not mid-start.
    deadline = time.monotonic() + 60
    while not (handles.exists() and str(holder.pid) in handles.read_text()):
        assert holder.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    holder.kill()
    holder.wait()
    result(child(tmp_path, "SELECT 1"))
    assert not postmaster_running(tmp_path)


def postgres_processes(data_dir: Path) -> list[str]:
    """Command lines of the PostgreSQL processes serving `data_dir`."""
    import psutil

    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if "postgres" in (process.info["name"] or "") and str(data_dir) in cmdline:
            found.append(cmdline)
    return found


def test_importing_the_settings_starts_no_database(tmp_path: Path) -> None:
    """`django.setup()` with the settings (mypy, a command with no use for the database) neither
    starts the embedded PostgreSQL nor creates its data folder; a connection does both."""
    data_dir = tmp_path / "fresh"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DEBUG": "1",
        "MINDSEARCH_DATA_DIR": str(data_dir),
        "DJANGO_SETTINGS_MODULE": "mindsearch.settings",
    }
    watch = (
        "import django, sys; django.setup(); "
        "from django.conf import settings; print(settings.DATABASES['default']['HOST'] or '-', flush=True); "
        "sys.stdin.readline()"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", watch],
        cwd=ROOT,
        env=env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        assert child.stdout.readline().strip() == "-"  # set up, no socket folder known yet
        assert postgres_processes(data_dir) == []
        assert not (data_dir / "pgdata").exists()
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    connect = (
        "import django; django.setup(); from django.db import connection; "
        "connection.ensure_connection(); print(connection.settings_dict['HOST'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", connect], cwd=ROOT, env=env, text=True, capture_output=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()  # the first connection started the server and knew its socket
    assert (data_dir / "pgdata" / "PG_VERSION").exists()
