"""The transactional inbox of atomic=True consumers (issue 35): which messages each
handled, written in the handler's own transaction; and the database a consumer
declares atomic."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("redisq_django", "0008_consumer_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="consumer",
            name="declared_atomic",
            field=models.CharField(blank=True, default="", editable=False, max_length=100),
        ),
        migrations.CreateModel(
            name="InboxEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("queue", models.CharField(max_length=100, verbose_name="queue")),
                ("consumer", models.CharField(max_length=100, verbose_name="consumer")),
                (
                    "message_id",
                    models.CharField(db_index=True, max_length=64, verbose_name="message id"),
                ),
                (
                    "handled_at",
                    models.DateTimeField(auto_now_add=True, db_index=True, verbose_name="handled"),
                ),
                (
                    "result",
                    models.TextField(blank=True, editable=False, null=True, verbose_name="result"),
                ),
            ],
            options={
                "verbose_name": "inbox entry",
                "verbose_name_plural": "inbox",
                "ordering": ["-id"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("queue", "consumer", "message_id"), name="redisq_inbox_unique"
                    )
                ],
            },
        ),
    ]
