"""The worker's Prometheus counters and histograms (PrometheusMiddleware), in-process
against the real redis-server: every figure equals what the handlers did."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest
import redis
from prometheus_client import CollectorRegistry, Histogram

from redisq_django.core import Broker, ConsumerSpec, CoreConfig, Message, RetryPolicy
from redisq_django.core.worker import Worker, WorkerOptions
from redisq_django.metrics import families
from redisq_django.metrics.prometheus import (
    PrometheusMiddleware,
    WorkerMetrics,
    _add_observations,
)

GROUP = "billing"


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    got = registry.get_sample_value(name, labels)
    assert got is not None, f"no sample {name}{labels}"
    return got


def test_bulk_observations_equal_observe_one_by_one() -> None:
    # Given the same observations, counted by observe() and by _add_observations()
    # (bucket counts and sum, as the flusher adds them)
    observations = [0.0, 0.0004, 0.001, 0.003, 0.2, 0.25, 7.0, 301.0, 1e9]
    one, bulk = CollectorRegistry(), CollectorRegistry()
    by_one = Histogram("h", "h", ["q"], registry=one, buckets=families.DURATION_BUCKETS)
    by_bulk = Histogram("h", "h", ["q"], registry=bulk, buckets=families.DURATION_BUCKETS)
    for x in observations:
        by_one.labels("a").observe(x)
    counts = [0] * len(families.DURATION_BUCKETS)
    for x in observations:
        counts[next(i for i, b in enumerate(families.DURATION_BUCKETS) if x <= b)] += 1

    # When both are added
    _add_observations(by_bulk.labels("a"), counts, sum(observations))

    # Then every exported sample is the same (buckets are cumulative, +Inf = count)
    def samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
        return {
            (s.name, s.labels.get("le", "")): s.value
            for m in registry.collect()
            for s in m.samples
            if not s.name.endswith("_created")
        }

    assert samples(bulk) == samples(one)
    assert value(bulk, "h_count", q="a") == len(observations)
    assert value(bulk, "h_bucket", q="a", le="+Inf") == len(observations)


@pytest.mark.parametrize("kind", ["threads", "async"])
def test_counters_and_histograms_equal_what_the_handlers_did(
    redis_client: redis.Redis, queue_name: str, kind: str
) -> None:
    # Given 10 good messages, one slow (0.3 s), 2 poison ones (max_retries 1: each fails
    # twice, is retried once, then dead), and one message an instance that vanished had
    # fetched (its lease of 1 s runs out: the worker takes it over). The lease is longer
    # than the slow handler: on a loaded machine a renewal late by 0.1 s let the worker
    # reclaim its own slow message under a 0.2 s lease and run it twice (at least once).
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    policy = RetryPolicy.from_seconds(
        max_retries=1, backoff=0.01, max_backoff=0.02, visibility_timeout=1.0
    )
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    broker.publish(queue_name, {"orphan": True})
    ghost = broker.subscribe(queue_name, GROUP, "ghost", policy=policy)
    assert len(ghost.fetch(count=1, block_ms=0)) == 1  # never acknowledged
    broker.publish_many(queue_name, [{"n": i} for i in range(10)])
    broker.publish(queue_name, {"sleep": 0.3})
    broker.publish_many(queue_name, [{"fail": True}, {"fail": True}])
    time.sleep(1.05)  # the ghost's lease expires
    runs: list[float] = []
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            runs.append(time.monotonic())
        if message.payload.get("sleep"):
            time.sleep(message.payload["sleep"])
        if message.payload.get("fail"):
            raise RuntimeError("poison")

    async def async_handler(message: Message) -> None:  # 4 in flight, the same figures
        with lock:
            runs.append(time.monotonic())
        if message.payload.get("sleep"):
            await asyncio.sleep(message.payload["sleep"])
        if message.payload.get("fail"):
            raise RuntimeError("poison")

    registry = CollectorRegistry()
    middleware = PrometheusMiddleware(registry, flush_interval=0.05)
    handle, flight = (handler, 1) if kind == "threads" else (async_handler, 4)
    spec = ConsumerSpec(
        queue_name, GROUP, handle, policy=policy, start="earliest", concurrency=flight
    )
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0, reclaim_interval=0.05)

    # When a worker with the middleware drains the queue
    assert Worker(broker, [spec], options, middleware=[middleware]).run() == 0

    # Then the counters are exactly the outcomes: 12 handled (10 + slow + orphan),
    # 2 retried, 2 dead, 4 failed runs, 1 reclaimed, nothing lost
    labels = {"queue": queue_name, "consumer": GROUP}
    assert len(runs) == 16
    assert value(registry, "redisq_messages_total", outcome="handled", **labels) == 12
    assert value(registry, "redisq_messages_total", outcome="retried", **labels) == 2
    assert value(registry, "redisq_messages_total", outcome="dead", **labels) == 2
    assert value(registry, "redisq_messages_total", outcome="lost", **labels) == 0
    assert value(registry, "redisq_handler_failures_total", **labels) == 4
    assert value(registry, "redisq_messages_reclaimed_total", **labels) == 1
    # ...every handler run has a duration, the slow one alone above 0.25 s
    duration = "redisq_handler_duration_seconds"
    assert value(registry, f"{duration}_count", **labels) == 16
    assert value(registry, f"{duration}_bucket", le="0.25", **labels) == 15
    assert value(registry, f"{duration}_bucket", le="0.5", **labels) == 16
    assert 0.3 <= value(registry, f"{duration}_sum", **labels) < 16 * 0.5
    # ...and each handled message a latency (publish to handled), the slow one's >= 0.3 s
    latency = "redisq_message_latency_seconds"
    assert value(registry, f"{latency}_count", **labels) == 12
    assert value(registry, f"{latency}_sum", **labels) >= 0.3
    assert value(registry, f"{latency}_bucket", le="+Inf", **labels) == 12


def test_deaths_by_lease_expiry_and_undecodable_entries_count_as_dead(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given max_retries 0, a message a vanished instance fetched (its lease of 0.2 s runs
    # out: taken over, it is past its deliveries), an entry that is no envelope, and a
    # good message
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    policy = RetryPolicy.from_seconds(
        max_retries=0, backoff=0.01, max_backoff=0.02, visibility_timeout=0.2
    )
    broker.consumers.ensure(queue_name, GROUP, "earliest")
    broker.publish(queue_name, {"orphan": True})
    ghost = broker.subscribe(queue_name, GROUP, "ghost", policy=policy)
    assert len(ghost.fetch(count=1, block_ms=0)) == 1  # never acknowledged
    redis_client.xadd(broker.keys(queue_name).log, {"no-payload": "x"})
    broker.publish(queue_name, {"good": True})
    time.sleep(0.25)  # the ghost's lease expires
    handled: list[object] = []
    registry = CollectorRegistry()
    middleware = PrometheusMiddleware(registry, flush_interval=0.05)
    spec = ConsumerSpec(queue_name, GROUP, lambda m: handled.append(m.payload), policy=policy)
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0, reclaim_interval=0.05)

    # When a worker with the middleware drains the queue
    assert Worker(broker, [spec], options, middleware=[middleware]).run() == 0

    # Then both deaths, which no handler saw, count as dead; the good message as handled
    assert handled == [{"good": True}]
    reasons = sorted(d.reason for d in broker.dead_letters.read(queue_name, GROUP))
    assert reasons == ["lease_expired", "undecodable"]
    labels = {"queue": queue_name, "consumer": GROUP}
    assert value(registry, "redisq_messages_total", outcome="dead", **labels) == 2
    assert value(registry, "redisq_messages_total", outcome="handled", **labels) == 1
    assert value(registry, "redisq_messages_total", outcome="lost", **labels) == 0
    assert value(registry, "redisq_handler_failures_total", **labels) == 0


def test_figures_reach_the_metrics_while_the_worker_runs(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a running worker (not burst) with the middleware flushing every 50 ms
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    registry = CollectorRegistry()
    middleware = PrometheusMiddleware(registry, flush_interval=0.05)
    spec = ConsumerSpec(queue_name, GROUP, lambda m: None, start="earliest")
    worker = Worker(
        broker, [spec], WorkerOptions(block_ms=50, stats_interval=0), middleware=[middleware]
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    labels = {"queue": queue_name, "consumer": GROUP, "outcome": "handled"}
    try:
        # Then its series exist at 0 before any message...
        deadline = time.monotonic() + 10
        while registry.get_sample_value("redisq_messages_total", labels) is None:
            assert time.monotonic() < deadline, "series never declared"
            time.sleep(0.02)
        assert value(registry, "redisq_messages_total", **labels) == 0

        # When 25 messages are published while it runs
        broker.publish_many(queue_name, [{"n": i} for i in range(25)])

        # Then the counter reaches 25 without the worker stopping (bounded wait)
        for _ in range(200):
            if registry.get_sample_value("redisq_messages_total", labels) == 25:
                break
            time.sleep(0.05)
        assert value(registry, "redisq_messages_total", **labels) == 25
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()
    latency_labels = {"queue": queue_name, "consumer": GROUP}
    assert math.isclose(
        value(registry, "redisq_message_latency_seconds_count", **latency_labels), 25
    )


def test_unconfirmed_reads_are_counted_in_their_family() -> None:
    # Given the worker metrics of a consumer, declared at 0
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    metrics.declare("orders", "ledger")
    name = "redisq_replica_wait_timeouts_total"
    assert value(registry, name, queue="orders", consumer="ledger") == 0
    # When the tally reports reads its replicas did not confirm in time
    metrics.count("orders", "ledger", "unreplicated", 2)
    # Then they are counted there, and nowhere else
    assert value(registry, name, queue="orders", consumer="ledger") == 2
    assert (
        value(registry, "redisq_messages_reclaimed_total", queue="orders", consumer="ledger") == 0
    )
