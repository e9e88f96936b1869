"""`manage.py serve` (what `make run` runs): web and worker start together and stop together."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from tests.support import processes

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def start_serve(port: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), *extra],
        cwd=processes.ROOT,
        env=processes.process_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_line(proc: subprocess.Popen, text: str, timeout: float = 60) -> list[str]:
    lines: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"{text!r} never printed:\n{''.join(lines)}")


def test_serve_prints_the_url_serves_pages_and_stops_both_on_ctrl_c() -> None:
    port = processes.free_port()
    proc = start_serve(port)
    try:
        wait_for_line(proc, f"MindSearch is running at http://127.0.0.1:{port}/")
        children = psutil.Process(proc.pid).children()
        commands = [" ".join(child.cmdline()) for child in children]
        assert any("daphne" in c for c in commands) and any("qcluster" in c for c in commands)
        response = httpx.get(f"http://127.0.0.1:{port}/accounts/login/")
        assert response.status_code == 200
        assert "Sign in" in response.text
        proc.send_signal(signal.SIGINT)
        wait_for_line(proc, "Stopped.")
        assert proc.wait(30) == 0
        psutil.wait_procs(children, timeout=10)
        assert not [child for child in children if child.is_running() and child.status() != "zombie"]
    finally:
        processes.stop(proc)


def test_serve_stops_the_worker_when_the_web_server_dies() -> None:
    port = processes.free_port()
    proc = start_serve(port)
    try:
        wait_for_line(proc, "MindSearch is running")
        children = psutil.Process(proc.pid).children()
        web = next(child for child in children if "daphne" in " ".join(child.cmdline()))
        web.kill()
        wait_for_line(proc, "The web process exited; stopping the others.")
        assert proc.wait(30) == 1
    finally:
        processes.stop(proc)


def test_several_web_processes_share_the_port_and_stop_together() -> None:
    port = processes.free_port()
    proc = start_serve(port, "--web-processes", "2")
    try:
        wait_for_line(proc, f"MindSearch is running at http://127.0.0.1:{port}/")
        children = psutil.Process(proc.pid).children()
        webs = [child for child in children if "daphne" in " ".join(child.cmdline())]
        assert len(webs) == 2
        for _ in range(10):
            # A new connection each time: the kernel gives it to either process.
            assert httpx.get(f"http://127.0.0.1:{port}/accounts/login/").status_code == 200
        webs[0].kill()
        wait_for_line(proc, "The web 1 process exited; stopping the others.")
        assert proc.wait(30) == 1
        psutil.wait_procs(children, timeout=10)
        assert not [child for child in children if child.is_running() and child.status() != "zombie"]
    finally:
        processes.stop(proc)
