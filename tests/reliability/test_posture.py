"""Production posture: HTTPS-only cookies, HSTS and the security headers with DEBUG off, and
secrets that never reach a log, an error message or a database row.

`manage.py check --deploy` with production settings is tests/mindsearch/test_settings.py.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.cookies import SimpleCookie
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django_q.conf import Conf
from django_q.tasks import async_task

from research.models import CacheEntry, Topic
from tests.reliability.html_scan import active_content
from tests.reliability.runs import is_finished, wait_until
from tests.support import processes
from tests.support.fakes import openai_chat, reader, searxng_search
from tests.support.world import PAGES, TOPIC, World, search_pages, world

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"


# --- DEBUG off: HTTPS, HSTS, cookies, headers --------------------------------------------------


@pytest.fixture
def production_site() -> Iterator[str]:
    env = processes.process_env(
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1",
        LOG_LEVEL="WARNING",
        # The test plays the TLS proxy in front: only a listed proxy's X-Forwarded-Proto counts.
        TRUSTED_PROXIES="127.0.0.1",
    )
    with processes.daphne(env) as host:
        yield host


def cookies_of(response: httpx.Response) -> dict[str, str]:
    """Set-Cookie lines by cookie name, whole, to read their flags."""
    found = {}
    for line in response.headers.get_list("set-cookie"):
        found[next(iter(SimpleCookie(line)))] = line
    return found


def test_with_debug_off_only_https_is_served_with_hsts_secure_cookies_and_the_headers(
    production_site: str, settings: Any
) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]  # the server's
    User.objects.create_user("carol", password=PASSWORD)
    base = f"http://{production_site}"
    https = {"X-Forwarded-Proto": "https"}  # as the TLS proxy in front says
    with httpx.Client(base_url=base, timeout=30) as client:
        plain = client.get("/accounts/login/")
        assert plain.status_code == 301 and plain.headers["location"].startswith("https://")

        page = client.get("/accounts/login/", headers=https)
        assert page.status_code == 200
        assert page.headers["strict-transport-security"] == "max-age=31536000; includeSubDomains; preload"
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "same-origin"
        assert page.headers["cross-origin-opener-policy"] == "same-origin"
        csrf_cookie = cookies_of(page)["csrftoken"]
        assert "Secure" in csrf_cookie and "SameSite=Lax" in csrf_cookie

        token = SimpleCookie(csrf_cookie)["csrftoken"].value
        signed_in = client.post(
            "/accounts/login/",
            data={"username": "carol", "password": PASSWORD, "csrfmiddlewaretoken": token},
            headers={**https, "Origin": f"https://{production_site}", "Cookie": f"csrftoken={token}"},
        )
        assert signed_in.status_code == 302, signed_in.text[:500]
        session = cookies_of(signed_in)["sessionid"]
        assert "Secure" in session and "HttpOnly" in session and "SameSite=Lax" in session

        missing = client.get("/no/such/page/", headers=https)
        assert missing.status_code == 404 and "Traceback" not in missing.text
        assert "default-src 'self'" in missing.headers["content-security-policy"]
        assert not active_content(missing.text)

        script = client.get("/static/js/ui.js", headers=https)
        assert script.status_code == 200 and "content-security-policy" in script.headers


# --- Secrets never logged ------------------------------------------------------------------------

SECRETS = {
    "AITUNNEL_API_KEY": f"sk-canary-{secrets.token_hex(12)}",
    "JINA_API_KEY": f"jina_canary_{secrets.token_hex(12)}",
    "SEARXNG_BASIC_AUTH_LOGIN": "searx-canary-login",
    "SEARXNG_BASIC_AUTH_PASSWORD": f"searx-canary-{secrets.token_hex(12)}",
    "SECRET_KEY": f"django-canary-{secrets.token_hex(24)}",
}


def expecting(w: World, *, accepted: bool) -> None:
    """The fakes want the configured secrets, or (accepted=False) other ones, so that every
    rejection path, with its error messages, runs too."""
    key = SECRETS["AITUNNEL_API_KEY"] if accepted else "sk-another-key"
    password = SECRETS["SEARXNG_BASIC_AUTH_PASSWORD"] if accepted else "another-password"
    readable = {f"{w.web.url}pages/{p[0]}?utm_source=searx": (p[1], f"# {p[1]}\n\n{p[4]}") for p in PAGES}
    w.llm.routes[("POST", "/v1/chat/completions")] = openai_chat(w.script, key=key)
    auth = (SECRETS["SEARXNG_BASIC_AUTH_LOGIN"], password)
    w.searxng.routes[("GET", "/search")] = searxng_search(search_pages(w.web.url, PAGES), auth=auth)
    w.reader.fallback = reader(readable, key=SECRETS["JINA_API_KEY"] if accepted else "jina_another")


@contextmanager
def logged_process(args: list[str], env: dict[str, str], log: IO[str]) -> Iterator[subprocess.Popen]:
    """A MindSearch process whose output goes to `log`, to be read afterwards."""
    proc = subprocess.Popen([sys.executable, *args], cwd=processes.ROOT, env=env, stdout=log, stderr=log)
    try:
        if "daphne" in args:
            processes.wait_for_port(int(args[args.index("-p") + 1]), proc)
        yield proc
    finally:
        processes.stop(proc)


def daphne_command(port: int) -> list[str]:
    return ["-m", "daphne", "-v", "2", "-b", "127.0.0.1", "-p", str(port), "mindsearch.asgi:application"]


def leaks_in_database() -> list[str]:
    """Tables holding any secret anywhere in any row (task results and cache included)."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            for name, value in SECRETS.items():
                cursor.execute(f'SELECT count(*) FROM "{table}" AS t WHERE t::text LIKE %s', [f"%{value}%"])
                if cursor.fetchone()[0]:
                    found.append(f"{name} in {table}")
    return found


def test_secrets_never_reach_logs_errors_or_rows(
    alice: User, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    # The worker checks the signature of the tasks this process queues, and the web process the
    # session this process signs in with: both must share the processes' key.
    monkeypatch.setattr(Conf, "SECRET_KEY", SECRETS["SECRET_KEY"])
    settings.SECRET_KEY = SECRETS["SECRET_KEY"]
    with world() as w:
        env = processes.process_env(**{**w.env(), **SECRETS, "LOG_LEVEL": "DEBUG"})
        logs = [tmp_path / name for name in ("worker.log", "web.log")]
        with (
            logs[0].open("w") as worker_log,
            logs[1].open("w") as web_log,
            logged_process(["manage.py", "qcluster"], env, worker_log),
            logged_process(daphne_command(port := processes.free_port()), env, web_log),
        ):
            for accepted in (True, False):
                expecting(w, accepted=accepted)
                CacheEntry.objects.all().delete()  # every service is asked again
                topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
                async_task("research.tasks.plan", topic.pk)
                wait_until(partial(is_finished, topic.pk), 180, "the topic did not finish")
                browser = Client()
                browser.force_login(alice)
                cookie = browser.cookies["sessionid"].value
                for path in ("/status/", f"/topics/{topic.pk}/", "/api/topics"):
                    page = httpx.get(
                        f"http://127.0.0.1:{port}{path}", cookies={"sessionid": cookie}, timeout=60
                    )
                    assert page.status_code == 200, path
                    assert not [n for n, v in SECRETS.items() if v in page.text], path
            time.sleep(1)  # the last lines reach the files
        outcomes = list(Topic.objects.order_by("pk").values_list("status", flat=True))
        assert outcomes == ["completed", "failed"]  # the second run met every rejection
        assert len(w.llm.requests) and all("authorization" in r.headers for r in w.llm.requests)
    text = "\n".join(log.read_text() for log in logs)
    assert "DEBUG" in text and len(text) > 10_000  # the logs were really written, verbosely
    assert [name for name, value in SECRETS.items() if value in text] == []
    assert leaks_in_database() == []
