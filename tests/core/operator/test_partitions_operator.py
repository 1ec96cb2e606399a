"""Partitioned queues as an operator sees them (``broker.stats``, ``broker.operator``):
one queue whose figures and trends add up over its partitions, lists that merge the
partitions' pages, refs that name a message's partition, and actions that reach it.
Real Redis."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import redis

from redisq_django.core import Broker, CoreConfig, Place, default_instance_name, partition_of
from redisq_django.core.groups import worker_of
from redisq_django.core.operator.browse import Page
from redisq_django.core.trends import BACKLOG, PUBLISHED, per_consumer

K = 3
KEYS = [f"order-{n}" for n in range(12)]


def partitioned(client: redis.Redis, queue: str) -> Broker:
    return Broker(client, CoreConfig(poll_interval_ms=20, partitions={queue: K}))


def every_page(read: Callable[[str | None], Page], limit: int = 50) -> list[Page]:
    """Every page of a list, following its cursors (bounded)."""
    pages, cursor = [], None
    for _ in range(limit):
        page = read(cursor)
        pages.append(page)
        if page.next is None:
            return pages
        cursor = page.next
    raise AssertionError("the list never ended")


@pytest.fixture
def shop(redis_client: redis.Redis, queue_name: str) -> tuple[Broker, dict[str, str]]:
    """A queue of 3 partitions, consumers billing and audit from the start, 36 keyed
    messages (each key's in its partition) and 6 delayed ones: message id -> key."""
    broker = partitioned(redis_client, queue_name)
    broker.consumers.ensure(queue_name, "billing", "earliest")
    broker.consumers.ensure(queue_name, "audit", "earliest")
    sent = {broker.publish(queue_name, {"n": n}, key=KEYS[n % 12]): KEYS[n % 12] for n in range(36)}
    for n in range(6):
        sent[broker.publish(queue_name, {"d": n}, key=KEYS[n], delay=600 + n)] = KEYS[n]
    return broker, sent


def test_stats_add_up_over_the_partitions(
    shop: tuple[Broker, dict[str, str]], queue_name: str
) -> None:
    broker, sent = shop
    # Given billing has taken 5 messages of partition 1 and failed one (it waits to retry)
    sub = broker.subscribe(Place(queue_name, 1), "billing", "i1", backoff_s=600, max_backoff_s=600)
    taken = sub.fetch(count=5, block_ms=100)
    sub.fail(taken[0], RuntimeError("boom"))
    in_part = Counter(partition_of(k, K) for mid, k in sent.items())
    delayed_in = Counter(partition_of(KEYS[n], K) for n in range(6))

    # When the operator reads the queue's stats (and with an unpartitioned queue beside it)
    stats = broker.stats(queue_name)
    both = broker.operator.stats([queue_name, f"{queue_name}.plain"])

    # Then the queue is one queue whose figures add up over its 3 partitions
    assert (stats.name, stats.length, stats.delayed) == (queue_name, 36, 6)
    assert [p.length for p in stats.partitions] == [in_part[i] - delayed_in[i] for i in range(K)]
    assert [p.delayed for p in stats.partitions] == [delayed_in[i] for i in range(K)]
    audit, billing = stats.consumers  # by name
    assert (billing.name, billing.lag, billing.in_flight, billing.waiting_retry) == (
        "billing",
        31,
        4,
        1,
    )
    assert (audit.name, audit.lag, audit.in_flight, audit.backlog) == ("audit", 36, 0, 36)
    assert billing.instances_alive == 0 and stats.total("backlog") == 31 + 36
    assert billing.oldest_unacked_age_s is not None
    figures = [(q.length, q.delayed, q.total("backlog"), len(q.partitions)) for q in both]
    assert figures == [(36, 6, 67, 3), (0, 0, 0, 0)]


def test_a_worker_process_counts_once_whatever_its_threads_and_partitions(
    shop: tuple[Broker, dict[str, str]], queue_name: str
) -> None:
    broker, _ = shop
    # Given one worker process running 2 threads per partition for billing and for audit
    # (named as runconsumer names them), and an instance of another client
    worker = default_instance_name()
    for consumer in ("billing", "audit"):
        for i in range(K):
            for n in range(2):
                name = f"{worker}-{consumer}-p{i}-{n}"
                broker.subscribe(Place(queue_name, i), consumer, name).heartbeat(60_000)
    broker.subscribe(Place(queue_name, 0), "audit", "node-7").heartbeat(60_000)

    # When the operator reads the queue's stats
    stats = broker.stats(queue_name)

    # Then each thread is an instance alive, and the processes are told apart once
    audit, billing = stats.consumers
    assert (billing.instances_alive, billing.workers) == (2 * K, {worker})
    assert (audit.instances_alive, audit.workers) == (2 * K + 1, {worker, "node-7"})
    assert stats.workers == {worker, "node-7"}
    assert [p.total("instances_alive") for p in stats.partitions] == [5, 4, 4]
    assert worker_of(f"{worker}-my-consumer-p3-0") == worker == worker_of(worker)
    assert worker_of("web-1:12:abcdef:x") == "web-1:12:abcdef:x"  # not one of ours


def test_lists_merge_the_partitions_and_refs_find_each_message(
    shop: tuple[Broker, dict[str, str]], queue_name: str
) -> None:
    broker, sent = shop
    op = broker.operator
    delayed_ids = list(sent)[36:]  # in publish order: the soonest due first

    # When the operator pages through the log (7 a page), the delayed set and what waits
    log = [e for p in every_page(lambda c: op.log(queue_name, c, 7)) for e in p.entries]
    delayed = [e for p in every_page(lambda c: op.delayed(queue_name, c, 4)) for e in p.entries]
    waiting = [
        e for p in every_page(lambda c: op.waiting(queue_name, "audit", c, 5)) for e in p.entries
    ]

    # Then each list holds every message once, each in its key's partition, in order
    assert Counter(e.message_id for e in log) == Counter(set(sent) - set(delayed_ids))
    assert all(e.part == partition_of(sent[e.message_id], K) for e in log + delayed + waiting)
    stamps = [tuple(map(int, e.key.split("-"))) for e in log]
    assert stamps == sorted(stamps, reverse=True)
    assert [e.message_id for e in delayed] == delayed_ids
    assert Counter(e.message_id for e in waiting) == Counter(set(sent) - set(delayed_ids))
    # and each ref names its partition, and finds that message again
    for entry in (log[0], log[-1], delayed[2], waiting[4]):
        assert entry.ref.endswith(f"@{entry.part}")
        found = op.find(queue_name, "audit", entry.ref)
        assert found is not None and (found.message_id, found.part) == (
            entry.message_id,
            entry.part,
        )
    with pytest.raises(ValueError, match="3 partitions"):
        op.find(queue_name, None, log[0].ref.rpartition("@")[0])


def test_actions_reach_the_partition_of_the_message(
    shop: tuple[Broker, dict[str, str]], queue_name: str
) -> None:
    broker, _ = shop
    op = broker.operator
    sub = broker.subscribe(Place(queue_name, 2), "billing", "i1", backoff_s=600, max_backoff_s=600)
    for d in sub.fetch(count=3, block_ms=100):
        sub.fail(d, RuntimeError("boom"))
    [soonest] = op.delayed(queue_name, None, 1).entries

    # When the operator delivers the soonest delayed message now, lists billing's retries
    # and in-flight, then delivers its retries now and purges audit
    new_id = op.deliver_now(queue_name, None, soonest.ref)
    retrying = op.retrying(queue_name, "billing").entries
    delivered = op.deliver_waiting(
        queue_name, "billing", [e.message_id for e in retrying] + ["nope"]
    )
    purged = op.purge_consumer(queue_name, "audit")

    # Then the delayed message went to its own partition's log
    assert new_id is not None
    part_log = broker.keys(queue_name).partition(soonest.part or 0).log
    assert broker.client.xrange(part_log, new_id, new_id)
    assert broker.stats(queue_name).delayed == 5
    # and billing's 3 retries were in partition 2, and went back to its input there
    assert [e.part for e in retrying] == [2, 2, 2]
    assert (delivered.count, delivered.missing) == (3, ["nope"])
    billing = {c.name: c for c in broker.stats(queue_name).consumers}
    assert (billing["billing"].waiting_retry, billing["billing"].direct) == (0, 3)
    # and audit's backlog was skipped on every partition
    assert purged == (0, 0)
    assert {c.name: c.backlog for c in broker.stats(queue_name).consumers}["audit"] == 0


def test_trends_add_up_and_samples_go_to_the_queue(
    shop: tuple[Broker, dict[str, str]], queue_name: str
) -> None:
    broker, _ = shop
    # When the queue's backlog is sampled and its trends are read
    broker.operator.sample_trends([queue_name])
    [trend] = broker.operator.trends([queue_name], 2)

    # Then the publishes counted in each partition add up (the minute may have turned)
    assert sum(m.get(PUBLISHED, 0) for m in trend.minutes) == 42
    # and each partition's own are kept, in partition order
    sent_to = Counter(partition_of(k, K) for k in shop[1].values())
    assert [sum(m.get(PUBLISHED, 0) for m in p.minutes) for p in trend.partitions] == [
        sent_to[i] for i in range(K)
    ]
    assert trend.minutes[-1][per_consumer(BACKLOG, "audit")] == 36
    # and the sample is the queue's, in its base hash, none in a partition's
    base = broker.keys(queue_name)
    minute = trend.first_minute + 1
    assert broker.client.hget(base.trend(minute), per_consumer(BACKLOG, "audit")) == b"36"
    assert not broker.client.hexists(
        base.partition(0).trend(minute), per_consumer(BACKLOG, "audit")
    )


def test_held_keys_and_release_in_the_key_partition(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = partitioned(redis_client, queue_name)
    broker.consumers.ensure(queue_name, "ledger")
    keys = ["a", "b", "c", "d"]
    ids = {k: broker.publish_many(queue_name, [{"n": n} for n in range(2)], key=k) for k in keys}
    subs = [
        broker.subscribe(Place(queue_name, i), "ledger", f"i{i}", ordered=True) for i in range(K)
    ]
    first = {d.key: d for s in subs for d in s.fetch(count=10, block_ms=100)}
    assert set(first) == set(keys)

    # When the operator lists the held keys and releases "c"
    held = {h.key: h for h in broker.operator.held_keys(queue_name, "ledger")}
    released = broker.operator.release_key(queue_name, "ledger", "c")

    # Then every key is listed, its holder's ref naming its partition and finding it
    assert set(held) == set(keys) and all(h.waiting == 1 for h in held.values())
    for key, h in held.items():
        assert h.ref is not None and h.ref.endswith(f"@{partition_of(key, K)}")
        found = broker.operator.find(queue_name, "ledger", h.ref)
        assert found is not None and found.message_id == ids[key][0]
    # and "c"'s next message is free in its own partition
    assert released is True
    got = subs[partition_of("c", K)].fetch(count=10, block_ms=100)
    assert [m.id for m in got] == [ids["c"][1]]
