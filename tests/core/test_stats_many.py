"""``read_many``: the stats of many queues and consumers in two round trips, equal to
reading each queue on its own; the figures the admin derives (backlog, stalled)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import redis

from redisq_django.core import Broker
from redisq_django.core.stats import QueueStats, read_many, read_stats


def ageless(stats: QueueStats) -> QueueStats:
    """``stats`` without the ages (they grow between two reads)."""
    consumers = [
        replace(
            c,
            oldest_unacked_age_s=None,
            oldest_pending_age_s=None,
            oldest_undelivered_age_s=None,
        )
        for c in stats.consumers
    ]
    return replace(stats, consumers=consumers)


class CountingClient:
    """A real client that counts the pipelines it executes (the round trips)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.round_trips = 0

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        pipe = self.client.pipeline(*args, **kwargs)
        execute = pipe.execute

        def counted(*a: Any, **kw: Any) -> Any:
            self.round_trips += 1
            return execute(*a, **kw)

        pipe.execute = counted  # type: ignore[method-assign]
        return pipe


def test_many_queues_and_consumers_are_read_in_two_round_trips(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given 5 queues with 3 consumers each, in different states
    broker = Broker(redis_client)
    names = [f"{queue_name}.{i}" for i in range(5)]
    for i, name in enumerate(names):
        for consumer in ("billing", "email", "audit"):
            broker.consumers.ensure(name, consumer)
        broker.publish_many(name, [{"n": n} for n in range(i + 1)])
        broker.publish(name, {"later": True}, delay=60)
        with broker.subscribe(name, "billing") as sub:
            sub.fetch(count=1, block_ms=100)  # one in flight
    counting = CountingClient(redis_client)
    keys = [broker.keys(n) for n in names]

    # When all are read at once
    many = read_many(counting, keys)

    # Then it took two round trips, and each queue's figures are those read alone
    assert counting.round_trips == 2
    assert [ageless(q) for q in many] == [ageless(read_stats(redis_client, k)) for k in keys]
    assert [q.length for q in many] == [1, 2, 3, 4, 5]
    assert [q.delayed for q in many] == [1] * 5
    for i, q in enumerate(many):
        by_name = {c.name: c for c in q.consumers}
        assert (by_name["billing"].in_flight, by_name["billing"].backlog) == (1, i)
        assert (by_name["email"].in_flight, by_name["email"].backlog) == (0, i + 1)
        # Nothing runs them: every consumer with a backlog is stalled
        assert by_name["email"].stalled and by_name["email"].instances_alive == 0
        # The queue's totals are sums over its consumers (deliveries owed)
        assert q.total("backlog") == i + (i + 1) * 2
        assert q.total("in_flight") == 1
    assert read_many(counting, []) == [] and counting.round_trips == 2


def test_a_queue_nobody_wrote_reads_as_empty(redis_client: redis.Redis, queue_name: str) -> None:
    (stats,) = read_many(redis_client, [Broker(redis_client).keys(queue_name)], history=True)
    assert (stats.length, stats.delayed, stats.consumers, stats.archive_lag) == (0, 0, [], 0)
    assert stats.oldest_unacked_age_s is None and stats.total("backlog") == 0
