"""A partitioned queue on the suite's 3-master Redis Cluster: its partitions land on
different masters (each partition's keys in one slot), and every message published is
consumed once, each script running unchanged in its partition's slot."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from redisq_django.core import Broker, CoreConfig, PartitionsMismatch, Place, partition_of
from redisq_django.core.ended import LogReader
from tests.core.guarantee_helpers import drain

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster_client(redis_cluster: Any) -> Iterator[Any]:
    redis_cluster.flushall()  # fixed queue names: start empty
    client = redis_cluster.client()
    try:
        yield client
    finally:
        client.close()


@pytest.mark.parametrize("k", [3, 4, 5, 6])
def test_partitions_spread_over_masters_and_every_message_is_consumed_once(
    cluster_client: Any, k: int
) -> None:
    queue = f"orders-{k}"
    broker = Broker(cluster_client, CoreConfig(poll_interval_ms=20, partitions={queue: k}))
    parts = broker.partitions.layout(queue)
    # Each partition's keys share one slot (asked of the cluster), the partitions do not
    slots = []
    for p in parts:
        gk = p.group("billing")
        asked = {cluster_client.cluster_keyslot(key) for key in (p.log, p.delayed, gk.direct)}
        assert len(asked) == 1
        slots.append(asked.pop())
    masters = {cluster_client.get_node_from_key(p.log).name for p in parts}
    assert len(masters) >= 2, (slots, masters)
    # Given a consumer on every partition, when keyed, unkeyed and delayed messages are sent
    broker.consumers.ensure(queue, "billing")
    sent = [broker.publish(queue, {"n": n}, key=f"k{n % 7}") for n in range(40)]
    sent += broker.publish_many(queue, range(10))
    sent += [broker.publish(queue, {"n": n}) for n in range(k * 3)]
    sent.append(broker.publish(queue, {"late": 1}, delay=0.05))
    sent += broker.send([broker.prepare(queue, {"o": 1}, id="once-1")], once=True)
    # Then instances of each partition receive every message once, the keys where they hash
    got: Counter[str] = Counter()
    where: dict[str, int] = {}
    for i in range(k):
        sub = broker.subscribe(Place(queue, i), "billing", f"i{i}")
        for message in drain(sub, expected=len(sent), timeout_s=0.6):
            got[message.id] += 1
            if message.key:
                where[message.key] = i
    assert got == Counter(dict.fromkeys(sent, 1))
    assert where == {f"k{n}": partition_of(f"k{n}", k) for n in range(7)}
    assert cluster_client.hget(broker.keys(queue).meta, "partitions") == str(k).encode()


def test_a_master_that_came_back_empty_is_given_the_layout_again(cluster_client: Any) -> None:
    # Given a queue of 4 partitions on the cluster, in use
    queue = "orders-lost"
    broker = Broker(cluster_client, CoreConfig(poll_interval_ms=20, partitions={queue: 4}))
    broker.consumers.ensure(queue, "billing")
    sent = [broker.publish(queue, {"n": n}, key=f"k{n}") for n in range(8)]
    base = broker.keys(queue)
    # When the master holding the queue's own keys loses its data (a restart without
    # persistence), the other masters keeping their partitions and records
    node = cluster_client.get_node_from_key(base.meta)
    cluster_client.flushall(target_nodes=[node])
    assert cluster_client.hget(base.meta, "partitions") is None
    # Then a process started afterwards is not refused: the partitions' own records say 4
    fresh = Broker(cluster_client, CoreConfig(poll_interval_ms=20, partitions={queue: 4}))
    sent.append(fresh.publish(queue, {"n": "after"}, key="after"))
    assert cluster_client.hget(base.meta, "partitions") == b"4"
    # And one configured with another number is refused, writing nothing
    cluster_client.hdel(base.meta, "partitions")
    with pytest.raises(PartitionsMismatch, match=r"has 4 partition.*configured with 2"):
        Broker(cluster_client, CoreConfig(partitions={queue: 2})).publish(queue, {"n": 0})
    # And what survived on the other masters is consumed, with what came after (a group
    # lost with that master is registered again from the start, as the worker does)
    broker.consumers.ensure(queue, "billing", "earliest")
    got = set()
    for i in range(4):
        sub = broker.subscribe(Place(queue, i), "billing", f"i{i}")
        got |= {m.id for m in drain(sub, expected=len(sent), timeout_s=0.4)}
    parts = broker.partitions.layout(queue)
    kept = {
        sent[n]
        for n in range(8)
        if cluster_client.get_node_from_key(parts[partition_of(f"k{n}", 4)].log) != node
    }
    assert got == kept | {sent[-1]}


def test_a_partitioned_consumers_limits_hold_across_its_partitions_on_the_cluster(
    cluster_client: Any,
) -> None:
    # Given a queue of 4 partitions over the masters, 60 keyed messages, and a consumer
    # limited to 20/s (burst 1) and 2 handlers at once, run by two workers of 3 threads
    # on every partition
    import threading
    import time

    from redisq_django.core import ConsumerSpec, Message, RetryPolicy
    from redisq_django.core.limits import Rate
    from redisq_django.core.worker import Worker, WorkerOptions

    queue = "limited-4"
    broker = Broker(cluster_client, CoreConfig(poll_interval_ms=20, partitions={queue: 4}))
    broker.consumers.ensure(queue, "billing")
    sent = {broker.publish(queue, {"n": n}, key=f"k{n % 9}") for n in range(60)}
    lock = threading.Lock()
    started: dict[str, float] = {}
    running = [0, 0]  # now, most

    def handler(message: Message) -> None:
        with lock:
            started[message.id] = time.monotonic()
            running[0] += 1
            running[1] = max(running)
        time.sleep(0.03)
        with lock:
            running[0] -= 1

    policy = RetryPolicy.from_seconds(
        max_retries=2, backoff=0.05, max_backoff=0.1, visibility_timeout=30
    )
    spec = ConsumerSpec(
        queue,
        "billing",
        handler,
        policy,
        concurrency=3,
        rate=Rate.parse("20/s", 1),
        max_in_flight=2,
    )
    workers = [
        Worker(broker, [spec], WorkerOptions(block_ms=100, stats_interval=0)) for _ in range(2)
    ]
    runners = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for r in runners:
        r.start()
    try:
        deadline = time.monotonic() + 30
        while len(started) < 60 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        for w in workers:
            w.stop()
        for r in runners:
            r.join(15)
    # Then every message ran, never more than 2 at once, at about 20/s over every
    # partition together (59 intervals: about 3 s), the limits kept under the queue's tag
    assert set(started) == sent
    assert running[1] <= 2
    times = sorted(started.values())
    assert 2.7 <= times[-1] - times[0] <= 4.5
    tag = broker.keys(queue).group("billing")
    assert cluster_client.cluster_keyslot(tag.rate) == cluster_client.cluster_keyslot(tag.slots)


def test_a_message_ended_while_waiting_is_ended_on_a_cluster(cluster_client: Any) -> None:
    """A cluster client has no single pool: its read asks ``EXISTS`` after the read
    (``ended.LogReader``), with the same outcome."""
    queue = "clustered-end"
    broker = Broker(cluster_client, CoreConfig(poll_interval_ms=20, partitions={queue: 2}))
    gkeys = broker.partitions.layout(queue)[0].group("billing")
    assert LogReader(cluster_client, broker.scripts, gkeys)._pipe is None  # the fallback
    for name in ("billing", "audit"):
        broker.consumers.ensure(queue, name, "earliest")
    sent = [broker.publish(queue, {"n": n}) for n in range(10)]
    page = broker.operator.waiting(queue, "billing", None, 200)
    chosen = next(e for e in page.entries if e.message_id == sent[4])
    assert broker.operator.end_message(queue, "billing", chosen.ref).outcome == "marked"
    got: dict[str, set[str]] = {}
    for name in ("billing", "audit"):
        for part in range(2):
            with broker.subscribe(Place(queue, part), name) as sub:
                messages = drain(sub, expected=10, timeout_s=1)
                got.setdefault(name, set()).update(m.id for m in messages)
    assert got == {"billing": set(sent) - {sent[4]}, "audit": set(sent)}
    dead = [
        f[b"id"].decode()
        for part in broker.partitions.layout(queue)
        for _, f in cluster_client.xrange(part.group("billing").dead)
    ]
    assert dead == [sent[4]]
