"""The shop's orders."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    """An order; consumers of the ``orders`` queue bill it, confirm it and check it."""

    email = models.EmailField()
    total = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)
    billed_at = models.DateTimeField(null=True, blank=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    fraud_checked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"Order {self.pk} ({self.total})"
