"""The example shop app."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig


def order_payload(order: Any, event: str) -> dict[str, Any]:
    """What consumers receive for an order (``demo_data.order_payload``)."""
    from shop.demo_data import order_payload

    return order_payload(order.pk, order.total, event)


class ShopConfig(AppConfig):
    name = "shop"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from redisq_django.publishing.events import publish_model_events
        from shop.models import Order

        # Every new order is published to "orders" once its transaction commits.
        publish_model_events(Order, queue="orders", on=("created",), payload=order_payload)
