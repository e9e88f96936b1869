"""A Redis for the tests that need one: the machine's on 127.0.0.1:6379, else a private
`redis-server` on a free port, else those tests are skipped by name with how to run them —
except under CI (`CI=true`), where a missing Redis is a failure, not a skip."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from tests.support import needs

MACHINE_REDIS = "redis://127.0.0.1:6379"
HOW = (
    "Redis is not available: start one on 127.0.0.1:6379 or install redis-server "
    "(Debian: apt-get install redis-server) to run this test"
)


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def _private_server(binary: str) -> Iterator[str]:
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="mindsearch-redis-") as folder:
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        server = subprocess.Popen([*command, "--dir", folder], stdout=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 10
            while not _answers(url):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{binary} did not start on port {port}")
                time.sleep(0.05)
            yield url
        finally:
            server.terminate()
            server.wait(timeout=10)


@contextmanager
def redis_base_url() -> Iterator[str]:
    """A Redis URL without a database number; skips (or fails under CI) when none can be had."""
    if _answers(MACHINE_REDIS):
        yield MACHINE_REDIS
        return
    binary = shutil.which("redis-server")
    if binary:
        with _private_server(binary) as url:
            yield url
        return
    needs.absent(HOW)
