"""Dead letters of task queues name their task, and every grouping key is normalised
again with the identifiers error trackers set aside (issue 23)."""

import json
from typing import Any

from django.db import migrations, models

from redisq_django.core.dead_entry import normalise_error
from redisq_django.core.tasks import task_of


def name_tasks_and_regroup(apps: Any, schema_editor: Any) -> None:
    """Each existing dead letter: its task (read from its payload) and its grouping key."""
    DeadLetter = apps.get_model("redisq_django", "DeadLetter")
    db = schema_editor.connection.alias
    rows = DeadLetter.objects.using(db).order_by("pk")
    last = 0
    while batch := list(rows.filter(pk__gt=last)[:500]):
        last = batch[-1].pk
        for row in batch:
            try:
                payload = json.loads(row.payload)
            except (ValueError, RecursionError):
                payload = None
            row.task = task_of(row.consumer, payload)
            row.error_key = normalise_error(row.error_message)
        DeadLetter.objects.using(db).bulk_update(batch, ["task", "error_key"])


class Migration(migrations.Migration):
    dependencies = [
        ("redisq_django", "0004_schedules_schedule"),
    ]

    operations = [
        migrations.AddField(
            model_name="deadletter",
            name="task",
            field=models.CharField(
                blank=True,
                db_index=True,
                default="",
                help_text="The Django task's module path, for a dead letter of a task queue.",
                max_length=200,
                verbose_name="task",
            ),
        ),
        migrations.RunPython(name_tasks_and_regroup, migrations.RunPython.noop),
    ]
