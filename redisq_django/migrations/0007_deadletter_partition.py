"""Dead letters remember the partition of a partitioned queue they died in, so that a
retry sends them back there (issue 25)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("redisq_django", "0006_outboxmessage_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="deadletter",
            name="partition",
            field=models.PositiveSmallIntegerField(
                blank=True,
                help_text=(
                    "The partition of a partitioned queue it died in (empty: the queue has "
                    "none); a retry sends it back there (a keyed message: to its key's "
                    "partition)."
                ),
                null=True,
                verbose_name="partition",
            ),
        ),
    ]
