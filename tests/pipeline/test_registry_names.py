"""The pipeline's listing of every queue (the ``redisq`` data source with no ``queue``
option) leaves out a member of the queue registry that is no queue name, which any Redis
client may write, instead of failing the whole read; the archive job refuses a retention
mark that is no entry id, saying what to repair. Real Redis; no Spark needed."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker
from redisq_django.pipeline.options import ArchiveOptions, JobError
from redisq_django.pipeline.preflight import last_entry_ids
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


def test_a_retention_mark_that_is_no_entry_id_stops_the_archive_saying_what_to_repair(
    redis_client: redis.Redis, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    # Given a queue whose retention mark another client overwrote
    broker = Broker(redis_client)
    broker.publish(queue_name, {"n": 1})
    meta = broker.keys(queue_name).meta
    redis_client.hset(meta, "last_trimmed", "yesterday")
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,))
    try:
        # When the archive job looks for what it has to store
        with pytest.raises(JobError) as refused:
            last_entry_ids(options, "messages", (queue_name,))
    finally:
        redis_client.hdel(meta, "last_trimmed")
    # Then it names the key, the field and the repair, instead of a Python ValueError
    assert f"{meta} field 'last_trimmed' holds 'yesterday', which is no entry id" in str(
        refused.value
    )
    assert f"HDEL {meta} last_trimmed" in str(refused.value)
    # And once repaired it reads the queue's last entry
    assert last_entry_ids(options, "messages", (queue_name,))[queue_name]
