"""Django tasks of the shop (``django.tasks``, run by ``runconsumer --tasks``)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db.models import Count, Sum
from django.tasks import task

from shop.models import Order


@task(max_retries=2, backoff=0.5)
def order_summary(currency: str = "EUR") -> dict[str, Any]:
    """How many orders there are, their total, and how many were billed."""
    figures = Order.objects.aggregate(
        orders=Count("pk"), total=Sum("total"), billed=Count("billed_at")
    )
    return {**figures, "total": f"{Decimal(figures['total'] or 0):.2f} {currency}"}
