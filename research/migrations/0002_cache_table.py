"""Create the table behind Django's database cache, so `migrate` alone prepares a database.

The cache holds sign-in throttling counters and the worker heartbeat. With REDIS_URL set it lives
in Redis, but the table is made anyway so that dropping Redis later needs no extra step.
"""

from __future__ import annotations

from django.core.management.commands.createcachetable import Command as CreateCacheTable
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

CACHE_TABLE = "mindsearch_cache"  # settings.CACHES LOCATION when no REDIS_URL is set


def create_cache_table(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    command = CreateCacheTable()
    command.verbosity = 0
    command.create_table(schema_editor.connection.alias, CACHE_TABLE, dry_run=False)


class Migration(migrations.Migration):
    dependencies = [("research", "0001_initial")]

    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop)]
