from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0005_uploadeddocument_index_attempts"),
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
