"""Each test process's database, copied from a migrated template instead of migrated anew.

Migrating an empty database took 29 s of a test process's start on this machine (23 s of it
Django rendering the migration states, CPU the other test processes wanted), and every
pytest-xdist worker did it again, every run. Now the first process to need it migrates a
template database once — named by a digest of every migration and of requirements.txt (whose
packages bring migrations of their own), so a changed migration builds a new one and the old
is dropped — and each process copies it (`CREATE DATABASE … TEMPLATE`, well under a second),
then lets Django's own test set-up find it (`keepdb`: it checks there is nothing left to migrate).
At the end of the session the process's copy is dropped; the template stays in the server of
MINDSEARCH_DATA_DIR for the next run.

A PostgreSQL advisory lock on the maintenance database keeps two processes from building the
template at once (the second waits, then copies)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections
from django.test.utils import setup_databases, teardown_databases
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "test_template_"
LOCK = 7_413_092  # pg_advisory_lock's key for building the template


def digest() -> str:
    """What the migrated schema depends on: our migrations and the pinned packages' versions."""
    hashed = hashlib.sha256()
    for path in sorted(ROOT.glob("*/migrations/*.py")):
        hashed.update(path.relative_to(ROOT).as_posix().encode())
        hashed.update(path.read_bytes())
    hashed.update((ROOT / "requirements.txt").read_bytes())
    return hashed.hexdigest()[:16]


@contextmanager
def test_databases(verbosity: int = 0) -> Iterator[None]:
    """The test databases for the session: the default one copied from the template, then set
    up by Django as always (mirrors, checks) with nothing left to migrate; dropped afterwards."""
    connection = connections["default"]
    test_name = connection.creation._get_test_db_name()  # type: ignore[attr-defined]
    with _maintenance(connection) as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [LOCK])
        try:
            template = PREFIX + digest()
            if not _exists(cursor, template):
                _build(cursor, connection, template)
            cursor.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(test_name))
            )
            cursor.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(test_name), sql.Identifier(template)
                )
            )
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK])
    old_config = setup_databases(
        verbosity=verbosity, interactive=False, keepdb=True, serialized_aliases=set()
    )
    try:
        yield
    finally:
        teardown_databases(old_config, verbosity=verbosity, keepdb=False)


# Its name starts with "test" in a file named test_*.py: pytest collected it as a test that ran
# nothing (the context manager was made, never entered) and always passed.
test_databases.__test__ = False  # type: ignore[attr-defined]


@contextmanager
def _maintenance(connection: Any) -> Iterator[Any]:
    with connection.creation._nodb_cursor() as cursor:
        yield cursor


def _exists(cursor: Any, name: str) -> bool:
    cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
    return cursor.fetchone() is not None


def _build(cursor: Any, connection: Any, template: str) -> None:
    """Migrate a new database under a temporary name, then give it the template's name: a build
    that dies half-way leaves no template behind. Templates of other digests are dropped."""
    cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [PREFIX + "%"])
    for (stale,) in cursor.fetchall():
        cursor.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(stale)))
    building = f"{template}_building"
    name, test_settings = connection.settings_dict["NAME"], connection.settings_dict.setdefault("TEST", {})
    wanted = test_settings.get("NAME")
    test_settings["NAME"] = building
    try:
        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    finally:
        connection.close()
        test_settings["NAME"] = wanted
        connection.settings_dict["NAME"] = name
        settings.DATABASES[connection.alias]["NAME"] = name
    cursor.execute(
        sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(building), sql.Identifier(template))
    )
