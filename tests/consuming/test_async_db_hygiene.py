"""Async handlers' ORM calls run in asgiref's thread (``sync_to_async``); the worker's
database hygiene closes stale connections there too, around each batch, as it does in
its handler threads. Real PostgreSQL and redis-server."""

from __future__ import annotations

import pytest
import redis
from asgiref.sync import sync_to_async
from django.db import connections

from redisq_django.consuming.db_hygiene import DjangoDatabaseMiddleware
from redisq_django.core import Broker, ConsumerSpec, Message
from redisq_django.core.worker import Worker, WorkerOptions

pytestmark = pytest.mark.django_db(databases=["default", "pg"], transaction=True)


def _backend_pid() -> int:
    with connections["pg"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_each_batch_of_an_async_consumer_gets_a_checked_connection(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given an async consumer (one handler in flight: one message per batch) whose handler
    # queries PostgreSQL through sync_to_async, with Django's CONN_MAX_AGE = 0
    assert connections["pg"].settings_dict["CONN_MAX_AGE"] == 0
    broker = Broker(redis_client)
    broker.publish_many(queue_name, [1, 2, 3])
    pids: list[int] = []

    async def handler(message: Message) -> None:
        pids.append(await sync_to_async(_backend_pid)())

    spec = ConsumerSpec(queue_name, "db", handler, start="earliest", concurrency=1)
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0)

    # When the worker runs with the database hygiene middleware
    worker = Worker(broker, [spec], options, middleware=[DjangoDatabaseMiddleware()])
    assert worker.run() == 0

    # Then each batch ran on a fresh connection (the one before was closed, as
    # CONN_MAX_AGE = 0 asks between "requests"), not one connection kept forever
    assert len(pids) == 3
    assert len(set(pids)) == 3
