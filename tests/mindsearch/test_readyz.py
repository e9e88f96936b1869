"""/readyz tells the truth with the PostgreSQL channel layer (issue 26, finding 10): 200 probes of
a busy daphne with a worker all answer 200, and the probes leave no message rows behind. Before,
275 of 292 probes answered 503 "channels unreachable" on a healthy instance."""

from __future__ import annotations

import threading
import time
import urllib.request
from urllib.error import HTTPError

import pytest
from channels_postgres.models import Message

from tests.support import processes

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

PROBES = 200


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except HTTPError as error:
        return error.code, error.read()


def keep_busy(base: str, stop: threading.Event) -> None:
    """Another visitor: pages, one after another, while the probes run."""
    while not stop.is_set():
        get(f"{base}/accounts/login/")


def test_two_hundred_probes_of_a_busy_instance_are_all_ready() -> None:
    env = processes.process_env(LOG_LEVEL="WARNING")
    with processes.qcluster(env), processes.daphne(env) as address:
        base = f"http://{address}"
        deadline = time.monotonic() + 90
        while get(f"{base}/readyz")[0] != 200:  # the worker's first report
            assert time.monotonic() < deadline, get(f"{base}/readyz")
            time.sleep(0.5)
        stop = threading.Event()
        visitors = [threading.Thread(target=keep_busy, args=(base, stop)) for _ in range(3)]
        for visitor in visitors:
            visitor.start()
        try:
            answers = [get(f"{base}/readyz") for _ in range(PROBES)]
        finally:
            stop.set()
            for visitor in visitors:
                visitor.join(30)
    refused = [(n, body) for n, (status, body) in enumerate(answers) if status != 200]
    assert not refused, f"{len(refused)} of {PROBES} not ready (probe, answer): {refused[:3]}"
    assert not Message.objects.exists()
