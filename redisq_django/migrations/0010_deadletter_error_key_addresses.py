"""Every dead letter's grouping key normalised again: addresses, ports, host names with
numbers and durations are variables; errno, HTTP status and SQLSTATE stay (issue 36).

The key is computed by the live ``normalise_error``, as 0002 and 0005 do, not by a copy
frozen here: what this migration must leave is the key the sink of this version writes
for new rows, or one error would be two causes (old rows, new rows) after the upgrade.
A frozen copy could only drift from the sink; a later change of the rules ships its own
migration like this one. Reversing leaves the keys as they are (the old rules are gone).
"""

from typing import Any

from django.db import migrations, models

from redisq_django.core.dead_entry import normalise_error

#: Rows read and written per step: the work of one step stays bounded whatever the table.
BATCH = 500
#: The key of a row the sink stored bare (the database refused its details): no
#: normalisation of its message, and kept as it is.
BARE_ROW_KEY = "The database refused this dead letter's details"


def regroup(apps: Any, schema_editor: Any) -> None:
    """Each existing dead letter: its grouping key by this version's rules (only the rows
    whose key changes are written)."""
    DeadLetter = apps.get_model("redisq_django", "DeadLetter")
    db = schema_editor.connection.alias
    rows = DeadLetter.objects.using(db).order_by("pk").only("pk", "error_message", "error_key")
    last = 0
    while batch := list(rows.filter(pk__gt=last)[:BATCH]):
        last = batch[-1].pk
        changed = []
        for row in batch:
            key = normalise_error(row.error_message)
            if row.error_key not in (key, BARE_ROW_KEY):
                row.error_key = key
                changed.append(row)
        DeadLetter.objects.using(db).bulk_update(changed, ["error_key"])


class Migration(migrations.Migration):
    dependencies = [
        ("redisq_django", "0009_inbox"),
    ]

    operations = [
        migrations.AlterField(
            model_name="deadletter",
            name="error_key",
            field=models.CharField(
                blank=True,
                default="",
                help_text="The error message with what varies (addresses, ports, host names, "
                "ids, numbers, durations, times, quoted values) replaced: the grouping key.",
                max_length=200,
                verbose_name="error (normalised)",
            ),
        ),
        migrations.RunPython(regroup, migrations.RunPython.noop, elidable=True),
    ]
