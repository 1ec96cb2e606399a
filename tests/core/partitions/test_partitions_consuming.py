"""Partitioned queues, consuming: a worker runs its instances on every partition, every
message is handled once per consumer whichever way it was published, an ordered consumer
keeps each key's order, and the number of partitions changes only on a drained queue."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict

import pytest
import redis

from redisq_django.core import (
    Broker,
    ConsumerSpec,
    CoreConfig,
    Message,
    PartitionsMismatch,
    partition_of,
)
from redisq_django.core.partitions.place import Place
from redisq_django.core.worker import Worker, WorkerOptions
from tests.core.guarantee_helpers import drain, wait_for


def partitioned(client: redis.Redis, queue: str, k: int) -> Broker:
    return Broker(client, CoreConfig(poll_interval_ms=20, partitions={queue: k}))


def run_burst(broker: Broker, specs: list[ConsumerSpec]) -> Worker:
    worker = Worker(broker, specs, WorkerOptions(block_ms=50, burst=True, stats_interval=0))
    assert worker.run() == 0
    return worker


def test_a_worker_runs_its_instances_on_every_partition_and_handles_all(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = partitioned(redis_client, queue_name, 4)
    seen: Counter[str] = Counter()
    threads: set[str] = set()
    lock = threading.Lock()

    def handle(message: Message) -> None:
        with lock:
            seen[message.id] += 1
            threads.add(threading.current_thread().name)
            assert message.queue == queue_name

    # Given two consumers of a queue of 4 partitions and 400 messages, keyed and not
    spec = ConsumerSpec(queue_name, "billing", handle, concurrency=2, start="earliest")
    broker.consumers.ensure(queue_name, "billing", "earliest")
    broker.consumers.ensure(queue_name, "audit", "earliest")
    sent = [broker.publish(queue_name, {"n": n}) for n in range(200)]
    sent += [broker.publish(queue_name, {"n": n}, key=f"k{n % 13}") for n in range(200)]
    # When a worker runs the consumer with concurrency 2
    worker = run_burst(broker, [spec])
    # Then each message is handled once, by instances of each of the 4 partitions
    assert seen == Counter(dict.fromkeys(sent, 1))
    assert {n.rsplit("-", 2)[1] for n in threads} <= {"p0", "p1", "p2", "p3"}
    assert len(worker.threads[spec.key]) == 8  # 2 per partition
    parts = {t.sub.keys.part for t in worker.threads[spec.key]}
    assert parts == {0, 1, 2, 3}
    # And the other consumer, run by another worker, gets them all too
    audit: list[str] = []
    run_burst(broker, [ConsumerSpec(queue_name, "audit", lambda m: audit.append(m.id))])
    assert sorted(audit) == sorted(sent)


def test_two_instances_of_each_partition_share_its_messages(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = partitioned(redis_client, queue_name, 4)
    broker.consumers.ensure(queue_name, "billing")
    sent = [broker.publish(queue_name, {"n": n}) for n in range(80)]
    got: list[str] = []
    for p in range(4):
        a = broker.subscribe(Place(queue_name, p), "billing", f"a{p}")
        b = broker.subscribe(Place(queue_name, p), "billing", f"b{p}")
        got += [m.id for m in drain(a, expected=10, count=10, timeout_s=3)]
        got += [m.id for m in drain(b, expected=10, count=10, timeout_s=3)]
    assert sorted(got) == sorted(sent)


def test_an_ordered_consumer_keeps_each_keys_order_on_a_partitioned_queue(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = partitioned(redis_client, queue_name, 4)
    order: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def handle(message: Message) -> None:
        with lock:
            order[message.key or ""].append(message.payload["seq"])

    spec = ConsumerSpec(queue_name, "ship", handle, concurrency=3, ordered=True)
    broker.consumers.ensure(queue_name, "ship")
    keys = [f"order-{n}" for n in range(12)]
    for seq in range(15):
        broker.publish_many(queue_name, [{"seq": seq}], key=keys[seq % 12])
        for key in keys:
            broker.publish(queue_name, {"seq": seq}, key=key)
    run_burst(broker, [spec])
    assert {partition_of(k, 4) for k in keys} == {0, 1, 2, 3}  # every partition in play
    for key in keys:
        extra = [seq for seq in range(15) if seq % 12 == keys.index(key)]
        expected = sorted([*range(15), *extra])
        assert order[key] == expected, key


def test_delayed_once_batch_and_relayed_messages_are_consumed_once(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = partitioned(redis_client, queue_name, 4)
    broker.consumers.ensure(queue_name, "billing")
    delayed = [broker.publish(queue_name, {"d": n}, delay=0.05) for n in range(8)]
    once = [broker.prepare(queue_name, {"o": n}) for n in range(8)]
    once_ids = broker.send(once, once=True)
    broker.send([broker.prepare(queue_name, {"o": 0}, id=once_ids[0])], once=True)  # again
    batch = [broker.prepare(queue_name, {"b": n}, id=f"b-{n}") for n in range(4)]
    broker.send(batch, batch="commit-1")
    broker.send(batch, batch="commit-1")  # the commit's retry
    # The outbox relay: rows with ids sent at most once, possibly twice
    relayed = [broker.prepare(queue_name, {"r": n}, id=f"row-{n}") for n in range(6)]
    broker.send(relayed, once=True)
    broker.send(relayed[:3], once=True)
    got: Counter[str] = Counter()
    subs = [broker.subscribe(Place(queue_name, p), "billing", f"i{p}") for p in range(4)]
    expected = [*delayed, *once_ids, *(f"b-{n}" for n in range(4)), *(f"row-{n}" for n in range(6))]

    def all_in() -> bool:
        for sub in subs:
            for d in sub.fetch(count=100, block_ms=20):
                got[d.message.id] += 1
                sub.ack([d])
        return sum(got.values()) >= len(expected)

    assert wait_for(all_in, timeout_s=5)
    assert got == Counter(dict.fromkeys(expected, 1))
    for sub in subs:  # nothing more comes
        assert sub.fetch(count=100, block_ms=100) == []


def test_a_queue_is_repartitioned_only_when_drained(
    redis_client: redis.Redis, queue_name: str
) -> None:
    old = partitioned(redis_client, queue_name, 2)
    old.consumers.ensure(queue_name, "billing")
    old.consumers.ensure(queue_name, "audit")
    sent = [old.publish(queue_name, {"n": n}, key=f"k{n}") for n in range(6)]
    sent.append(old.publish(queue_name, {"later": 1}, delay=0.3))
    # Refused while messages wait: it lists what remains, and changes nothing
    with pytest.raises(ValueError, match="is not drained") as refused:
        old.partitions.change(queue_name, 4)
    assert "1 delayed message" in str(refused.value)
    assert "not yet read by 'audit'" in str(refused.value)
    assert old.partitions.recorded(queue_name) == 2
    # When both consumers handle everything but one message, still in flight
    subs = {
        (c, p): old.subscribe(Place(queue_name, p), c, f"{c}{p}")
        for c in ("billing", "audit")
        for p in range(2)
    }
    got = [m.id for s in subs.values() for m in drain(s, expected=len(sent), timeout_s=1)]
    assert sorted(got) == sorted(sent * 2)
    last = old.publish(queue_name, {"n": "last"}, key="k0")
    holder = subs["billing", partition_of("k0", 2)]
    [in_flight] = holder.fetch(count=1, block_ms=500)
    drain(subs["audit", partition_of("k0", 2)], expected=1)
    with pytest.raises(ValueError, match=r"1 message\(s\) in flight for 'billing'"):
        old.partitions.change(queue_name, 4)
    # Then once it is acknowledged, the change is made
    holder.ack([in_flight])
    done = old.partitions.change(queue_name, 4)
    assert (done.before, done.after, done.consumers) == (2, 4, ["audit", "billing"])
    new = partitioned(redis_client, queue_name, 4)
    assert new.partitions.recorded(queue_name) == 4
    assert new.consumers.names(queue_name) == ["audit", "billing"]
    # And a process of the new setting works from the end, one of the old is refused
    fresh = new.publish(queue_name, {"n": "new"}, key="k1")
    sub = new.subscribe(Place(queue_name, partition_of("k1", 4)), "audit", "n")
    assert [m.id for m in drain(sub, expected=1, timeout_s=3)] == [fresh] != [last]
    with pytest.raises(PartitionsMismatch, match="has 4 partition"):
        partitioned(redis_client, queue_name, 2).publish(queue_name, {"n": 1})
    with pytest.raises(ValueError, match="1 to 64"):
        new.partitions.change(queue_name, 65)
