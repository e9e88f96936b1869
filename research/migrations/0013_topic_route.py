from django.db import migrations, models


def store_routes(apps, schema_editor):  # noqa: ANN001, ANN201 — the migration API
    """Topics routed before the route was stored: a report without a plan was answered without a
    search (from the owner's documents when it took passages of them, directly otherwise); any
    other routed topic (its domain set) was searched."""
    Topic = apps.get_model("research", "Topic")
    routed = Topic.objects.exclude(domain="")
    unplanned = routed.filter(report__isnull=False, subqueries__isnull=True)
    from_documents = unplanned.filter(documents__fetched_via="private", documents__hit__isnull=True)
    Topic.objects.filter(pk__in=from_documents.values("pk")).update(route="documents")
    Topic.objects.filter(pk__in=unplanned.values("pk"), route="").update(route="direct")
    routed.filter(route="").update(route="search")


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0012_topic_years_checked"),
    ]

    operations = [
        migrations.AddField(
            model_name="topic",
            name="route",
            field=models.CharField(
                blank=True,
                choices=[
                    ("search", "Search"),
                    ("direct", "Direct answer"),
                    ("documents", "Answer from your documents"),
                ],
                default="",
                max_length=10,
            ),
        ),
        migrations.RunPython(store_routes, migrations.RunPython.noop),
    ]
