"""Start the real MindSearch processes (daphne, qcluster, manage.py) against the test database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
    """A DATABASE_URL for the database pytest-django created (the embedded server's socket)."""
    db = connection.settings_dict
    host = quote(db["HOST"], safe="")
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{db['USER']}{password}@{host}{port}/{db['NAME']}"


def process_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env.update(
        DEBUG="1",
        DATABASE_URL=test_database_url(),
        # One key for every process, as in a deployment: without it a process with a data folder
        # of its own generates its own development key, and what the worker signs (django-q2's
        # cluster stats, sessions) means nothing to the others.
        SECRET_KEY=settings.SECRET_KEY,
        ALLOWED_HOSTS="127.0.0.1,localhost",
        PYTHONUNBUFFERED="1",
        MINDSEARCH_WORKERS="1",
        # Accounts signed up in a test are plain users, as in tests/conftest.py: the first-run
        # administrator is tested where it is meant (tests/mindsearch/test_first_run_admin.py).
        MINDSEARCH_FIRST_USER_ADMIN="0",
    )
    env.update(extra)
    return env


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listened on port {port} within {timeout}s")


def stop(proc: subprocess.Popen, timeout: float = 15) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def daphne(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "mindsearch.asgi:application"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    try:
        wait_for_port(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)


@contextmanager
def qcluster(env: dict[str, str]) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env)
    try:
        yield proc
    finally:
        stop(proc)


def manage(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
