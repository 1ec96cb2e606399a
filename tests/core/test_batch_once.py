"""Contract tests of ``publish_batch_once.lua`` (issue 8, point 13): a batch of one
queue's messages is published at most once per batch id, so a sender unsure whether it
went through (a timeout after Redis executed it) can send the same batch again.

Called directly as in tests/core/test_scripts.py, then through ``Broker.send(batch=)``.
"""

from __future__ import annotations

import json

import redis

from redisq_django.core.broker import Broker
from redisq_django.core.keys import queue_keys
from redisq_django.core.sending import BATCH_MARKER_TTL_MS
from tests.support.clock_steps import redis_ms


def test_publish_batch_once_publishes_a_batch_id_once(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client)
    qk = queue_keys("redisq", queue_name)
    keys = [qk.meta, qk.log, qk.delayed, qk.batch_marker("b1")]
    # Given a batch: two immediate messages and one delayed by 10 s (Redis's clock)
    args = [1, 60_000, 3, "0", 2, "payload", "1", "id", "m1", "0", 2, "payload", "2", "id", "m2"]
    args += ["+10000", 2, "payload", "3", "id", "m3"]
    # When it is sent twice with the same batch id
    t0 = redis_ms(redis_client)
    first = broker.scripts("publish_batch_once", keys, args)
    t1 = redis_ms(redis_client)
    second = broker.scripts("publish_batch_once", keys, args)
    # Then the first call published all three, the second nothing ("done before")
    assert first[0] == 1 and second == [0]
    entries = redis_client.xrange(qk.log)
    assert [e for e, _ in entries] == first[1:3]
    assert [f[b"id"] for _, f in entries] == [b"m1", b"m2"]
    ((member, due),) = redis_client.zrange(qk.delayed, 0, -1, withscores=True)
    assert first[3] == due and t0 + 10_000 <= due <= t1 + 10_000
    assert json.loads(member) == {"payload": "3", "id": "m3", "due_at": str(int(due))}
    # And the marker is kept for the TTL given
    assert 0 < redis_client.pttl(qk.batch_marker("b1")) <= 60_000
    # And another batch id publishes again
    other = [qk.meta, qk.log, qk.delayed, qk.batch_marker("b2")]
    assert (
        broker.scripts("publish_batch_once", other, [1, 60_000, 1, "0", 1, "payload", "4"])[0] == 1
    )
    assert redis_client.xlen(qk.log) == 3


def test_publish_batch_once_refused_write_leaves_no_marker(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given the log key holding a string (XADD answers WRONGTYPE)
    broker = Broker(redis_client)
    qk = queue_keys("redisq", queue_name)
    redis_client.set(qk.log, "not a stream")
    keys = [qk.meta, qk.log, qk.delayed, qk.batch_marker("b1")]
    try:
        broker.scripts("publish_batch_once", keys, [1, 60_000, 1, "0", 1, "payload", "1"])
    except redis.ResponseError as exc:
        assert "WRONGTYPE" in str(exc)
    else:
        raise AssertionError("the script published to a string key")
    # Then no marker: sending the batch again once the key is fixed publishes it
    assert not redis_client.exists(qk.batch_marker("b1"))
    redis_client.delete(qk.log)
    assert (
        broker.scripts("publish_batch_once", keys, [1, 60_000, 1, "0", 1, "payload", "1"])[0] == 1
    )


def test_broker_send_with_a_batch_id_publishes_each_message_once(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given prepared messages with ids of their own
    broker = Broker(redis_client)
    envelopes = [broker.prepare(queue_name, {"n": n}, id=f"m{n}") for n in range(3)]
    envelopes.append(broker.prepare(queue_name, {"n": 3}, delay=30))
    # When the same batch is sent twice
    first = broker.send(envelopes, batch="tx1")
    second = broker.send(envelopes, batch="tx1")
    # Then each message is in the log (or delayed set) once, under its own id
    assert first == second == ["m0", "m1", "m2", envelopes[3].id]
    qk = broker.keys(queue_name)
    assert [f[b"id"] for _, f in redis_client.xrange(qk.log)] == [b"m0", b"m1", b"m2"]
    assert redis_client.zcard(qk.delayed) == 1
    assert 0 < redis_client.pttl(qk.batch_marker("tx1")) <= BATCH_MARKER_TTL_MS
