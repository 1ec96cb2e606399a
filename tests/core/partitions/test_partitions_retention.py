"""Partitioned queues, retention and named archives: each partition is trimmed behind its
own consumers and what every registered archive stored of THAT partition; a hard cap's
drops and the greatest id removed are recorded per partition; an archive registers,
commits, shows and is removed per partition, and a new layout keeps the archives."""

from __future__ import annotations

import pytest
import redis

from redisq_django.core import Broker, CoreConfig, PartitionedQueueError, Place
from redisq_django.core.repartition import repartition

K = 3


def partitioned(client: redis.Redis, queue: str, k: int = K, **config: int) -> Broker:
    """A broker of ``queue`` in ``k`` partitions, keeping no replay window."""
    return Broker(
        client,
        CoreConfig(poll_interval_ms=20, partitions={queue: k}, replay_window_ms=0, **config),
    )


def fill(broker: Broker, queue: str, per_partition: int) -> dict[int, list[str]]:
    """``per_partition`` messages in each partition, all read and acknowledged by the one
    consumer; returns each partition's log entry ids."""
    broker.consumers.ensure(queue, "billing", "earliest")
    for n in range(per_partition * K):
        broker.publish(queue, {"n": n})  # no key: the partitions take turns
    entries: dict[int, list[str]] = {}
    for p in range(K):
        with broker.subscribe(Place(queue, p), "billing", f"i{p}") as sub:
            got = sub.fetch(count=per_partition * 2, block_ms=100)
            sub.ack(got)
            ids = [d.entry_id.decode() for d in got]
            entries[p] = sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
        assert len(entries[p]) == per_partition
    return entries


def lengths(client: redis.Redis, broker: Broker, queue: str) -> list[int]:
    return [int(client.xlen(keys.log)) for keys in broker.partitions.layout(queue)]


def test_each_partition_is_trimmed_behind_what_the_archive_stored_of_it(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = partitioned(redis_client, queue_name)
    entries = fill(broker, queue_name, 4)
    archives = broker.archives
    # Given an archive registered on every partition from the earliest
    got = archives.register_all(queue_name, "lake", "messages")
    assert [r.position for r in got] == ["0-0"] * K
    with pytest.raises(PartitionedQueueError, match=r"Place\(.*, 0\) to Place\(.*, 2\)"):
        archives.register(queue_name, "lake", "messages")
    # When it stored 2 entries of partition 0 and everything of partition 2
    archives.commit(Place(queue_name, 0), "lake", "messages", entries[0][1])
    archives.commit(Place(queue_name, 2), "lake", "messages", entries[2][-1])
    assert archives.positions(Place(queue_name, 0), "lake") == {"messages": entries[0][1]}
    # Then retention removes just that of each partition: 2, none, all 4
    assert broker.trim(queue_name) == (6, 0)
    assert lengths(redis_client, broker, queue_name) == [2, 4, 0]
    assert archives.trimmed(Place(queue_name, 0))["messages"] == entries[0][1]
    assert archives.trimmed(Place(queue_name, 1))["messages"] == "0-0"
    assert archives.trimmed(Place(queue_name, 2))["messages"] == entries[2][-1]
    # And the admin's states show the archive's position in each partition
    states = archives.states(queue_name)
    shown = {(s.partition, s.name, s.table): (s.position, s.lag) for s in states}
    assert shown == {
        (0, "lake", "messages"): (entries[0][1], 2),
        (1, "lake", "messages"): ("0-0", 4),
        (2, "lake", "messages"): (entries[2][-1], 0),
    }
    # When it is removed, from every partition: retention waits for it no longer
    assert archives.remove(queue_name, "lake") == 1
    assert archives.states(queue_name) == []
    assert broker.trim(queue_name) == (6, 0)
    assert lengths(redis_client, broker, queue_name) == [0, 0, 0]


def test_a_hard_cap_drops_and_marks_per_partition(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a queue of 3 partitions capped at 2 entries, whose consumer read nothing
    broker = partitioned(redis_client, queue_name, max_len=2)
    broker.consumers.ensure(queue_name, "billing", "earliest")
    for n in range(3 * K):
        broker.publish(queue_name, {"n": n})
    broker.archives.register_all(queue_name, "lake", "messages")
    # When retention runs: one dropped of each partition, counted and marked there
    assert broker.trim(queue_name) == (0, K)
    for keys in broker.partitions.layout(queue_name):
        meta = redis_client.hgetall(keys.meta)
        assert meta[b"dropped"] == b"1"
        first = redis_client.xrange(keys.log)[0][0]
        assert meta[b"last_trimmed"] < first  # the one removed, before the first kept
        gap = broker.archives.gap(Place(queue_name, keys.part), "lake", "messages")
        assert gap is not None and gap.count == 1
    assert not redis_client.hexists(broker.keys(queue_name).meta, "dropped")


def test_archive_calls_name_their_partition_on_a_partitioned_queue_only(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = partitioned(redis_client, queue_name)
    with pytest.raises(PartitionedQueueError, match="say which one"):
        broker.archives.commit(queue_name, "lake", "messages", "1-0")
    with pytest.raises(PartitionedQueueError, match=r"Place\(.*, 0\) to Place\(.*, 2\)"):
        broker.archives.positions(Place(queue_name, 3), "lake")
    plain = Broker(redis_client, CoreConfig())
    with pytest.raises(PartitionedQueueError, match="not partitioned"):
        plain.archives.trimmed(Place(f"{queue_name}.plain", 0))


def test_a_new_layout_keeps_the_archives_of_the_old_one(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given an unpartitioned, drained queue whose log an archive keeps
    plain = Broker(redis_client, CoreConfig())
    plain.consumers.ensure(queue_name, "billing", "earliest")
    last = plain.publish(queue_name, {"n": 1})
    with plain.subscribe(queue_name, "billing") as sub:
        sub.ack(sub.fetch(count=5, block_ms=100))
    plain.archives.register(queue_name, "lake", "messages")
    # The unpartitioned log goes with the change: refused while the archive lacks some
    with pytest.raises(ValueError, match=f"archive 'lake' has stored up to 0-0, not up to {last}"):
        repartition(redis_client, plain.scripts, plain.keys(queue_name), K)
    assert redis_client.xlen(plain.keys(queue_name).log) == 1
    plain.archives.commit(queue_name, "lake", "messages", last)
    # When it gets 3 partitions
    repartition(redis_client, plain.scripts, plain.keys(queue_name), K)
    # Then the archive is registered on each (from its start): no partition is
    # trimmed before the archive stored it
    broker = partitioned(redis_client, queue_name)
    fill(broker, queue_name, 2)
    names = {(s.partition, s.name) for s in broker.archives.states(queue_name)}
    assert names == {(p, "lake") for p in range(K)}
    assert broker.trim(queue_name) == (0, 0)
    assert lengths(redis_client, broker, queue_name) == [2, 2, 2]


def test_a_purge_records_what_the_archive_loses_in_each_partition(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = partitioned(redis_client, queue_name)
    entries = fill(broker, queue_name, 4)
    archives = broker.archives
    # Given an archive that stored 1 entry of partition 0, none of 1 and all of 2
    archives.register_all(queue_name, "lake", "messages")
    archives.commit(Place(queue_name, 0), "lake", "messages", entries[0][0])
    archives.commit(Place(queue_name, 2), "lake", "messages", entries[2][-1])
    # Then what a purge would cost it is added up over the partitions
    (cost,) = archives.unarchived(queue_name)
    assert (cost.name, cost.count, cost.capped) == ("lake", 3 + 4, False)
    # When the queue is purged
    broker.purge(queue_name)
    # Then each partition is empty, its mark at its own last entry, and the archive's
    # gap record of each partition says what it lost there, as a purge's
    assert lengths(redis_client, broker, queue_name) == [0] * K
    for p, (first, count) in {0: (entries[0][1], 3), 1: (entries[1][0], 4)}.items():
        assert archives.trimmed(Place(queue_name, p))["messages"] == entries[p][-1]
        gap = archives.gap(Place(queue_name, p), "lake", "messages")
        assert gap is not None and gap.purge is not None
        assert (gap.first, gap.last, gap.count) == (first, entries[p][-1], count)
        assert (gap.purge.first, gap.purge.count) == (first, count)
    assert archives.gap(Place(queue_name, 2), "lake", "messages") is None
    assert archives.unarchived(queue_name) == []
