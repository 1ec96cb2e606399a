"""The pipeline's listing of every queue (the ``redisq`` data source with no ``queue``
option) leaves out a member of the queue registry that is no queue name, which any Redis
client may write, instead of failing the whole read. Real Redis; no Spark needed."""

from __future__ import annotations

import redis

from redisq_django.core import Broker
from redisq_django.pipeline.redis_io import list_queues
from redisq_django.pipeline.source_options import SourceOptions


def test_the_data_source_lists_every_queue_but_a_bad_registry_member(
    redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    # Given a real queue, and registry members that are no queue name
    Broker(redis_client).publish(queue_name, {"n": 1})
    bad = [f"{queue_name} x", f"{{{queue_name}}}"]
    redis_client.sadd("redisq:queues", *bad)
    try:
        # When the data source lists the queues to read
        listed = list_queues(redis_client, SourceOptions.parse({"url": redis_url}))
    finally:
        redis_client.srem("redisq:queues", *bad)
    # Then the real queue is there and the bad members are not
    assert queue_name in listed
    assert not set(bad) & set(listed)
