"""`manage.py serve`: the web server and a worker together, stopped together.

This is what `make run` runs after migrating. It holds the embedded database open for both
children, prints the address once the web server answers, and on Ctrl-C (or SIGTERM) stops
both cleanly; if either child dies, the other is stopped too.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

STOP_GRACE_SECONDS = 15


class Command(BaseCommand):
    help = "Run daphne (web) and qcluster (worker) together until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        children = {
            "web": subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), "mindsearch.asgi:application"]
            ),
            "worker": subprocess.Popen([sys.executable, "manage.py", "qcluster"]),
        }
        stopping = False

        def request_stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        announced = False
        try:
            while not stopping:
                if not announced and _port_open(host, port):
                    self.stdout.write(self.style.SUCCESS(f"MindSearch is running at http://{host}:{port}/"))
                    self.stdout.write("Press Ctrl-C to stop the web server and the worker.")
                    announced = True
                exited = [name for name, proc in children.items() if proc.poll() is not None]
                if exited:
                    self.stderr.write(f"The {exited[0]} process exited; stopping the other one.")
                    break
                time.sleep(0.3)
        finally:
            _stop(children.values())
        self.stdout.write("Stopped.")
        if not stopping:
            sys.exit(1)


def _port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def _stop(processes: Any) -> None:
    running = [proc for proc in processes if proc.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for proc in running:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
