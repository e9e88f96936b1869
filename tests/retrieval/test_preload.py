"""The embedding model is loaded when the web and worker processes start, not on first use."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from retrieval import apps, embeddings
from tests.support import processes

# The engine itself is under test: no vector remembered from another test (tests/support/embedding_cache.py).
pytestmark = pytest.mark.real_embeddings

LOADED = "embedding model loaded in"


def wait_for_line(log: Path, text: str, proc: subprocess.Popen, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = log.read_text(errors="replace") if log.exists() else ""
        if text in content:
            return content
        if proc.poll() is not None:
            raise AssertionError(f"the process exited ({proc.returncode}) before saying {text!r}:\n{content}")
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} within {timeout} s:\n{log.read_text(errors='replace')}")


def started(command: list[str], log: Path) -> subprocess.Popen:
    env = processes.process_env(LOG_LEVEL="INFO")
    with log.open("wb") as output:
        return subprocess.Popen(command, cwd=processes.ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)


@pytest.mark.processes
@pytest.mark.django_db
def test_a_worker_process_loads_the_model_as_it_starts(tmp_path):
    proc = started([sys.executable, "manage.py", "qcluster"], tmp_path / "worker.log")
    try:
        content = wait_for_line(tmp_path / "worker.log", LOADED, proc)
    finally:
        processes.stop(proc)
    # Loaded by the worker process that takes tasks, before any task asked for it.
    assert "ready for work" in content
    assert content.index("ready for work") < content.index(LOADED)


@pytest.mark.processes
@pytest.mark.django_db
def test_a_web_process_loads_the_model_as_it_starts(tmp_path):
    port = processes.free_port()
    command = [
        sys.executable,
        "-m",
        "daphne",
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        "mindsearch.asgi:application",
    ]
    proc = started(command, tmp_path / "web.log")
    try:
        wait_for_line(tmp_path / "web.log", LOADED, proc)
        processes.wait_for_port(port, proc)
    finally:
        processes.stop(proc)


def test_preloading_loads_the_configured_model_once(monkeypatch):
    monkeypatch.setattr(embeddings, "_models", {})
    apps.preload_in_background().join(timeout=120)
    model = embeddings._models["local"]
    apps.preload_embeddings()
    assert embeddings._models == {"local": model}


def test_a_model_that_cannot_load_is_logged_not_raised(monkeypatch, settings, caplog):
    monkeypatch.setattr(embeddings, "_models", {})
    settings.EMBEDDING_BACKEND = "sentence-transformers"
    settings.EMBEDDING_MODEL = "/nonexistent/model"
    real_find_spec = embeddings.importlib.util.find_spec
    monkeypatch.setattr(
        embeddings.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "sentence_transformers" else real_find_spec(name, *args),
    )
    apps.preload_embeddings()
    assert "the embedding model could not be loaded" in caplog.text
    assert "not installed" in caplog.text
