"""The worker's periodic jobs: resume runs whose worker died, and drop expired cache entries."""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

SCHEDULES = [
    # (name, function, schedule type, minutes)
    ("Resume stalled topics", "research.tasks.resume_stalled_topics", "I", 1),
    ("Purge expired cache entries", "research.tasks.purge_expired_cache", "H", None),
]


def add_schedules(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Schedule = apps.get_model("django_q", "Schedule")
    for name, func, schedule_type, minutes in SCHEDULES:
        Schedule.objects.update_or_create(
            name=name, defaults={"func": func, "schedule_type": schedule_type, "minutes": minutes, "repeats": -1}
        )


def remove_schedules(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(name__in=[name for name, *_ in SCHEDULES]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0003_topic_llm_model_heartbeat_cache_counter"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(add_schedules, remove_schedules)]
