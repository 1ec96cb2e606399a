from __future__ import annotations

from django.apps import AppConfig

#: Where ``Order``'s model events go.
ORDER_EVENTS_QUEUE = "orders-events"


class ShopappConfig(AppConfig):
    name = "tests.shopapp"
    label = "shopapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from redisq_django.publishing.events import publish_model_events

        from .models import Order

        publish_model_events(Order, queue=ORDER_EVENTS_QUEUE, on=("created", "updated", "deleted"))
