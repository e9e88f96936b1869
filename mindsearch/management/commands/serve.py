"""`manage.py serve`: the web server and a worker together, stopped together.

This is what `make run` runs after migrating. It holds the embedded database open for both
children, prints the address once the web server answers, and on Ctrl-C or SIGTERM (to it alone
or to its whole process group) stops both cleanly; if either child dies, the others are stopped
too. Being the last user of the embedded database, it stops that server on its way out.

With `--web-processes N` (or WEB_PROCESSES), N daphne processes share one listening socket that
this command opens: the kernel hands each new connection to one of them. A daphne process runs
Python on one core at a time, so on a machine with several cores more of them answer more pages.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

# The worker gives a run in flight 10 s to hand its topic back (mindsearch/worker.py), then stops.
STOP_GRACE_SECONDS = 25


class Command(BaseCommand):
    help = "Run daphne (web) and qcluster (worker) together until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--web-processes", type=int, default=None, help="default: WEB_PROCESSES")

    def handle(self, *args: Any, host: str, port: int, web_processes: int | None, **options: Any) -> None:
        count = max(1, web_processes or settings.WEB_PROCESSES)
        # Start (or join) the embedded database here, once, and hold it while the children come
        # and go: a restarted worker must not find it stopped because it was the last one out.
        connection.ensure_connection()
        connection.close()
        listener = listening_socket(host, port)
        children = {f"web {n + 1}" if count > 1 else "web": start_web(listener) for n in range(count)}
        children["worker"] = subprocess.Popen([sys.executable, "manage.py", "qcluster"])
        listener.close()  # the web processes hold it now
        stopping = False

        def request_stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        announced = False
        try:
            while not stopping:
                if not announced and answers_http(host, port):
                    self.stdout.write(self.style.SUCCESS(f"MindSearch is running at http://{host}:{port}/"))
                    self.stdout.write("Press Ctrl-C to stop the web server and the worker.")
                    announced = True
                exited = [name for name, proc in children.items() if proc.poll() is not None]
                if exited:
                    self.stderr.write(f"The {exited[0]} process exited; stopping the others.")
                    break
                time.sleep(0.3)
        finally:
            _stop(children.values())
        self.stdout.write("Stopped.")
        if not stopping:
            sys.exit(1)


def listening_socket(host: str, port: int) -> socket.socket:
    """The web server's socket, opened here so that several daphne processes can share it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(1024)
    listener.set_inheritable(True)
    return listener


def start_web(listener: socket.socket) -> subprocess.Popen[bytes]:
    fd = listener.fileno()
    # An application that has not answered in WEB_HTTP_TIMEOUT_SECONDS gets 503 (idle and slow
    # clients: mindsearch/connections.py).
    timeout = str(settings.WEB_HTTP_TIMEOUT_SECONDS)
    cmd = [
        sys.executable,
        "-m",
        "daphne",
        "--fd",
        str(fd),
        "--http-timeout",
        timeout,
        "mindsearch.asgi:application",
    ]
    return subprocess.Popen(cmd, pass_fds=[fd])


def answers_http(host: str, port: int) -> bool:
    """The socket is open from the start (this command made it): wait for an HTTP answer."""
    try:
        with socket.create_connection((host, port), timeout=0.5) as sock:
            sock.sendall(f"HEAD /accounts/login/ HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            return sock.recv(5) == b"HTTP/"
    except OSError:
        return False


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
