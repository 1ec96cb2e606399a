"""A table for the benchmark's "transaction that also writes one row" variant."""

from django.db import models


class Order(models.Model):
    """One row per benchmarked transaction (``bench/run.py``, publish_on_commit rows)."""

    number = models.IntegerField()
    total = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)
