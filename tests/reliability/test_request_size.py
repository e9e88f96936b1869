"""Request bodies are bounded before they are read (issue 15): a real daphne answers 413 to a
declared or streamed body over its route's limit without buffering it, serves the next page at
once, and believes forwarded headers only from TRUSTED_PROXIES."""

from __future__ import annotations

import asyncio
import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import yaml
from django.test import override_settings

from mindsearch import bodylimit
from tests.support.processes import ROOT, daphne, process_env

SMALL = 64 * 1024
UPLOADS = 512 * 1024
BODY = 4 * 1024 * 1024  # a few MB proves what 100 MB would: nothing of it is kept


@pytest.fixture(scope="module")
def web(django_db_setup: None, django_db_blocker: Any) -> Iterator[tuple[str, int]]:
    with django_db_blocker.unblock():
        env = process_env(
            REQUEST_MAX_BYTES=str(SMALL),
            UPLOAD_MAX_REQUEST_BYTES=str(UPLOADS),
            TOPIC_REQUEST_MAX_BYTES=str(SMALL),  # /api/topics: a question and maybe a picture
            TRUSTED_PROXIES="10.9.8.7",
        )
        with daphne(env) as address:
            host, port = address.split(":")
            yield host, int(port)


def daphne_pid(port: int) -> int:
    for conn in psutil.net_connections("tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            return conn.pid
    raise LookupError(port)


def send_raw(host: str, port: int, head: bytes, body_chunks: Iterator[bytes]) -> bytes:
    """Send a request piece by piece, as a client does that stops once it is answered, and
    return the answer."""
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(head)
        try:
            for chunk in body_chunks:
                if select.select([sock], [], [], 0)[0]:
                    break
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server stopped listening to the rest: fine, its answer is what counts
        answer = b""
        try:
            while piece := sock.recv(65536):
                answer += piece
        except (ConnectionResetError, TimeoutError):
            pass
    return answer


def pieces(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        yield b"x" * min(size, total - sent)
        sent += size


def multipart_head(
    path: str, length: int, host: str, kind: str = "multipart/form-data; boundary=zz"
) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {kind}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def peak_growth(port: int, action: Any) -> int:
    """How far daphne's resident memory rose above its size before `action`, sampled as it ran."""
    process = psutil.Process(daphne_pid(port))
    before = process.memory_info().rss
    peak, done = [before], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        action()
    finally:
        done.set()
        sampler.join()
    return peak[0] - before


PATHS = ["/accounts/login/", "/no/such/page/", "/api/topics", "/admin/login/"]


@pytest.mark.processes
def test_declared_bodies_over_the_limit_are_refused_before_they_are_read(web: tuple[str, int]) -> None:
    host, port = web
    send_raw(host, port, multipart_head("/", BODY, host), pieces(BODY))  # warm: first-use imports
    answers: list[bytes] = []

    def flood() -> None:
        senders = [
            threading.Thread(
                target=lambda path=path: answers.append(
                    send_raw(host, port, multipart_head(path, BODY, host), pieces(BODY))
                )
            )
            for path in PATHS
        ]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()

    grown = peak_growth(port, flood)
    assert len(answers) == len(PATHS)
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"at most 65536 bytes" in answer
    assert grown < BODY  # four bodies of 4 MB came in together; none of them was kept


@pytest.mark.processes
def test_a_streamed_body_over_the_limit_is_refused(web: tuple[str, int]) -> None:
    host, port = web
    head = (
        f"POST /accounts/signup/ HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n\r\n"
    ).encode()

    def chunked() -> Iterator[bytes]:
        for piece in pieces(BODY):
            yield f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        yield b"0\r\n\r\n"

    answer = send_raw(host, port, head, chunked())
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


@pytest.mark.processes
def test_uploads_have_their_own_larger_limit(web: tuple[str, int]) -> None:
    host, port = web
    # Under the upload limit (but over the small one): it reaches Django, which wants a session.
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request(
        "POST", "/api/documents", body=b"x" * (UPLOADS - 1024), headers={"Content-Type": "text/plain"}
    )
    assert conn.getresponse().status == 401
    answer = send_raw(host, port, multipart_head("/api/documents", UPLOADS + 1, host), pieces(UPLOADS + 1))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def sign_in_page_seconds(host: str, port: int) -> float:
    started = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", "/accounts/login/")
    assert conn.getresponse().status == 200
    return time.monotonic() - started


@pytest.mark.processes
def test_a_normal_page_is_served_at_once_after_refusals(web: tuple[str, int]) -> None:
    host, port = web
    usual = min(sign_in_page_seconds(host, port) for _ in range(3))
    for _ in range(3):
        send_raw(host, port, multipart_head("/", BODY, host), pieces(BODY))
    # A server still reading the refused bodies answers seconds later; one that dropped them
    # answers as it did before them (the margin is for a busy machine, measured against itself).
    assert sign_in_page_seconds(host, port) < 5 * usual + 0.5


ROOMY = 40 * 1024 * 1024  # the upload routes' limit in `roomy_web`
BIG = 12 * 1024 * 1024  # within it


@pytest.fixture(scope="module")
def roomy_web(django_db_setup: None, django_db_blocker: Any) -> Iterator[tuple[str, int]]:
    with django_db_blocker.unblock():
        env = process_env(UPLOAD_MAX_REQUEST_BYTES=str(ROOMY), UPLOAD_MAX_BYTES=str(ROOMY))
        with daphne(env) as address:
            host, port = address.split(":")
            yield host, int(port)


def multipart_file(content: bytes, name: str = "notes.txt") -> tuple[bytes, bytes]:
    """(start, end) of a multipart body with one file field `file` holding `content`."""
    start = (
        f'--zz\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()
    return start, b"\r\n--zz--\r\n"


@pytest.mark.processes
def test_an_accepted_body_is_not_held_in_daphnes_memory(roomy_web: tuple[str, int]) -> None:
    """Bodies within the upload routes' larger limit, anonymous and answered 401: before, daphne
    copied each whole into the application's queue after twisted had parsed its multipart into
    memory (an anonymous 100 MB upload grew daphne by ~200 MB, so a few such requests could still
    take the web process down). Now each is read to Django from daphne's spool file."""
    host, port = roomy_web
    start, end = multipart_file(b"")
    length = len(start) + BIG + len(end)

    def body() -> Iterator[bytes]:
        yield start
        yield from pieces(BIG)
        yield end

    send_raw(host, port, multipart_head("/api/documents", length, host), body())  # warm up
    answers: list[bytes] = []

    def flood() -> None:
        senders = [
            threading.Thread(
                target=lambda: answers.append(
                    send_raw(host, port, multipart_head("/api/documents", length, host), body())
                )
            )
            for _ in range(4)
        ]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()

    grown = peak_growth(port, flood)
    assert len(answers) == 4
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert grown < BIG, f"daphne grew by {grown / 2**20:.1f} MB for four bodies of {BIG / 2**20:.0f} MB"


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_spooled_body_reaches_the_application_whole(roomy_web: tuple[str, int]) -> None:
    """The bytes read from daphne's spool file are the bytes sent, in order (a signed-in upload
    stored with the sent file's size and hash), and a client cannot name a spooled body."""
    import hashlib

    from django.contrib.auth import get_user_model

    from mindsearch.models import ApiToken

    host, port = roomy_web
    user = get_user_model().objects.create_user("spool", password="Corr3ct-Horse-Battery")
    _row, token = ApiToken.issue(user, "spool")
    content = b"".join(f"line {i} of a long text file\n".encode() for i in range(100_000))
    assert len(content) > 4 * bodylimit.SPOOLED_BODY_MIN_BYTES
    start, end = multipart_file(content, "long.txt")
    conn = http.client.HTTPConnection(host, port, timeout=30)
    headers = {
        "Content-Type": "multipart/form-data; boundary=zz",
        "Authorization": f"Bearer {token}",
        "X-Mindsearch-Spooled-Body": "guessed",  # dropped, never followed
    }
    conn.request("POST", "/api/documents", body=start + content + end, headers=headers)
    response = conn.getresponse()
    answer = response.read()
    assert response.status == 201, answer[:300]
    document = json.loads(answer)
    assert document["size_bytes"] == len(content)
    assert document["sha256"] == hashlib.sha256(content).hexdigest()


def test_a_spooled_body_header_from_a_client_names_nothing() -> None:
    """Under any ASGI server: the header is removed, and an unknown key gives no body."""
    seen: dict[str, Any] = {}

    async def inner(scope: bodylimit.Scope, receive: bodylimit.Receive, send: bodylimit.Send) -> None:
        seen["headers"] = scope["headers"]
        seen["message"] = await receive()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> bodylimit.Message:
        return {"type": "http.request", "body": b"mine", "more_body": False}

    async def send(message: bodylimit.Message) -> None:
        pass

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/documents",
        "client": ["192.0.2.1", 5000],
        "headers": [(bodylimit.SPOOLED_HEADER, b"guessed"), (b"content-length", b"4")],
    }
    asyncio.run(bodylimit.GuardedApp(inner)(scope, receive, send))
    assert seen["headers"] == [(b"content-length", b"4")]
    assert seen["message"]["body"] == b"mine"


def test_forwarded_headers_count_only_from_trusted_proxies() -> None:
    seen: list[bodylimit.Scope] = []

    async def inner(scope: bodylimit.Scope, receive: bodylimit.Receive, send: bodylimit.Send) -> None:
        seen.append(scope)

    async def no_receive() -> bodylimit.Message:
        raise AssertionError("a GET has no body to receive")

    async def no_send(message: bodylimit.Message) -> None:
        raise AssertionError("the inner app answers nothing")

    app = bodylimit.GuardedApp(inner)
    headers = [(b"x-forwarded-for", b"203.0.113.9, 198.51.100.1"), (b"x-forwarded-proto", b"https")]

    async def run(peer: str) -> bodylimit.Scope:
        scope = {"type": "http", "method": "GET", "path": "/", "client": [peer, 5000], "headers": headers}
        scope["scheme"] = "http"
        await app(scope, no_receive, no_send)
        return seen[-1]

    with override_settings(TRUSTED_PROXIES=["10.9.8.0/24"]):
        bodylimit._networks.cache_clear()
        stranger = asyncio.run(run("192.0.2.50"))
        assert stranger["client"][0] == "192.0.2.50"
        assert stranger["scheme"] == "http"
        assert not any(name.startswith(b"x-forwarded") for name, _v in stranger["headers"])
        proxied = asyncio.run(run("10.9.8.7"))
        # The right-most untrusted hop: anything left of it may be the client's own invention.
        assert proxied["client"][0] == "198.51.100.1"
        assert proxied["scheme"] == "https"


# --- The reverse proxy in docker-compose ---------------------------------------------------------


def nginx_limits() -> dict[str, int]:
    """client_max_body_size per location of deploy/nginx/mindsearch.conf, in bytes."""
    text = (ROOT / "deploy/nginx/mindsearch.conf").read_text()
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    limits, location = {}, "default"
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("location "):
            location = line.split()[-2]
        elif line.startswith("client_max_body_size"):
            value = line.split()[1].rstrip(";")
            limits[location] = int(value[:-1]) * units[value[-1]]
        elif line == "}":
            location = "default"
    return limits


def test_the_compose_proxy_refuses_the_same_bodies_and_is_the_only_door(settings: Any) -> None:
    limits = nginx_limits()
    assert limits["default"] == settings.REQUEST_MAX_BYTES
    assert limits["/documents/upload/"] == limits["/api/documents"] == settings.UPLOAD_MAX_REQUEST_BYTES
    assert limits["/topics/import/"] == settings.IMPORT_MAX_REQUEST_BYTES
    assert limits["/topics/new/"] == limits["/api/topics"] == settings.TOPIC_REQUEST_MAX_BYTES
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert "ports" not in services["web"]  # daphne is reached through the proxy only
    assert services["proxy"]["ports"]
    proxy_address = services["proxy"]["networks"]["default"]["ipv4_address"]
    assert compose["x-app-env"]["TRUSTED_PROXIES"] == proxy_address


@pytest.mark.processes
def test_a_forwarded_proto_from_an_untrusted_client_is_not_believed(django_db_blocker: Any) -> None:
    """With DEBUG off, plain HTTP is redirected to HTTPS; a client that merely claims
    `X-Forwarded-Proto: https` (no TRUSTED_PROXIES) is redirected all the same."""
    with django_db_blocker.unblock():
        env = process_env(DEBUG="0", SECRET_KEY="x" * 50, ALLOWED_HOSTS="127.0.0.1", LOG_LEVEL="WARNING")
    with daphne(env) as address:
        host, port = address.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", "/accounts/login/", headers={"X-Forwarded-Proto": "https"})
        response = conn.getresponse()
        assert response.status == 301 and response.getheader("Location", "").startswith("https://")
