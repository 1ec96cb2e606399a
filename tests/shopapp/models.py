from __future__ import annotations

from django.db import models


class Order(models.Model):
    """An order; its saves and deletes publish events to "orders-events" (see apps.py)."""

    total = models.DecimalField(max_digits=10, decimal_places=2)
    note = models.CharField(max_length=200, blank=True, default="")

    def __str__(self) -> str:
        return f"Order {self.pk} ({self.total})"


class Receipt(models.Model):
    """What a consumer writes for each message it handles (the inbox tests count them):
    ``source`` is the message's or the source row's id, not unique, so that a message
    handled twice shows as two receipts."""

    source = models.CharField(max_length=100, db_index=True)
    note = models.CharField(max_length=200, blank=True, default="")

    def __str__(self) -> str:
        return f"Receipt of {self.source}"
