"""The minute's scheduled research: start due topic schedules, retry due deliveries."""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

NAME = "Scheduled research and deliveries"


def add_schedule(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={"func": "research.schedules.run_due", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def remove_schedule(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0019_versions_and_schedules"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
