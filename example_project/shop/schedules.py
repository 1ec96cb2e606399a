"""The shop's periodic schedules (found by every ``runconsumer``, like consumers.py)."""

from __future__ import annotations

from datetime import timedelta

from redisq_django.schedules import periodic

# Every 2 s, a message to queue "stock" (consumed by "restock" in consumers.py). However
# many workers run, each tick is published once: its id is "stock-check@<tick ms>".
periodic("stock-check", every=timedelta(seconds=2), queue="stock", payload={"check": "low"})
