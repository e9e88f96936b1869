# Each chunk records the model it was embedded with and its language (issue 13).

from django.db import migrations, models

import retrieval.models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0002_keyword_index"),
    ]

    operations = [
        # Chunks that exist already came from the bundled all-MiniLM-L6-v2 (the only local model
        # before): `manage.py reembed` moves them to the configured model. ADD COLUMN with a
        # default fills them without an UPDATE, so the keyword-index triggers do not run.
        migrations.AddField(
            model_name="chunk",
            name="embedding_model",
            field=models.CharField(default=retrieval.models.LEGACY_EMBEDDING_MODEL, max_length=200),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="chunk",
            name="embedding_model",
            field=models.CharField(default=retrieval.models.current_embedding_model, max_length=200),
        ),
        migrations.AddField(
            model_name="chunk",
            name="language",
            field=models.CharField(blank=True, default="", max_length=8),
        ),
        migrations.AddIndex(
            model_name="chunk",
            index=models.Index(fields=["owner", "embedding_model"], name="chunk_owner_model"),
        ),
    ]
