"""The backlog is sampled for every consumer of every queue whatever runs
(``core/operator/trend_sampler.py``): a running worker samples queues it does not consume, two
workers write one sample per tick, and an open console samples when no worker runs,
never from a read that failed. Real Redis, real in-process workers."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.db import connections
from django.test import Client
from django.urls import reverse

from redisq_django import consumer
from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.consuming.declarations import registry
from redisq_django.core import Broker, CoreConfig, Message, trends
from redisq_django.core.keys import sampler_key
from redisq_django.core.worker import Worker, WorkerOptions
from redisq_django.runner import build_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def declared(queue_name: str) -> Iterator[None]:
    """Consumer ``billing`` of ``queue_name`` declared (other declarations set aside)."""
    saved = dict(registry._declarations)
    registry._declarations.clear()

    @consumer(queue_name, name="billing")
    def billing(message: Message) -> None:
        pass

    try:
        yield
    finally:
        registry._declarations.clear()
        registry._declarations.update(saved)


@pytest.fixture
def private(settings: Any, volatile_redis_server: Any) -> Iterator[redis.Redis]:
    """REDISQ on a private server that reports every hash written (keyspace events)."""
    settings.REDISQ = {"URL": volatile_redis_server.url}
    live.clear()
    client = volatile_redis_server.client()
    client.config_set("notify-keyspace-events", "Kh")
    yield client
    live.clear()
    client.close()


def stall(broker: Any, queue: str, name: str, n: int) -> None:
    """Consumer ``name`` of ``queue`` registered, with ``n`` messages waiting and no
    worker: what a stalled consumer looks like."""
    broker.consumers.ensure(queue, name)
    broker.publish_many(queue, [{"n": i} for i in range(n)])


def billing_and_a_stalled_queue(queue: str, n: int) -> tuple[Any, str]:
    """The site's broker with consumer billing of ``queue``, and a queue next to it with
    a stalled consumer and ``n`` messages; (broker, that queue)."""
    broker = get_broker()
    broker.consumers.ensure(queue, "billing")
    other = f"{queue}.other"
    stall(broker, other, "stalled", n)
    return broker, other


def backlog_samples(client: redis.Redis, broker: Any, queue: str, name: str) -> list[int]:
    """The backlog samples of ``name`` over the last 2 minutes."""
    (trend,) = trends.read_trends(client, [broker.keys(queue)], 2)
    field = trends.per_consumer(trends.BACKLOG, name)
    return [m[field] for m in trend.minutes if field in m]


def sampler_job(worker: Worker) -> Any:
    (job,) = [j for j in worker.periodic if j.name == "trend samples"]
    return job.job


class HashWrites:
    """Counts the HSETs on trend hashes, as Redis reports them (keyspace events)."""

    def __init__(self, client: redis.Redis) -> None:
        self.pubsub = client.pubsub()
        self.pubsub.psubscribe("__keyspace@0__:*:trend:*")
        assert self.pubsub.get_message(timeout=2)["type"] == "psubscribe"  # type: ignore[index]

    def count(self) -> dict[str, int]:
        """HSETs per key since the last call (waits briefly for the last to arrive)."""
        out: dict[str, int] = {}
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            msg = self.pubsub.get_message(timeout=0.1)
            if msg and msg["data"] == b"hset":
                key = msg["channel"].decode().split(":", 1)[1]
                out[key] = out.get(key, 0) + 1
        return out


def run_closing(worker: Worker) -> None:
    """``worker.run()`` in a thread of its own, closing that thread's database connection."""
    try:
        worker.run()
    finally:
        conn = connections["default"]
        if conn.vendor == "sqlite" and conn.connection is not None:
            conn.connection.close()  # Django ignores close() on in-memory databases
        connections.close_all()


def test_a_running_worker_samples_the_consumers_no_worker_runs(
    redisq_settings: Any, declared: None, queue_name: str
) -> None:
    # Given billing's worker running, and two stalled consumers nobody runs: one on the
    # same queue, one on a queue no worker consumes
    broker = get_broker()
    # (no lease left by a worker of an earlier test on the session's server)
    broker.client.delete(sampler_key("redisq"))
    broker.consumers.ensure(queue_name, "billing")
    stall(broker, queue_name, "audit", 3)
    other = f"{queue_name}.other"
    stall(broker, other, "stalled", 5)
    worker = build_worker([queue_name], options=WorkerOptions(stats_interval=0, block_ms=50))
    thread = threading.Thread(target=run_closing, args=(worker,), daemon=True)
    thread.start()
    try:
        # When it has ticked once (bounded wait)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not backlog_samples(
            broker.client, broker, other, "stalled"
        ):
            time.sleep(0.1)
    finally:
        worker.stop()
        thread.join(10)
    # Then both stalled consumers have backlog samples, with their backlog
    assert backlog_samples(broker.client, broker, other, "stalled")[-1] == 5
    assert backlog_samples(broker.client, broker, queue_name, "audit")[-1] == 3
    assert not thread.is_alive()


def test_two_workers_write_one_sample_per_tick(
    private: redis.Redis, declared: None, queue_name: str
) -> None:
    # Given two workers of the site and a stalled consumer on another queue
    broker, other = billing_and_a_stalled_queue(queue_name, 4)
    first, second = (build_worker([queue_name]) for _ in range(2))
    writes = HashWrites(private)

    # When both tick, twice
    for _ in range(2):
        sampler_job(first)()
        sampler_job(second)()

    # Then each queue got one sample per tick, from the worker that holds the lease
    minute = trends.minute_of(int(time.time() * 1000))
    counted = writes.count()
    assert sorted(counted.values()) == [2, 2], counted
    assert {k.rsplit(":", 1)[0] for k in counted} == {
        broker.keys(q).trend(minute).rsplit(":", 1)[0] for q in (queue_name, other)
    }
    holder = private.get(sampler_key("redisq"))
    assert holder is not None and private.pttl(sampler_key("redisq")) > 0
    # ... and when the holder stops (its lease runs out), the other takes over
    private.delete(sampler_key("redisq"))
    sampler_job(second)()
    sampler_job(first)()
    assert sorted(writes.count().values()) == [1, 1]
    assert private.get(sampler_key("redisq")) != holder
    assert backlog_samples(private, broker, other, "stalled")[-1] == 4


def test_a_worker_that_stops_gives_the_lease_back_and_another_samples_at_once(
    private: redis.Redis, declared: None, queue_name: str
) -> None:
    # Given a worker that holds the sampling lease, and a second one that does not
    _, other = billing_and_a_stalled_queue(queue_name, 2)
    holder = build_worker([queue_name], options=WorkerOptions(stats_interval=0, block_ms=50))
    second = build_worker([queue_name])
    thread = threading.Thread(target=run_closing, args=(holder,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while private.get(sampler_key("redisq")) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert private.get(sampler_key("redisq")) is not None
    assert sampler_job(second)() == []  # the first holds it
    # When the holder stops warm
    holder.stop()
    thread.join(10)
    assert not thread.is_alive()
    # Then the lease is gone at once (not 30 s later), and the other worker samples now
    assert private.get(sampler_key("redisq")) is None
    assert sampler_job(second)() == sorted([queue_name, other])


def test_only_the_holder_gives_the_lease_back(private: redis.Redis, queue_name: str) -> None:
    broker = get_broker()
    stall(broker, queue_name, "stalled", 1)
    first, second = broker.operator.site_sampler(), broker.operator.site_sampler()
    assert first.tick() == [queue_name]
    assert second.release() is False  # not its lease: left alone
    assert private.get(sampler_key("redisq")) is not None
    assert first.release() is True
    assert first.release() is False  # given back already
    assert second.tick() == [queue_name]


def test_an_open_console_samples_when_no_worker_runs(
    private: redis.Redis, root: Client, queue_name: str, volatile_redis_server: Any
) -> None:
    # Given a stalled consumer and no worker at all
    broker = get_broker()
    stall(broker, queue_name, "stalled", 7)
    page = reverse("admin:redisq_django_consumer_live", args=[queue_name, "stalled"])
    data = reverse("admin:redisq_django_consumer_live_data", args=[queue_name, "stalled"])
    writes = HashWrites(private)

    # When its live page is open and polls
    assert root.get(page).status_code == 200
    for _ in range(3):
        assert root.get(data).status_code == 200
        live.forget_figures()

    # Then its backlog is sampled, once per interval (not once per poll)
    assert backlog_samples(private, broker, queue_name, "stalled") == [7]
    assert list(writes.count().values()) == [1]

    # ... never while a worker samples (it holds the lease)
    live.clear()
    private.set(sampler_key("redisq"), "a worker", px=60_000)
    assert root.get(data).status_code == 200
    assert writes.count() == {}

    # ... and never from a read that failed: Redis hung, then back
    private.delete(sampler_key("redisq"))
    live.clear()
    os.kill(volatile_redis_server.pid, signal.SIGSTOP)
    try:
        answer = root.get(data, {"charts": "1"}).json()
    finally:
        os.kill(volatile_redis_server.pid, signal.SIGCONT)
    assert "unreachable" in answer["error"]
    assert "Trends unknown" in answer["html"]["charts"]
    assert writes.count() == {}


@pytest.mark.cluster
def test_the_site_sampler_works_on_a_redis_cluster(redis_cluster: Any) -> None:
    # Given two queues in different slots, a stalled consumer on each, on a cluster
    redis_cluster.flushall()
    client = redis_cluster.client()
    try:
        broker = Broker(client, CoreConfig())
        queues = ["orders", "mail"]  # different slots: {orders} and {mail}
        for n, queue in enumerate(queues, start=2):
            stall(broker, queue, "stalled", n)
        first, second = (broker.operator.site_sampler() for _ in range(2))

        # When two workers tick
        sampled = [first.tick(), second.tick()]

        # Then one of them sampled every queue, and the backlogs are in the trends
        assert sampled == [sorted(queues), []]
        for n, queue in enumerate(queues, start=2):
            assert backlog_samples(client, broker, queue, "stalled") == [n]
        # And the holder gives the lease back on a cluster too
        assert first.release() is True
        assert second.tick() == sorted(queues)
    finally:
        client.close()
