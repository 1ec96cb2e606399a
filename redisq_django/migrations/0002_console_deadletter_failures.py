"""Every death of a dead letter kept (DeadLetterFailure), the deaths count and the
normalised error message that groups dead letters (issue 11)."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

from redisq_django.core.dead_entry import normalise_error

#: The entry id given to the one failure each existing dead letter had: the dead entry it
#: came from is gone from Redis, and "0-0" is no id Redis ever gives.
MIGRATED_ENTRY_ID = "0-0"


def keep_existing_failures(apps: Any, schema_editor: Any) -> None:
    """Each existing dead letter: its grouping key, and its (last) failure as a record."""
    DeadLetter = apps.get_model("redisq_django", "DeadLetter")
    Failure = apps.get_model("redisq_django", "DeadLetterFailure")
    db = schema_editor.connection.alias
    rows = DeadLetter.objects.using(db).order_by("pk")
    last = 0
    while batch := list(rows.filter(pk__gt=last)[:500]):
        last = batch[-1].pk
        for row in batch:
            row.error_key = normalise_error(row.error_message)
        DeadLetter.objects.using(db).bulk_update(batch, ["error_key"])
        Failure.objects.using(db).bulk_create(
            Failure(
                dead_letter_id=row.pk,
                entry_id=MIGRATED_ENTRY_ID,
                reason=row.reason,
                attempts=row.attempts,
                error_class=row.error_class,
                error_message=row.error_message,
                traceback=row.traceback,
                first_failed_at=row.first_failed_at,
                failed_at=row.last_failed_at,
            )
            for row in batch
        )


class Migration(migrations.Migration):
    dependencies = [
        ("redisq_django", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="DeadLetterFailure",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "entry_id",
                    models.CharField(
                        help_text="Its entry in the Redis dead stream (storing it twice is a no-op).",
                        max_length=64,
                        verbose_name="dead entry id",
                    ),
                ),
                ("reason", models.CharField(max_length=32, verbose_name="reason")),
                ("attempts", models.PositiveIntegerField(default=0, verbose_name="attempts")),
                (
                    "error_class",
                    models.CharField(blank=True, max_length=200, verbose_name="error class"),
                ),
                ("error_message", models.TextField(blank=True, verbose_name="error message")),
                ("traceback", models.TextField(blank=True, verbose_name="traceback")),
                ("first_failed_at", models.DateTimeField(null=True, verbose_name="first failure")),
                ("failed_at", models.DateTimeField(null=True, verbose_name="died")),
                ("created_at", models.DateTimeField(auto_now_add=True, verbose_name="stored")),
            ],
            options={
                "verbose_name": "failure",
                "verbose_name_plural": "failures (every death)",
                "ordering": ["-failed_at", "-id"],
            },
        ),
        migrations.AddField(
            model_name="deadletter",
            name="deaths",
            field=models.PositiveIntegerField(
                default=1, help_text="How many times this message died.", verbose_name="deaths"
            ),
        ),
        migrations.AddField(
            model_name="deadletter",
            name="error_key",
            field=models.CharField(
                blank=True,
                default="",
                help_text="The error message with numbers, ids and times replaced: the grouping key.",
                max_length=200,
                verbose_name="error (normalised)",
            ),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                fields=["status", "queue", "consumer", "error_class", "error_key"],
                name="redisq_deadletter_group",
            ),
        ),
        migrations.AddField(
            model_name="deadletterfailure",
            name="dead_letter",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="failures",
                to="redisq_django.deadletter",
                verbose_name="dead letter",
            ),
        ),
        migrations.AddConstraint(
            model_name="deadletterfailure",
            constraint=models.UniqueConstraint(
                fields=("dead_letter", "entry_id"), name="redisq_deadletterfailure_unique"
            ),
        ),
        migrations.RunPython(keep_existing_failures, migrations.RunPython.noop, elidable=True),
    ]
