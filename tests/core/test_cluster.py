"""C8 on Redis Cluster: every script and pipeline runs unchanged on a 3-master cluster,
with queues spread over different slots (and nodes)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.keys import schedule_keys
from redisq_django.core.outcome import Outcome
from tests.core.guarantee_helpers import drain, fetch_nothing, ids

pytestmark = pytest.mark.cluster

#: Queue names whose hash tags land in different slots, on different masters.
QUEUES = ("orders", "emails", "audit.log", "q-3")


@pytest.fixture
def cluster_broker(redis_cluster: Any) -> Iterator[Broker]:
    redis_cluster.flushall()  # QUEUES are fixed names, chosen for their slots: start empty
    client = redis_cluster.client()
    try:
        yield Broker(client, CoreConfig(poll_interval_ms=20, replay_window_ms=0))
    finally:
        client.close()


def test_queues_land_on_different_nodes(cluster_broker: Broker) -> None:
    client = cluster_broker.client
    nodes = {client.get_node_from_key(cluster_broker.keys(q).log).name for q in QUEUES}
    assert len(nodes) >= 2


@pytest.mark.parametrize("queue", QUEUES)
def test_lifecycle_end_to_end_on_cluster(cluster_broker: Broker, queue: str) -> None:
    broker = cluster_broker
    # Given two consumers of the queue
    broker.consumers.ensure(queue, "billing")
    broker.consumers.ensure(queue, "email")
    sub = broker.subscribe(queue, "billing", "i1", max_retries=1, backoff_s=0.05)
    sub.heartbeat(10_000)

    # When one message is published, fetched and fails once
    ok = broker.publish(queue, {"n": 1}, headers={"h": "x"})
    [first] = drain(sub, expected=1, ack=False)
    assert (first.id, first.payload, first.headers, first.attempts) == (ok, {"n": 1}, {"h": "x"}, 1)
    assert sub.fail(first, RuntimeError("once")).outcome is Outcome.RETRIED
    # Then the retry is promoted after the backoff and acked on its second attempt
    [retry] = drain(sub, expected=1, ack=False, timeout_s=3)
    assert (retry.id, retry.attempts) == (ok, 2)
    assert sub.ack([retry]) == 1

    # When a second message fails on both allowed deliveries
    bad = broker.publish(queue, {"n": 2})
    outcomes = []
    for _ in range(2):
        [m] = drain(sub, expected=1, ack=False, timeout_s=3)
        assert m.id == bad
        outcomes.append(sub.fail(m, ValueError("always")).outcome)
    # Then it is a dead letter after exactly 2 deliveries
    assert outcomes == [Outcome.RETRIED, Outcome.DEAD]
    [dead] = broker.dead_letters.read(queue, "billing")
    assert (dead.id, dead.attempts, dead.reason, dead.error_class) == (
        bad,
        2,
        "failed",
        "ValueError",
    )

    # And a re-drive reaches billing only
    broker.dead_letters.redrive(queue, "billing", dead.entry_id)
    [again] = drain(sub, expected=1, ack=True)
    assert (again.id, again.attempts) == (bad, 1)

    # publish_many and delayed publishes, promoted when due
    batch = broker.publish_many(queue, [{"k": k} for k in range(50)])
    later = broker.publish_many(queue, ["a", "b"], delay=0.2)
    one_later = broker.publish(queue, "c", delay=0.2)
    assert broker.stats(queue).delayed == 3
    got = drain(sub, expected=53, timeout_s=5)
    assert set(ids(got)) == {*batch, *later, one_later} and len(got) == 53
    assert all(m.due_at is not None for m in got if m.id in {*later, one_later})

    # email, which never failed anything, got every log message once
    email = broker.subscribe(queue, "email", "e1")
    email_got = drain(email, expected=55, timeout_s=5)
    assert set(ids(email_got)) == {ok, bad, *batch, *later, one_later}
    assert len(email_got) == 55
    assert fetch_nothing(email, wait_ms=50) == []

    # Stats and trim (no replay window): all acked, so the whole log goes
    stats = broker.stats(queue)
    assert stats.length == 55 and stats.delayed == 0
    assert [(c.name, c.lag, c.in_flight, c.dead) for c in stats.consumers] == [
        ("billing", 0, 0, 0),
        ("email", 0, 0, 0),
    ]
    assert stats.consumers[0].instances_alive == 1
    assert broker.trim(queue) == (55, 0)
    assert broker.stats(queue).length == 0
    assert queue in broker.queues()


def test_reclaim_and_extend_on_cluster(cluster_broker: Broker) -> None:
    broker = cluster_broker
    broker.consumers.ensure("emails", "send")
    mid = broker.publish("emails", "x")
    a = broker.subscribe("emails", "send", "a", visibility_timeout_ms=200)
    b = broker.subscribe("emails", "send", "b", visibility_timeout_ms=200)
    [msg] = drain(a, expected=1, ack=False)
    assert a.extend([msg]) == []
    assert b.reclaim() == []
    time.sleep(0.25)
    [taken] = b.reclaim()
    assert (taken.id, taken.attempts) == (mid, 2)
    b.release([taken])
    [back] = drain(a, expected=1, ack=True, timeout_s=3)
    assert (back.id, back.attempts) == (mid, 2)  # release does not add an attempt
    broker.consumers.reset("emails", "send", "earliest")
    assert ids(drain(a, expected=1)) == [mid]


def test_a_bulk_redrive_reaches_queues_on_different_nodes_in_one_call(
    cluster_broker: Broker,
) -> None:
    # Given a consumer of each queue (their slots on different masters)
    broker = cluster_broker
    for queue in QUEUES:
        broker.consumers.ensure(queue, "billing")
    sub = {q: broker.subscribe(q, "billing", "i1") for q in QUEUES}
    # When 3 dead letters of each are re-driven in one call, the queues interleaved
    targets: list[tuple[str, str, dict[str | bytes, Any]]] = [
        (q, "billing", {"payload": f'{{"n":{n}}}', "id": f"{q}-{n}"})
        for n in range(3)
        for q in QUEUES
    ]
    replies = broker.dead_letters.redrive_envelopes(targets)
    # Then each went to its own queue's consumer, once, and its entry id came back
    assert all(isinstance(r, str) for r in replies), replies
    for q in QUEUES:
        assert ids(drain(sub[q], expected=3)) == [f"{q}-{n}" for n in range(3)]


def test_task_results_of_queues_on_different_nodes_are_ready_again_in_one_call(
    cluster_broker: Broker,
) -> None:
    # Given FAILED task results of each queue (their slots on different masters)
    broker = cluster_broker
    for queue in QUEUES:
        broker.client.hset(broker.keys(queue).task_result("r-1"), "status", "FAILED")
    # When a bulk retry makes them READY again in one call (one more id that is gone)
    expire = int(time.time() * 1000) + 60_000
    changed = broker.task_results.ready_many(
        [(q, "r-1", expire) for q in QUEUES] + [(QUEUES[0], "gone", expire)]
    )
    # Then each changed, on its own node
    assert changed == [True] * len(QUEUES) + [False]
    statuses = {broker.client.hget(broker.keys(q).task_result("r-1"), "status") for q in QUEUES}
    assert statuses == {b"READY"}


def test_schedule_claim_on_cluster(cluster_broker: Broker) -> None:
    # Given the schedules' claimed ticks, a key outside any hash tag
    claimed = schedule_keys("redisq").claimed
    run = cluster_broker.scripts
    # When a long past tick is claimed twice, then a tick 60 s after Redis's now
    won, now = run("schedule_claim", [claimed], ["nightly", 1000])
    assert (won, run("schedule_claim", [claimed], ["nightly", 1000])[0]) == (1, 0)
    assert run("schedule_claim", [claimed], ["nightly", now + 60_000])[0] == -1
    # Then the past one is claimed, and the early one refused without a write
    assert cluster_broker.client.zscore(claimed, "nightly") == 1000


@pytest.mark.parametrize("queue", QUEUES)
def test_history_events_and_archive_hold_on_cluster(redis_cluster: Any, queue: str) -> None:
    # Given history on (the events stream and meta hash share the queue's slot)
    redis_cluster.flushall()  # QUEUES are fixed names, chosen for their slots: start empty
    client = redis_cluster.client()
    try:
        broker = Broker(client, CoreConfig(poll_interval_ms=20, replay_window_ms=0, history=True))
        broker.consumers.ensure(queue, "billing")
        sub = broker.subscribe(queue, "billing", "i1", max_retries=0)
        # When one message is handled, one dies, and one is re-driven and reset replays
        _good, bad = broker.publish_many(queue, [{"n": 1}, {"n": 2}])
        first, second = drain(sub, expected=2, ack=False)
        assert sub.ack([first]) == 1
        assert sub.fail(second, ValueError("no")).outcome is Outcome.DEAD
        (dead,) = broker.dead_letters.read(queue, "billing")
        assert broker.dead_letters.redrive(queue, "billing", dead.entry_id)
        drain(sub, expected=1)
        broker.consumers.reset(queue, "billing", "latest")
        # Then every step is recorded on the queue's own node
        names = [f[b"e"].decode() for _, f in client.xrange(broker.keys(queue).events)]
        assert names == ["handled", "dead", "redriven", "handled", "reset"]
        # And retention waits for the archive, then trims behind it
        assert broker.trim(queue) == (0, 0)
        broker.archives.register(queue, "default", "messages")
        broker.archives.commit(queue, "default", "messages", bad)
        assert broker.trim(queue) == (2, 0)
    finally:
        client.close()


@pytest.mark.parametrize("queue", QUEUES)
def test_an_ordered_consumer_keeps_each_keys_order_on_cluster(
    redis_cluster: Any, queue: str
) -> None:
    # Given an ordered consumer with history on (holders, waiting lists and events are
    # built from the queue's prefix, in the queue's slot), two instances
    redis_cluster.flushall()  # QUEUES are fixed names, chosen for their slots: start empty
    client = redis_cluster.client()
    try:
        broker = Broker(client, CoreConfig(poll_interval_ms=20, history=True))
        broker.consumers.ensure(queue, "ledger")
        policy = {"max_retries": 1, "backoff_s": 0.01, "max_backoff_s": 0.01}
        subs = [
            broker.subscribe(queue, "ledger", name, ordered=True, **policy)  # type: ignore[arg-type]
            for name in ("i1", "i2")
        ]
        for n in range(4):
            broker.publish(queue, {"n": n, "fail": n == 1}, key="a")
            broker.publish(queue, {"n": n, "fail": n == 2}, key="b")
        broker.publish_many(queue, [{"n": n, "fail": False} for n in (4, 5)], key="a")
        broker.publish(queue, {"n": 6, "fail": False}, key="a", delay=0.05)

        # When they take turns: a message marked fail fails each time (retried once, then
        # dead), every other is acknowledged
        handled: dict[str | None, list[int]] = {"a": [], "b": []}
        deadline = time.monotonic() + 10
        for _ in range(500):
            if sum(map(len, handled.values())) == 9 or time.monotonic() > deadline:
                break
            for sub in subs:
                got = sub.fetch(count=10, block_ms=20)
                assert len({m.key for m in got}) == len(got)  # one message of a key out
                for m in got:
                    if m.payload["fail"]:
                        sub.fail(m, RuntimeError("no"))
                    else:
                        handled[m.key].append(m.payload["n"])
                        sub.ack([m])

        # Then each key went on in order past its dead letter, and every key is free
        assert handled == {"a": [0, 2, 3, 4, 5, 6], "b": [0, 1, 3]}
        assert len(broker.dead_letters.read(queue, "ledger")) == 2
        gkeys = broker.keys(queue).group("ledger")
        assert client.hlen(gkeys.holders) == 0
        names = [f[b"e"].decode() for _, f in client.xrange(broker.keys(queue).events)]
        assert names.count("handled") == 9 and names.count("dead") == 2
        assert names.count("retried") == 2
    finally:
        client.close()
