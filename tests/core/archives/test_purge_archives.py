"""Contract tests of ``purge.lua`` (``Broker.purge``) and the registered archives: a purge
empties a place in one step, keeps its consumers, and records what each lagging archive
loses exactly as a hard cap's trim does (``last_trimmed``, the gap record), with a purge
record beside the gap saying which part a purge removed and when (issue 37, point 3).
Called with keys from ``core/keys.py``; they hold on Redis 6.2 and 7.x and on Valkey.
"""

from __future__ import annotations

import time

import pytest
import redis

from redisq_django.core import Broker
from redisq_django.core.archives import LAG_COUNT_CAP, Gap, Purge, Unarchived
from redisq_django.core.errors import error_code
from redisq_django.core.keys import QueueKeys

TEN = [f"{i * 1000}-0" for i in range(1, 11)]  # 1000-0 .. 10000-0


@pytest.fixture
def log10(redis_client: redis.Redis, qk: QueueKeys) -> list[str]:
    """A log holding ten entries, 1000-0 to 10000-0, all acknowledged by group A."""
    for entry_id in TEN:
        redis_client.xadd(qk.log, {"payload": "x"}, id=entry_id)
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    read = redis_client.xreadgroup("A", "c", {qk.log: ">"}, count=100)
    redis_client.xack(qk.log, "A", *[i for i, _ in read[0][1]])
    return TEN


def now_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000


def test_a_purge_records_what_each_lagging_archive_loses(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str, log10: list[str]
) -> None:
    # Given archive "slow" at 2000-0, "fast" at 7000-0 and "done" at 10000-0
    for name, position in (("slow", "2000-0"), ("fast", "7000-0"), ("done", "10000-0")):
        broker.archives.register(queue_name, name, "messages", position)
    assert broker.archives.unarchived(queue_name) == [
        Unarchived("fast", 3, False),
        Unarchived("slow", 8, False),
    ]
    before = now_ms(redis_client)
    # When the queue is purged
    broker.purge(queue_name)
    after = now_ms(redis_client)
    # Then the log is empty and retention's mark is its last entry, as after a hard cap
    assert redis_client.xlen(qk.log) == 0
    assert broker.archives.trimmed(queue_name)["messages"] == "10000-0"
    # And each lagging archive has what it lost in its gap record, marked as a purge's
    slow = broker.archives.gap(queue_name, "slow", "messages")
    fast = broker.archives.gap(queue_name, "fast", "messages")
    assert slow is not None and fast is not None and slow.purge and fast.purge
    assert before <= slow.purge.at_ms <= after
    assert slow == Gap("3000-0", "10000-0", 8, Purge("3000-0", "10000-0", 8, slow.purge.at_ms))
    assert fast == Gap("8000-0", "10000-0", 3, Purge("8000-0", "10000-0", 3, fast.purge.at_ms))
    # The record readers of earlier versions read is the three-field one they know
    assert redis_client.hget(qk.archives, "slow:messages:gap") == b"3000-0 10000-0 8"
    assert broker.archives.gap(queue_name, "done", "messages") is None
    assert broker.archives.unarchived(queue_name) == []
    # And the hard cap's counter is left alone: a purge is no drop by the cap
    assert redis_client.hget(qk.meta, "dropped") is None
    # And the consumer is still registered, at the end of the empty log
    groups = {g["name"].decode(): g for g in redis_client.xinfo_groups(qk.log)}
    assert list(groups) == ["A"] and groups["A"]["last-delivered-id"] == b"10000-0"


def test_a_purge_after_a_hard_cap_extends_the_gap_and_says_which_part_it_removed(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str, log10: list[str]
) -> None:
    # Given archive "slow" at 2000-0 that a hard cap of 2 entries passed (3000-0..8000-0)
    broker.archives.register(queue_name, "slow", "messages", "2000-0")
    keys = [qk.log, qk.meta, qk.archives]
    assert broker.scripts("trim", keys, [10_500, 0, 0, 2, 0, 1000]) == [2, 6]
    assert broker.archives.gap(queue_name, "slow", "messages") == Gap("3000-0", "8000-0", 6)
    # When the queue is purged: the gap goes on to the end, the purge's part is the rest
    broker.purge(queue_name)
    gap = broker.archives.gap(queue_name, "slow", "messages")
    assert gap is not None and gap.purge is not None
    assert gap == Gap("3000-0", "10000-0", 8, Purge("9000-0", "10000-0", 2, gap.purge.at_ms))
    # When more arrive and are purged again: both records add up, the time is the last's
    redis_client.xadd(qk.log, {"payload": "x"}, id="11000-0")
    redis_client.xadd(qk.log, {"payload": "x"}, id="12000-0")
    broker.purge(queue_name)
    again = broker.archives.gap(queue_name, "slow", "messages")
    assert again is not None and again.purge is not None
    assert (again.first, again.last, again.count) == ("3000-0", "12000-0", 10)
    assert (again.purge.first, again.purge.last, again.purge.count) == ("9000-0", "12000-0", 4)
    assert again.purge.at_ms >= gap.purge.at_ms
    # When the archive settles past it, both records go
    assert broker.archives.settle(queue_name, "slow", "messages", "12000-0", "loss")
    assert redis_client.hkeys(qk.archives) and not any(
        k.endswith((b":gap", b":purged")) for k in redis_client.hkeys(qk.archives)
    )


def test_a_purge_record_older_than_the_gap_is_not_read_nor_extended(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str, log10: list[str]
) -> None:
    # Given a purge record an earlier version's archive_gap.lua settled but left behind
    broker.archives.register(queue_name, "a", "messages", "2000-0")
    redis_client.hset(qk.archives, "a:messages:purged", "100-0 200-0 2 5")
    redis_client.hset(qk.archives, "a:messages:gap", "3000-0 4000-0 2")
    assert broker.archives.gap(queue_name, "a", "messages") == Gap("3000-0", "4000-0", 2)
    # When a purge passes the archive: the old purge record is replaced, not added to
    broker.purge(queue_name)
    gap = broker.archives.gap(queue_name, "a", "messages")
    assert gap is not None and gap.purge is not None
    assert (gap.first, gap.last, gap.count) == ("3000-0", "10000-0", 10)
    assert (gap.purge.first, gap.purge.last, gap.purge.count) == ("3000-0", "10000-0", 8)


def test_purge_refuses_when_a_consumer_is_not_named_and_does_nothing(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str, log10: list[str]
) -> None:
    broker.archives.register(queue_name, "a", "messages", "2000-0")
    redis_client.xgroup_create(qk.log, "B", id="$")
    keys = [qk.log, qk.delayed, qk.meta, qk.archives]
    gkeys = qk.group("A")
    with pytest.raises(redis.ResponseError) as refused:
        broker.scripts("purge", [*keys, gkeys.direct, gkeys.retry, gkeys.dead], ["A"])
    assert error_code(refused.value) == "REDISQ_GROUPS"
    assert "consumer B" in str(refused.value)
    assert redis_client.xlen(qk.log) == 10
    assert broker.archives.gap(queue_name, "a", "messages") is None
    # Broker.purge lists them itself: both consumers kept, the log emptied
    broker.purge(queue_name)
    assert redis_client.xlen(qk.log) == 0
    assert sorted(g["name"] for g in redis_client.xinfo_groups(qk.log)) == [b"A", b"B"]


def test_purge_empties_every_key_of_the_place_in_one_step(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str
) -> None:
    # Given a consumer with a message in flight, a retry, a private input and a dead letter
    broker.consumers.ensure(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": n} for n in range(3)])
    broker.publish(queue_name, {"later": 1}, delay=3600)
    gkeys = qk.group("billing")
    with broker.subscribe(queue_name, "billing") as sub:
        assert len(sub.fetch(count=1, block_ms=100)) == 1
    redis_client.zadd(gkeys.retry, {"r": 1})
    redis_client.xadd(gkeys.direct, {"payload": "x"})
    redis_client.xadd(gkeys.dead, {"payload": "x"})
    # When the queue is purged (history off, no archive: nothing to record)
    broker.purge(queue_name)
    # Then every message is gone and billing is registered with nothing pending
    assert [redis_client.xlen(qk.log), redis_client.exists(qk.delayed)] == [0, 0]
    assert [redis_client.exists(gkeys.retry), redis_client.exists(gkeys.dead)] == [0, 0]
    assert redis_client.xlen(gkeys.direct) == 0
    for key in (qk.log, gkeys.direct):
        (group,) = redis_client.xinfo_groups(key)
        assert (group["name"], group["pending"]) == (b"billing", 0)
    assert redis_client.hget(qk.archives, "billing:messages:gap") is None
    stats = broker.stats(queue_name)
    assert (stats.length, stats.delayed, stats.total("backlog")) == (0, 0, 0)
    # And what is published next is delivered
    broker.publish(queue_name, {"after": 1})
    with broker.subscribe(queue_name, "billing") as sub:
        assert [m.payload for m in sub.fetch(count=10, block_ms=100)] == [{"after": 1}]


def test_unarchived_counts_like_the_lag_and_caps_like_it(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str
) -> None:
    pipe = redis_client.pipeline(transaction=False)
    for n in range(LAG_COUNT_CAP + 5):
        pipe.xadd(qk.log, {"payload": "x"}, id=f"{n + 1}-0")
    pipe.execute()
    broker.archives.register(queue_name, "default", "messages", "earliest")
    broker.archives.register(queue_name, "near", "messages", f"{LAG_COUNT_CAP}-0")
    assert broker.archives.unarchived(queue_name) == [
        Unarchived("default", LAG_COUNT_CAP, True),
        Unarchived("near", 5, False),
    ]
    assert [u.shown for u in broker.archives.unarchived(queue_name)] == ["10000+", "5"]
    started = time.monotonic()
    broker.purge(queue_name)
    assert time.monotonic() - started < 5  # 10 005 entries: one short block of Redis
    gap = broker.archives.gap(queue_name, "default", "messages")
    assert gap is not None and (gap.first, gap.count) == ("1-0", LAG_COUNT_CAP + 5)
