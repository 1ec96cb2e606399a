"""Consumers get flow control: a time limit, a rate limit (with its burst), a rate limit
per ordering key and a concurrency limit, declared in code and overridable in the admin
(issue 34)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("redisq_django", "0007_deadletter_partition"),
    ]

    operations = [
        migrations.AddField(
            model_name="consumer",
            name="burst",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Empty: the value declared in code (or the REDISQ default) applies.",
                null=True,
                verbose_name="burst override",
            ),
        ),
        migrations.AddField(
            model_name="consumer",
            name="declared_burst",
            field=models.PositiveIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="consumer",
            name="declared_max_in_flight",
            field=models.PositiveIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="consumer",
            name="declared_rate",
            field=models.CharField(blank=True, default="", editable=False, max_length=32),
        ),
        migrations.AddField(
            model_name="consumer",
            name="declared_rate_per_key",
            field=models.CharField(blank=True, default="", editable=False, max_length=32),
        ),
        migrations.AddField(
            model_name="consumer",
            name="declared_time_limit",
            field=models.FloatField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="consumer",
            name="max_in_flight",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Empty: the value declared in code (or the REDISQ default) applies.",
                null=True,
                verbose_name="max in flight override",
            ),
        ),
        migrations.AddField(
            model_name="consumer",
            name="rate",
            field=models.CharField(
                blank=True,
                help_text="Empty: the value declared in code (or the REDISQ default) applies.",
                max_length=32,
                verbose_name="rate override",
            ),
        ),
        migrations.AddField(
            model_name="consumer",
            name="rate_per_key",
            field=models.CharField(
                blank=True,
                help_text="Empty: the value declared in code (or the REDISQ default) applies.",
                max_length=32,
                verbose_name="rate per key override",
            ),
        ),
        migrations.AddField(
            model_name="consumer",
            name="time_limit",
            field=models.FloatField(
                blank=True,
                help_text="Empty: the value declared in code (or the REDISQ default) applies.",
                null=True,
                verbose_name="time limit override (s)",
            ),
        ),
    ]
