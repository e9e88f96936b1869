from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0006_kept_web_pages"),
    ]

    operations = [
        migrations.AddField(
            model_name="uploadeddocument",
            name="chunk_total",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="uploadeddocument",
            name="unreadable_pages",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
