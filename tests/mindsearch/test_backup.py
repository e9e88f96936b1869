"""`manage.py backup` and `restore`: a backup of one data folder restored into a fresh one.

Both run as an operator would run them, each on its own embedded PostgreSQL (no DATABASE_URL),
with pg_dump and pg_restore from the embedded server's binaries.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from tests.support import processes

pytestmark = pytest.mark.processes

FILL = """
import json
from django.contrib.auth.models import User
from django.core.files.base import ContentFile
from research.models import Report, Topic
from retrieval.models import Chunk, UploadedDocument
owner = User.objects.create_user("keeper", password="a long password 1")
for n in range(3):
    topic = Topic.objects.create(owner=owner, question=f"question {n}", status="completed")
    Report.objects.create(topic=topic, markdown=f"# Report {n}\\nТекст отчёта {n}.")
document = UploadedDocument(owner=owner, original_name="notes.txt", sha256="0" * 64, status="ready")
document.file.save("notes.txt", ContentFile("Заметки: the uploaded file itself.".encode()), save=False)
document.size_bytes = document.file.size
document.save()
for n in range(4):
    Chunk.objects.create(
        document=document, owner=owner, position=n, text=f"chunk {n}", char_start=n, char_end=n + 1,
        embedding=[0.01 * (n + 1)] * 384,
    )
"""

READ = """
import json
from research.models import Report, Topic
from retrieval.models import Chunk, UploadedDocument
document = UploadedDocument.objects.get()
print(json.dumps({
    "topics": sorted(Topic.objects.values_list("question", flat=True)),
    "reports": sorted(Report.objects.values_list("markdown", flat=True)),
    "chunks": sorted(Chunk.objects.values_list("text", flat=True)),
    "embedding": [round(x, 4) for x in Chunk.objects.get(position=2).embedding[:2]],
    "file": document.file.read().decode(),
    "owner": document.owner.username,
}))
"""


def embedded_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(DEBUG="1", MINDSEARCH_DATA_DIR=str(data_dir), LOG_LEVEL="WARNING", PYTHONUNBUFFERED="1")
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = processes.manage(*args, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_backup_restores_into_a_fresh_data_folder_with_every_row_and_file(tmp_path: Path) -> None:
    source, fresh, backup = (
        embedded_env(tmp_path / "source"),
        embedded_env(tmp_path / "fresh"),
        tmp_path / "b.tar",
    )
    manage(source, "migrate", "--noinput")
    manage(source, "shell", "-c", FILL)
    before = json.loads(manage(source, "shell", "-c", READ).splitlines()[-1])
    assert "backed up" in manage(source, "backup", str(backup)).lower()
    assert oct(backup.stat().st_mode & 0o777) == "0o600"

    assert "Restored" in manage(fresh, "restore", str(backup))
    after = json.loads(manage(fresh, "shell", "-c", READ).splitlines()[-1])
    assert after == before
    assert len(after["topics"]) == 3 and len(after["chunks"]) == 4
    assert after["file"] == "Заметки: the uploaded file itself."
    # The restored schema is the migrated one: nothing left for migrate to do.
    assert "No migrations to apply" in manage(fresh, "migrate", "--noinput")

    # A second restore would overwrite: it is refused and nothing changes.
    again = processes.manage("restore", str(backup), env=fresh, timeout=300)
    assert again.returncode != 0
    assert "already holds tables" in again.stderr
    assert json.loads(manage(fresh, "shell", "-c", READ).splitlines()[-1]) == before


def test_backup_will_not_overwrite_a_file(tmp_path: Path) -> None:
    target = tmp_path / "exists.tar"
    target.write_text("keep me")
    env = embedded_env(tmp_path / "data")
    done = processes.manage("backup", str(target), env=env, timeout=300)
    assert done.returncode != 0
    assert "exists already" in done.stderr
    assert target.read_text() == "keep me"


def test_restore_refuses_what_is_not_a_backup(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.tar"
    (tmp_path / "readme.txt").write_text("not a backup")
    with tarfile.open(bogus, "w") as archive:
        archive.add(tmp_path / "readme.txt", arcname="readme.txt")
    done = processes.manage("restore", str(bogus), env=embedded_env(tmp_path / "data"), timeout=300)
    assert done.returncode != 0
    assert "not a MindSearch backup" in done.stderr


@pytest.mark.parametrize(
    "data_filter",
    [
        pytest.param(
            True,
            id="python-3.11.4+",
            marks=pytest.mark.skipif(not hasattr(tarfile, "data_filter"), reason="Python 3.11.4+ only"),
        ),
        pytest.param(False, id="python-3.11.0-3"),
    ],
)
def test_a_restore_takes_plain_files_only_with_or_without_tarfiles_data_filter(
    tmp_path: Path, data_filter: bool
) -> None:
    """Debian 12's Python 3.11.2 has no tarfile.data_filter: restore crashed there (a laptop run)."""
    import io

    from mindsearch import backup

    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as archive:
        content = tarfile.TarInfo("media/notes.txt")
        content.size = 5
        archive.addfile(content, io.BytesIO(b"notes"))
    with tarfile.open(plain) as archive:
        backup._extract(archive, tmp_path / "work", plain, data_filter)
    assert (tmp_path / "work" / "media" / "notes.txt").read_text() == "notes"
    for hostile in ("../outside.txt", "link"):
        path = tmp_path / f"hostile-{len(hostile)}.tar"
        with tarfile.open(path, "w") as archive:
            member = tarfile.TarInfo(hostile)
            if hostile == "link":
                member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
            archive.addfile(member, io.BytesIO(b""))
        with (
            tarfile.open(path) as archive,
            pytest.raises(backup.BackupError, match="not a MindSearch backup"),
        ):
            backup._extract(archive, tmp_path / f"work-{len(hostile)}", path, data_filter)
    assert not (tmp_path / "outside.txt").exists()
