"""Publish to the ``orders`` queue and consume it with two logical consumers."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

import redisq_django
from redisq_django.connection import get_broker


class Command(BaseCommand):
    help = "Publish a few orders and show what the billing and email consumers receive."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--orders", type=int, default=5, help="orders to publish")

    def handle(self, *args: Any, orders: int, **options: Any) -> None:
        broker = get_broker()
        # Each logical consumer gets every message; registering before publishing.
        for consumer in ("billing", "email"):
            broker.ensure_consumer("orders", consumer, start="latest")

        ids = redisq_django.publish_many(
            "orders", [{"order": n, "total": f"{10 * n}.00"} for n in range(1, orders + 1)]
        )
        delayed = redisq_django.publish("orders", {"order": "reminder"}, delay=0.5)
        self.stdout.write(f"published {len(ids)} orders and 1 delayed reminder ({delayed})")

        for consumer in ("billing", "email"):
            with broker.subscribe("orders", consumer) as sub:
                received = []
                for _ in range(20):  # bounded: the delayed one arrives after ~0.5 s
                    batch = sub.fetch(count=100, block_ms=200)
                    received += batch
                    sub.ack(batch)
                    if len(received) == orders + 1:
                        break
            self.stdout.write(f"{consumer} received {len(received)} messages:")
            for message in received:
                self.stdout.write(f"  {message.id}  {message.payload}")
        stats = broker.stats("orders")
        for c in stats.consumers:
            self.stdout.write(f"{c.name}: lag={c.lag} in_flight={c.in_flight} dead={c.dead}")
