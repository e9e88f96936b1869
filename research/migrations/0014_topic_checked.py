from django.db import migrations, models


def mark_checked(apps, schema_editor):  # noqa: ANN001, ANN201 — the migration API
    """Topics whose vision or domain stage already ran (its event was the old "done" flag, or the
    domain's document) stay done."""
    Topic = apps.get_model("research", "Topic")
    RunEvent = apps.get_model("research", "RunEvent")
    Document = apps.get_model("research", "Document")
    TopicImage = apps.get_model("research", "TopicImage")
    # As the old rule: a picture is looked at again unless the stage said so *and* its outcome
    # is saved — one left "pending" by a worker stopped while describing it is tried again.
    told = RunEvent.objects.filter(stage="vision").values("topic_id")
    settled = TopicImage.objects.filter(topic_id__in=told, analysis__in=["no_vision", "failed"])
    Topic.objects.filter(pk__in=settled.values("topic_id")).update(vision_checked=True)
    fetched = RunEvent.objects.filter(stage="domain").values("topic_id")
    saved = Document.objects.filter(fetched_via="domain").values("topic_id")
    Topic.objects.filter(models.Q(pk__in=fetched) | models.Q(pk__in=saved)).update(domain_data_checked=True)


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0013_topic_route"),
    ]

    operations = [
        migrations.AddField(
            model_name="topic",
            name="vision_checked",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="topic",
            name="domain_data_checked",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(mark_checked, migrations.RunPython.noop),
    ]
