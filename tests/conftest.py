from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.backends.signals import connection_created
from django.test import Client
from django.utils import translation
from psycopg import sql
from pytest_django.plugin import DjangoDbBlocker

from tests.support.embedding_cache import FILE_NAME, VectorStore, remembering_methods
from tests.support.static_files import find_once
from tests.support.world import World, loopback_world

# The count of checks run, shown at the end of every run (tests/support/assertion_count.py).
pytest_plugins = ("tests.support.assertion_count",)

# The slow tier (`make test-e2e`): what starts real processes (daphne, qcluster, a model server)
# or drives the browser. `make test` runs everything else, in parallel.
E2E_FOLDERS = ("browser", "e2e_llm")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.parent.name
        if folder in E2E_FOLDERS or item.get_closest_marker("processes") is not None:
            item.add_marker(pytest.mark.e2e)


def _commit_without_waiting_for_the_disk(sender: object, connection: Any, **kwargs: object) -> None:
    """Test databases are thrown away: a commit need not wait for its WAL to reach the disk.

    On this shared machine a commit waited 6-16 ms for the flush and 2 ms without it; the test
    database's creation and migrations, every commit of a transactional test and the TRUNCATE
    after it took tens of seconds of waiting on a loaded disk (a test's setup 19 s, with 0.1 s of
    CPU). A server that stops or crashes loses no committed row it still has to serve: the
    setting only lets the last commits' WAL be written a moment later (PostgreSQL's
    "asynchronous commit"). Application code never sets it."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO off")


connection_created.connect(_commit_without_waiting_for_the_disk)


@pytest.fixture(scope="session")
def django_db_setup(
    request: pytest.FixtureRequest,
    django_test_environment: None,
    django_db_blocker: DjangoDbBlocker,
    django_db_modify_db_settings: None,
) -> Iterator[None]:
    """Each test process's database, copied from a template migrated once
    (tests/support/test_database.py); the PostgreSQL channel layer pointed at it."""
    from channels.layers import channel_layers
    from django.conf import settings
    from django.db import connection

    from tests.support.test_database import test_databases

    session = ExitStack()
    with django_db_blocker.unblock():
        session.enter_context(test_databases(verbosity=request.config.option.verbose))
        # Asynchronous commit for every other session on it too: the channel layer's pool and
        # the processes the slow tier starts.
        with connection.cursor() as cursor:
            cursor.execute(
                sql.SQL("ALTER DATABASE {} SET synchronous_commit TO off").format(
                    sql.Identifier(connection.settings_dict["NAME"])
                )
            )
    layer: dict[str, Any] = settings.CHANNEL_LAYERS["default"]
    config = layer.get("CONFIG", {})
    if "NAME" in config:
        config["NAME"] = connection.settings_dict["NAME"]
    channel_layers.backends.clear()
    yield
    # The channel layer's connection pool (and any child process) may still hold sessions on
    # the test database; end them so it can be dropped.
    with django_db_blocker.unblock():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        session.close()


@pytest.fixture(scope="session", autouse=True)
def static_files_found_once() -> Iterator[None]:
    """Each test client's WhiteNoise reuses the static files the first one found
    (tests/support/static_files.py)."""
    undo = find_once()
    yield
    undo()


@pytest.fixture(scope="session")
def embedding_store() -> Iterator[VectorStore]:
    """The bundled model's vectors, remembered for the session's workers and the next run
    (tests/support/embedding_cache.py)."""
    from django.conf import settings

    folder = Path(settings.MINDSEARCH_DATA_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    store = VectorStore(folder / FILE_NAME)
    yield store
    store.close()


@pytest.fixture(autouse=True)
def remembered_embeddings(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test but those marked `real_embeddings` gets the engine's vectors from the store
    when it has them: the same vectors, without encoding the same texts in every test."""
    if request.node.get_closest_marker("real_embeddings") is not None:
        return
    from retrieval import embeddings

    store = request.getfixturevalue("embedding_store")
    for name, method in remembering_methods(store).items():
        monkeypatch.setattr(embeddings._BundledE5, name, method)


@pytest.fixture
def alice(db: None) -> User:
    return User.objects.create_user("alice", "alice@example.com", "correct horse battery")


@pytest.fixture
def bob(db: None) -> User:
    return User.objects.create_user("bob", "bob@example.com", "another staple battery")


@pytest.fixture
def alice_client(alice: User) -> Client:
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(bob: User) -> Client:
    client = Client()
    client.force_login(bob)
    return client


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """Tests are about the views, not the hasher; the default one takes ~0.4 s a try."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def default_language() -> Iterator[None]:
    """Each test starts in the default language: a request in Russian leaves Russian active in
    the thread (the locale middleware activates it and nothing resets it), and messages made
    outside a request would follow it into the next test."""
    translation.deactivate()
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def no_first_user_admin(settings: Any) -> None:
    """Accounts made in tests stay plain users unless a test asks for the first-run rule
    (tests/mindsearch/test_first_run_admin.py turns MINDSEARCH_FIRST_USER_ADMIN back on)."""
    settings.FIRST_USER_ADMIN = False


@pytest.fixture
def web_search_configured(settings: Any) -> None:
    """SEARXNG_URL set (to a refused loopback port), for tests that start a *Web* topic but never
    search: without it the form, the API and MCP refuse a Web topic (issue 29)."""
    settings.SEARXNG_URL = "http://127.0.0.1:9"


@pytest.fixture(autouse=True)
def no_internet(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never reach the internet: outside services default to a refused loopback port,
    and resolving any name but localhost fails loudly."""
    settings.JINA_READER_URL = "http://127.0.0.1:9/"
    settings.AITUNNEL_API_KEY = ""
    settings.SEARXNG_URL = ""
    real_getaddrinfo = socket.getaddrinfo

    def loopback_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host or "")
        if name not in ("localhost", "") and not _is_ip_literal(name):
            raise OSError(f"tests may not resolve {name!r}: fake it with a loopback server")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)


def _is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


@pytest.fixture(scope="session")
def redis_base() -> Iterator[str]:
    """A Redis URL without a database number (tests/support/redis_server.py)."""
    from tests.support.redis_server import redis_base_url

    with redis_base_url() as url:
        yield url


@pytest.fixture
def loopback(settings: Any) -> Iterator[World]:
    """The scripted loopback world (tests/support/world.py), with settings pointed at it."""
    with loopback_world(settings) as w:
        yield w
