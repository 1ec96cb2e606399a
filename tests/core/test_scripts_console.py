"""Contract tests of the operators' scripts, called directly with keys from
``core/keys.py`` as their headers document: ``deliver_now.lua`` and
``purge_consumer.lua`` (and ``heartbeat.lua``'s report)."""

from __future__ import annotations

import json

import redis

from redisq_django.core.broker import Broker

G = "billing"


def test_deliver_now_moves_the_member_to_the_stream_once(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client)
    keys = broker.keys(queue_name)
    member = json.dumps({"payload": '{"a":1}', "id": "m-1", "due_at": "99"})
    other = json.dumps({"payload": '{"a":2}', "id": "m-2"})
    redis_client.zadd(keys.delayed, {member: 99_000_000_000_000, other: 99_000_000_000_001})

    new_id = broker.scripts("deliver_now", [keys.delayed, keys.log], [member])

    # The member's fields, as promote.lua writes them
    assert [(eid, f) for eid, f in redis_client.xrange(keys.log)] == [
        (new_id, {b"payload": b'{"a":1}', b"id": b"m-1", b"due_at": b"99"})
    ]
    assert redis_client.zrange(keys.delayed, 0, -1) == [other.encode()]
    # Gone: nothing written, false (nil)
    again = broker.scripts("deliver_now", [keys.delayed, keys.log], [member])
    assert again is None and redis_client.xlen(keys.log) == 1


def test_purge_consumer_removes_retries_and_undelivered_private_input_only(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client)
    gkeys = broker.keys(queue_name).group(G)
    redis_client.zadd(gkeys.retry, {f'{{"payload":"{n}"}}': n for n in range(5)})
    redis_client.xgroup_create(gkeys.direct, G, id="0-0", mkstream=True)
    delivered = redis_client.xadd(gkeys.direct, {"payload": "held"})
    redis_client.xreadgroup(G, "w-1", {gkeys.direct: ">"}, count=1)  # in flight
    waiting = [redis_client.xadd(gkeys.direct, {"payload": str(n)}) for n in range(3)]

    # Bounded: two per key and call, "more" until everything is gone
    first = broker.scripts("purge_consumer", [gkeys.retry, gkeys.direct], [G, 2])
    assert first == [2, 2, 1]
    assert [eid for eid, _ in redis_client.xrange(gkeys.direct)] == [delivered, waiting[2]]
    second = broker.scripts("purge_consumer", [gkeys.retry, gkeys.direct], [G, 2])
    third = broker.scripts("purge_consumer", [gkeys.retry, gkeys.direct], [G, 2])
    assert (second, third) == ([2, 1, 1], [1, 0, 0])
    assert redis_client.zcard(gkeys.retry) == 0
    assert [eid for eid, _ in redis_client.xrange(gkeys.direct)] == [delivered]
    assert redis_client.xpending(gkeys.direct, G)["pending"] == 1


def test_purge_consumer_without_a_private_input_removes_retries(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client)
    gkeys = broker.keys(queue_name).group(G)
    redis_client.zadd(gkeys.retry, {"a": 1})
    assert broker.scripts("purge_consumer", [gkeys.retry, gkeys.direct], [G, 10]) == [1, 0, 0]


def test_heartbeat_with_a_report_keeps_it_for_its_ttl(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client)
    gkeys = broker.keys(queue_name).group(G)
    report = gkeys.instance("w-1")
    expiry = broker.scripts(
        "heartbeat", [gkeys.instances, report], ["w-1", 15_000, '{"pid":1}', 75_000]
    )
    assert redis_client.zscore(gkeys.instances, "w-1") == expiry
    assert redis_client.get(report) == b'{"pid":1}'
    assert 70_000 < redis_client.pttl(report) <= 75_000
    # Without the report key: the heartbeat alone, as before
    broker.scripts("heartbeat", [gkeys.instances], ["w-2", 15_000])
    assert redis_client.zcard(gkeys.instances) == 2
