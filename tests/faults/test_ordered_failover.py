"""An ordered consumer across a failover that loses writes (issue 32, point 4).

Redis replicates asynchronously. When a master dies before its replica received an
acknowledgement, the promoted replica still has the acknowledged message pending: it
runs again, and if the key's next message ran meanwhile, after it. With
``wait_replicas`` an ordered consumer's read waits (``WAIT``) until replicas have it
before its messages run; replication keeps the master's order, so they then have every
settle that let those messages out, and a failover can no longer put a key's earlier
message after a later one.

The lost write is made deterministic: the replica is frozen (SIGSTOP) and the master
drops its link (``CLIENT KILL TYPE slave``, what it does by itself after
``repl-timeout``), then the master acknowledges, then it is killed and the replica,
thawed, is promoted (``REPLICAOF NO ONE``; on a cluster ``CLUSTER FAILOVER TAKEOVER``).
Each test starts its own servers: a primary and a replica (every server of the matrix),
or a 3+3 Redis Cluster.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.delivery import Delivery
from redisq_django.core.errors import RedisUnavailable
from redisq_django.core.handler import ConsumerSpec
from redisq_django.core.subscription import Subscription
from redisq_django.core.worker import Worker, WorkerOptions
from tests.support.redis_server import (
    RedisClusterHandle,
    RedisServer,
    replicated,
    start_cluster,
    start_replica,
)

pytestmark = pytest.mark.slow

LEDGER = "ledger"
#: Short leases: after the failover, the promoted replica's pending message is taken
#: over at once.
LEASE_MS = 200
#: Longer than the test could ever need: a read that waits for a replica that cannot
#: answer is still waiting when the master dies.
LONG_WAIT_MS = 60_000


@dataclass
class Topology:
    """A master with one replica, whichever way they run; what a test does to them."""

    client: Any  # the client of the queue's master (a cluster client on a cluster)
    master: RedisServer
    replica: RedisServer
    promote: Callable[[], Any]  # the replica takes over; returns a client of it
    closers: list[Callable[[], None]] = field(default_factory=list)

    def lose_the_link(self) -> None:
        """Freeze the replica and drop its link: the master's next writes reach no one."""
        self.replica.freeze()
        with self.master.client(socket_timeout=5) as conn:
            conn.execute_command("CLIENT", "KILL", "TYPE", "slave")

    def fail_over(self) -> Any:
        """Kill the master; thaw the replica and promote it. Returns a client of it."""
        self.master.kill()
        self.replica.thaw()
        client = self.promote()
        self.closers.append(client.close)
        return client


def _config(wait_replicas: int = 0, timeout_ms: int = LONG_WAIT_MS) -> CoreConfig:
    return CoreConfig(
        poll_interval_ms=20,
        ordered_wait_replicas=wait_replicas,
        ordered_wait_timeout_ms=timeout_ms,
    )


@pytest.fixture
def primary(redis_server_binary: str, tmp_path: Path) -> Iterator[Topology]:
    master = RedisServer(redis_server_binary, tmp_path / "master").start()
    replica = start_replica(redis_server_binary, tmp_path / "replica", master)

    def promote() -> redis.Redis:
        client = replica.client()
        client.execute_command("REPLICAOF", "NO", "ONE")
        return client

    client = master.client()
    topology = Topology(client, master, replica, promote, [client.close])
    try:
        yield topology
    finally:
        for close in topology.closers:
            close()
        replica.stop()
        master.stop()


@pytest.fixture
def cluster(
    redis_server_binary: str, redis_cli_binary: str, tmp_path: Path
) -> Iterator[RedisClusterHandle]:
    """A 3+3 Redis Cluster of this test's own (it kills one of its masters)."""
    handle = start_cluster(redis_server_binary, redis_cli_binary, tmp_path, replicas=1)
    try:
        yield handle
    finally:
        handle.stop()


def _on_cluster(handle: RedisClusterHandle, queue: str) -> Topology:
    client = handle.client()
    log = Broker(client).keys(queue).log
    master = handle.master_of(log)
    (replica,) = handle.replicas_of(master)

    def promote() -> Any:
        handle.take_over(replica)
        return handle.client()

    return Topology(client, master, replica, promote, [client.close])


def _sync(topology: Topology, broker: Broker, queue: str) -> None:
    """Wait until the replica has every write so far (a key of the queue's slot)."""
    owner = topology.master.client(socket_timeout=15)
    try:
        replicated(owner, f"{broker.keys(queue).log}:test-sync")
    finally:
        owner.close()


def _run(sub: Subscription, ran: list[int], deliveries: list[Delivery]) -> None:
    """Our handler: record the message's number, and acknowledge."""
    for d in deliveries:
        ran.append(int(d.payload["n"]))
    if deliveries:
        sub.ack(deliveries)


def _drain_after(client: Any, queue: str, ran: list[int], expected: int) -> None:
    """On the promoted replica, a new instance takes over what is pending and handles
    everything, until ``expected`` runs are recorded in all (bounded)."""
    broker = Broker(client, _config())
    sub = broker.subscribe(queue, LEDGER, "C", ordered=True, visibility_timeout_ms=LEASE_MS)
    deadline = time.monotonic() + 30
    for _ in range(300):
        if len(ran) >= expected or time.monotonic() > deadline:
            break
        try:
            _run(sub, ran, sub.reclaim())
            _run(sub, ran, sub.fetch(count=10, block_ms=100))
        except RedisUnavailable:  # the promotion is settling
            time.sleep(0.1)
    time.sleep(0.3)  # and nothing more comes: one more look past a lease
    _run(sub, ran, sub.reclaim())
    _run(sub, ran, sub.fetch(count=10, block_ms=100))


def _acknowledged_then_failover(topology: Topology, queue: str, wait_replicas: int) -> list[int]:
    """The scenario of the issue: message 10 of a key is handled and acknowledged on a
    master whose replica lags; another instance reads the key's next message, 11; the
    master dies. Returns the numbers of the messages in the order their handlers ran."""
    broker = Broker(topology.client, _config(wait_replicas))
    broker.consumers.ensure(queue, LEDGER, "earliest")
    # Given messages 10 and 11 of one key, 10 handled by instance A, all replicated
    broker.publish(queue, {"n": 10}, key="k")
    broker.publish(queue, {"n": 11}, key="k")
    a = broker.subscribe(queue, LEDGER, "A", ordered=True, visibility_timeout_ms=LEASE_MS)
    (first,) = a.fetch(count=10, block_ms=1000)
    ran = [int(first.payload["n"])]
    _sync(topology, broker, queue)

    # When the replica stops receiving, A acknowledges 10 (11 is let out), and
    # instance B reads (in a thread: with wait_replicas it waits for the replica)
    topology.lose_the_link()
    assert a.ack([first]) == 1
    b = broker.subscribe(queue, LEDGER, "B", ordered=True, visibility_timeout_ms=LEASE_MS)
    got: list[Delivery] = []

    def read() -> None:
        with contextlib.suppress(RedisUnavailable):  # the master died under the read
            got.extend(b.fetch(count=10, block_ms=0))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(2.0)  # without a wait for replicas the read is back long before this
    read_in_time = list(got)
    ran += [int(d.payload["n"]) for d in read_in_time]  # B's handler runs what it got

    # ...and the master dies; the replica, which never got the ack, takes over
    promoted = topology.fail_over()
    reader.join(30)
    assert not reader.is_alive()
    assert got == read_in_time  # a read still waiting when the master died got nothing
    _drain_after(promoted, queue, ran, expected=len(ran) + 2)
    return ran


@pytest.mark.servers
def test_with_wait_replicas_a_failover_never_reruns_a_message_after_the_next(
    primary: Topology, queue_name: str
) -> None:
    ran = _acknowledged_then_failover(primary, queue_name, wait_replicas=1)
    # Then B never ran 11 on the doomed master (no replica had its read); 10, whose ack
    # the failover lost, runs again, and 11 after it: the key's order holds
    assert ran == [10, 10, 11]


@pytest.mark.servers
def test_without_wait_replicas_a_failover_reruns_a_message_after_the_next(
    primary: Topology, queue_name: str
) -> None:
    ran = _acknowledged_then_failover(primary, queue_name, wait_replicas=0)
    # Then the limit the docs name: 11 ran on the master, the failover lost 10's ack,
    # and 10 runs again after 11
    assert ran == [10, 11, 10, 11]


@pytest.mark.cluster
@pytest.mark.parametrize(("wait_replicas", "expected"), [(1, [10, 10, 11]), (0, [10, 11, 10, 11])])
def test_a_failover_on_a_cluster_with_and_without_wait_replicas(
    cluster: RedisClusterHandle, queue_name: str, wait_replicas: int, expected: list[int]
) -> None:
    # The same on a 3+3 cluster: the read waits on the node that serves the queue's
    # slot, and the replica promoted by CLUSTER FAILOVER TAKEOVER decides what reruns
    topology = _on_cluster(cluster, queue_name)
    try:
        assert _acknowledged_then_failover(topology, queue_name, wait_replicas) == expected

        # And a waiting read through the client of before the failover finds the slot's
        # new master (which has no replica left: its wait times out, counted)
        broker = Broker(topology.client, _config(wait_replicas=1, timeout_ms=100))
        mid = broker.publish(queue_name, {"n": 12}, key="k")
        sub = broker.subscribe(queue_name, LEDGER, "D", ordered=True)
        got: list[Delivery] = []
        for _ in range(50):  # the first tries may still meet the dead node (bounded)
            with contextlib.suppress(RedisUnavailable):
                got = sub.fetch(count=10, block_ms=100)
            if got:
                break
        assert ([m.id for m in got], sub.unreplicated) == ([mid], 1)
    finally:
        for close in topology.closers:
            close()


@pytest.mark.servers
def test_a_read_confirmed_by_the_replica_is_on_the_replica_when_it_returns(
    primary: Topology, queue_name: str
) -> None:
    # Given an ordered consumer whose reads wait for one replica
    broker = Broker(primary.client, _config(wait_replicas=1))
    broker.consumers.ensure(queue_name, LEDGER, "earliest")
    mid = broker.publish(queue_name, {"n": 1}, key="k")
    sub = broker.subscribe(queue_name, LEDGER, "B", ordered=True)
    # When it reads
    (got,) = sub.fetch(count=10, block_ms=1000)
    # Then the replica has the read already (the message is pending for B there), and
    # nothing fell short
    with primary.replica.client() as replica:
        pending = replica.xpending_range(broker.keys(queue_name).log, LEDGER, "-", "+", 10)
    assert (got.id, [(p["message_id"], p["consumer"]) for p in pending]) == (
        mid,
        [(got.entry_id, b"B")],
    )
    assert sub.unreplicated == 0


@pytest.mark.servers
def test_a_read_whose_replica_is_frozen_times_out_and_its_messages_run(
    primary: Topology, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an ordered consumer whose reads wait up to 300 ms for one replica, and a
    # replica that is frozen and cut off
    broker = Broker(primary.client, _config(wait_replicas=1, timeout_ms=300))
    broker.consumers.ensure(queue_name, LEDGER, "earliest")
    first = broker.publish(queue_name, {"n": 1}, key="k")
    keyless = broker.publish(queue_name, {"n": 2})
    primary.lose_the_link()
    sub = broker.subscribe(queue_name, LEDGER, "B", ordered=True)

    # When it reads
    with caplog.at_level(logging.INFO, logger="redisq.worker"):
        got = sub.fetch(count=10, block_ms=1000)
        # Then the wait times out, and the messages go out all the same (never held
        # for a replica that does not answer), counted and logged once
        assert sorted(m.id for m in got) == sorted([first, keyless])
        assert sub.unreplicated == 1
        sub.ack(got)
        later = broker.publish(queue_name, {"n": 3}, key="k")
        assert [m.id for m in sub.fetch(count=10, block_ms=1000)] == [later]
        assert sub.unreplicated == 2
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert (
            "only 0 of 1 replica(s) confirmed the read of 2 message(s) within 300 ms"
            in (warnings[0])
        )

        # And once the replica is back, reads are confirmed again, and the log says so
        primary.replica.thaw()
        with primary.master.client() as conn:
            for _ in range(100):  # the replica reconnects and resyncs (bounded)
                if conn.info("replication")["connected_slaves"] == 1:
                    break
                time.sleep(0.1)
        _sync(primary, broker, queue_name)
        again = broker.publish(queue_name, {"n": 4}, key="j")
        assert [m.id for m in sub.fetch(count=10, block_ms=1000)] == [again]
        assert sub.unreplicated == 2
        assert any("confirm this instance's reads again" in r.getMessage() for r in caplog.records)


@pytest.mark.servers
def test_a_worker_counts_the_reads_its_replicas_did_not_confirm(
    primary: Topology, queue_name: str
) -> None:
    # Given an ordered consumer declared with wait_replicas=1 (the config says 0), and a
    # replica that is frozen and cut off
    broker = Broker(primary.client, _config(wait_replicas=0, timeout_ms=100))
    broker.consumers.ensure(queue_name, LEDGER, "earliest")
    handled: list[str] = []
    ids = [broker.publish(queue_name, {"n": n}, key=f"k{n}") for n in range(3)]
    primary.lose_the_link()
    spec = ConsumerSpec(
        queue_name,
        LEDGER,
        lambda m: handled.append(m.id),
        ordered=True,
        wait_replicas=1,
        start="earliest",
    )
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0, prefetch=1)

    # When a worker drains the queue, one message per read
    worker = Worker(broker, [spec], options)
    assert worker.run() == 0
    # Then every message ran, and each read that went out unconfirmed is counted (the
    # redisq_replica_wait_timeouts_total of its metrics)
    assert sorted(handled) == sorted(ids)
    assert worker.totals()["unreplicated"] == 3
