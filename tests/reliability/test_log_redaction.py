"""Share and invite tokens do not reach the logs (issue 26, finding 10): daphne's access log and
Django's request log write `[redacted]` where a share link's or an invite's token was."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path
from urllib.error import HTTPError

import pytest

from mindsearch.access_log import redact
from tests.support import processes

SHARE_TOKEN = "Zq3share-token-that-opens-a-report"
INVITE_TOKEN = "Kp9invite-token-that-makes-an-account"


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except HTTPError as error:
        return error.code


def test_redact_keeps_the_rest_of_the_line() -> None:
    assert redact(f"GET /s/{SHARE_TOKEN}/citations/3/") == "GET /s/[redacted]/citations/3/"
    assert redact(f"/accounts/signup/?invite={INVITE_TOKEN}&next=/") == (
        "/accounts/signup/?invite=[redacted]&next=/"
    )
    assert redact("/topics/12/share/") == "/topics/12/share/"


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_daphnes_access_log_and_djangos_request_log_hold_no_token(tmp_path: Path) -> None:
    access, errors = tmp_path / "access.log", tmp_path / "stderr.log"
    port = processes.free_port()
    cmd = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "--access-log", str(access)]
    env = processes.process_env(LOG_LEVEL="INFO")
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            [*cmd, "mindsearch.asgi:application"], cwd=processes.ROOT, env=env, stderr=stderr
        )
        try:
            processes.wait_for_port(port, proc)
            base = f"http://127.0.0.1:{port}"
            assert get(f"{base}/s/{SHARE_TOKEN}/") == 404
            assert get(f"{base}/s/{SHARE_TOKEN}/report.md") == 404
            assert get(f"{base}/accounts/signup/?invite={INVITE_TOKEN}") in (200, 403)
        finally:
            processes.stop(proc)
    logged = access.read_text() + errors.read_text()
    assert "/s/[redacted]/" in access.read_text()
    assert "invite=[redacted]" in access.read_text()
    assert "Not Found: /s/[redacted]/" in errors.read_text()
    assert SHARE_TOKEN not in logged
    assert INVITE_TOKEN not in logged
