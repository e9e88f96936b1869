from django.db import migrations, models


def mark_checked(apps, schema_editor):  # noqa: ANN001, ANN201 — the migration API
    """A topic whose per-year search already ran (its event is the old "done" flag) stays done."""
    Topic = apps.get_model("research", "Topic")
    RunEvent = apps.get_model("research", "RunEvent")
    checked = RunEvent.objects.filter(stage="years").values("topic_id")
    Topic.objects.filter(pk__in=checked).update(years_checked=True)


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0011_followups"),
    ]

    operations = [
        migrations.AddField(
            model_name="topic",
            name="years_checked",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(mark_checked, migrations.RunPython.noop),
    ]
