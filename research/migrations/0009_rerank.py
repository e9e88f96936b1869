# The reranker: a hit's place by the reranker, and the cache kind of reranked orders.

from django.db import migrations, models

KINDS = [
    ("search_queries", "Search queries"),
    ("search_results", "Search results"),
    ("docs", "Documents"),
    ("ranked_results", "Ranked results"),
    ("summaries", "Summaries"),
    ("ranked_summaries", "Ranked summaries"),
    ("answers", "Answers"),
    ("citation_checks", "Citation checks"),
    ("rerank", "Reranked orders"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0008_report_draft"),
    ]

    operations = [
        migrations.AddField(
            model_name="hit",
            name="rerank_rank",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Place among its sub-query's web hits by the reranker, from 0.",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="cachecounter",
            name="kind",
            field=models.CharField(choices=KINDS, max_length=20),
        ),
        migrations.AlterField(
            model_name="cacheentry",
            name="kind",
            field=models.CharField(choices=KINDS, max_length=20),
        ),
    ]
