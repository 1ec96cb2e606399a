"""Outbox rows keep a message's ordering key (issue 25)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("redisq_django", "0005_deadletter_task"),
    ]

    operations = [
        migrations.AddField(
            model_name="outboxmessage",
            name="key",
            field=models.CharField(
                blank=True, default="", max_length=256, verbose_name="ordering key"
            ),
        ),
    ]
