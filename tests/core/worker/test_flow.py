"""Flow control in the worker (issue 34, points 1 and 2): a consumer's rate limit and
max_in_flight hold across several workers and threads; a message over the limit waits
in the queue, using no attempt; limits change live; a dead instance's slots come back.
Real redis-server; the workers in this process (``tests/faults/test_flow_faults.py``
runs them as processes, SIGKILL included)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, ConsumerSpec, Message, RetryPolicy
from redisq_django.core.limits import Rate, Slots
from redisq_django.core.worker import Worker, WorkerOptions
from tests.support.flow import LATENESS, most_allowed, most_in_any_window

POLICY = RetryPolicy.from_seconds(
    max_retries=3, backoff=0.05, max_backoff=0.1, visibility_timeout=30
)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30) -> float:
    """Seconds until ``condition`` held (bounded: fails after ``timeout``)."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if condition():
            return time.monotonic() - began
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Fleet:
    """Workers of one consumer in this process, stopped at the end of the test."""

    def __init__(self) -> None:
        self.workers: list[tuple[Worker, threading.Thread]] = []

    def start(self, broker: Broker, spec: ConsumerSpec, **options: Any) -> Worker:
        opts = {"block_ms": 100, "stats_interval": 0, "elastic_threads": False, **options}
        worker = Worker(broker, [spec], WorkerOptions(**opts))
        runner = threading.Thread(target=worker.run, daemon=True)
        runner.start()
        self.workers.append((worker, runner))
        return worker

    def stop(self) -> None:
        for worker, _ in self.workers:
            worker.stop()
        for _, runner in self.workers:
            runner.join(15)
            assert not runner.is_alive()


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    f = Fleet()
    try:
        yield f
    finally:
        f.stop()


class Recorder:
    """What handlers saw: each start on Redis's clock, the most running at once."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.started: dict[str, float] = {}
        self.attempts: dict[str, int] = {}
        self.running = 0
        self.most = 0

    def start(self, message: Message) -> None:
        seconds, micros = self.client.time()
        with self.lock:
            self.started[message.payload] = seconds + micros / 1e6
            self.attempts[message.payload] = message.attempts
            self.running += 1
            self.most = max(self.most, self.running)

    def end(self) -> None:
        with self.lock:
            self.running -= 1


def test_two_workers_of_eight_threads_together_keep_to_the_rate(
    broker: Broker, redis_client: redis.Redis, queue_name: str, fleet: Fleet
) -> None:
    # Given 60 messages and a consumer limited to 20/s with a burst of 1, run by two
    # workers of 8 threads each
    seen = Recorder(redis_client)

    def handler(message: Message) -> None:
        seen.start(message)
        seen.end()

    spec = ConsumerSpec(
        queue_name, "billing", handler, POLICY, concurrency=8, rate=Rate.parse("20/s", 1)
    )
    broker.consumers.ensure(queue_name, "billing")
    for i in range(60):
        broker.publish(queue_name, str(i))
    fleet.start(broker, spec)
    fleet.start(broker, spec)
    wait_until(lambda: len(seen.started) == 60, "every message handled")
    # Then every message ran once, on its first attempt, at no more than 20 in any second
    # (+1: a window's two ends), and the whole took about 3 s (59 intervals)
    assert set(seen.started) == {str(i) for i in range(60)}
    assert set(seen.attempts.values()) == {1}
    times = list(seen.started.values())
    assert most_in_any_window(times, 1.0) <= most_allowed(20, 1)
    assert 2.95 - LATENESS <= max(times) - min(times) <= 6.0  # late, never early
    assert broker.dead_letters.read(queue_name, "billing") == []


def test_max_in_flight_holds_across_workers_and_threads(
    broker: Broker, redis_client: redis.Redis, queue_name: str, fleet: Fleet
) -> None:
    # Given 40 messages whose handler takes 50 ms, and a consumer with max_in_flight=3
    # run by two workers of 6 threads each
    seen = Recorder(redis_client)

    def handler(message: Message) -> None:
        seen.start(message)
        time.sleep(0.05)
        seen.end()

    spec = ConsumerSpec(queue_name, "billing", handler, POLICY, concurrency=6, max_in_flight=3)
    broker.consumers.ensure(queue_name, "billing")
    for i in range(40):
        broker.publish(queue_name, str(i))
    fleet.start(broker, spec)
    fleet.start(broker, spec)
    wait_until(lambda: len(seen.started) == 40, "every message handled")
    # Then never more than 3 ran at once, and 3 did (the limit is used, not starved)
    assert seen.most == 3
    assert set(seen.attempts.values()) == {1}
    # And once idle, every slot is given back
    wait_until(
        lambda: redis_client.zcard(f"redisq:{{{queue_name}}}:g:billing:slots") == 0, "slots back"
    )


def test_async_handlers_keep_to_max_in_flight_too(
    broker: Broker, redis_client: redis.Redis, queue_name: str, fleet: Fleet
) -> None:
    # Given async handlers, 10 in flight per worker, two workers, and max_in_flight=4
    seen = Recorder(redis_client)

    async def handler(message: Message) -> None:
        seen.start(message)
        await asyncio.sleep(0.05)
        seen.end()

    spec = ConsumerSpec(queue_name, "billing", handler, POLICY, concurrency=10, max_in_flight=4)
    broker.consumers.ensure(queue_name, "billing")
    for i in range(40):
        broker.publish(queue_name, str(i))
    fleet.start(broker, spec)
    fleet.start(broker, spec)
    wait_until(lambda: len(seen.started) == 40, "every message handled")
    assert seen.most == 4


def test_messages_over_the_rate_wait_in_the_queue_unfetched(
    broker: Broker, redis_client: redis.Redis, queue_name: str, fleet: Fleet
) -> None:
    # Given a consumer limited to 2/s with a burst of 1 and ten messages
    seen = Recorder(redis_client)

    def handler(message: Message) -> None:
        seen.start(message)
        seen.end()

    spec = ConsumerSpec(
        queue_name, "billing", handler, POLICY, concurrency=4, rate=Rate.parse("2/s", 1)
    )
    broker.consumers.ensure(queue_name, "billing")
    for i in range(10):
        broker.publish(queue_name, str(i))
    fleet.start(broker, spec)
    wait_until(lambda: len(seen.started) >= 2, "two handled")
    # Then the others wait in the log: not delivered to any instance (nothing pending
    # but what runs), not failed, not retrying
    pending = redis_client.xpending(f"redisq:{{{queue_name}}}:log", "billing")["pending"]
    assert pending <= 1
    (stats,) = broker.stats(queue_name).consumers
    assert stats.waiting_retry == 0
    assert stats.lag >= 6
    wait_until(lambda: len(seen.started) == 10, "every message handled", timeout=15)
    assert set(seen.attempts.values()) == {1}


def test_a_limit_changed_live_applies_without_a_restart(
    broker: Broker, redis_client: redis.Redis, queue_name: str, fleet: Fleet
) -> None:
    # Given a worker whose consumer is limited to 1/s, and 30 messages
    seen = Recorder(redis_client)

    def handler(message: Message) -> None:
        seen.start(message)
        seen.end()

    slow = ConsumerSpec(
        queue_name, "billing", handler, POLICY, concurrency=2, rate=Rate.parse("1/s", 1)
    )
    current = [slow]
    broker.consumers.ensure(queue_name, "billing")
    for i in range(30):
        broker.publish(queue_name, str(i))
    fleet.start(broker, slow, refresh_interval=0.1)
    fleet.workers[-1][0].refresh = lambda: current
    wait_until(lambda: len(seen.started) >= 1, "the first handled")
    time.sleep(0.5)
    assert len(seen.started) <= 2
    # When the limit is lifted (as the admin does, through the refresh)
    current[0] = slow.evolve(rate=None)
    # Then the rest run at once
    assert wait_until(lambda: len(seen.started) == 30, "the rest handled", timeout=10) < 5


def test_slots_a_dead_instance_held_come_back_after_their_lease(
    broker: Broker, redis_client: redis.Redis, queue_name: str, fleet: Fleet
) -> None:
    # Given an instance that took both slots of a max_in_flight=2 consumer and died
    # (its leases of 1.5 s not renewed), and a live worker
    key = f"redisq:{{{queue_name}}}:g:billing:slots"
    Slots(broker.client, broker.scripts, key, 2, 1500).take("dead-instance", 0, 2)
    seen = Recorder(redis_client)

    def handler(message: Message) -> None:
        seen.start(message)
        seen.end()

    spec = ConsumerSpec(queue_name, "billing", handler, POLICY, concurrency=2, max_in_flight=2)
    broker.consumers.ensure(queue_name, "billing")
    for i in range(5):
        broker.publish(queue_name, str(i))
    began = time.monotonic()
    fleet.start(broker, spec)
    # Then nothing runs until the leases end, and everything after
    wait_until(lambda: len(seen.started) == 5, "every message handled", timeout=10)
    assert time.monotonic() - began >= 1.2


def test_a_rate_per_key_holds_each_key_to_it_and_leaves_the_others_alone(
    broker: Broker, redis_client: redis.Redis, queue_name: str, fleet: Fleet
) -> None:
    # Given a consumer with rate_per_key="5/s" (burst 1), two workers of 4 threads, 15
    # messages of each of two keys and 10 without a key
    seen = Recorder(redis_client)
    keys: dict[str, str | None] = {}

    def handler(message: Message) -> None:
        keys[message.payload] = message.key
        seen.start(message)
        seen.end()

    spec = ConsumerSpec(
        queue_name, "billing", handler, POLICY, concurrency=4, rate_per_key=Rate.parse("5/s")
    )
    broker.consumers.ensure(queue_name, "billing")
    for i in range(15):
        broker.publish(queue_name, f"a{i}", key="tenant-a")
        broker.publish(queue_name, f"b{i}", key="tenant-b")
    for i in range(10):
        broker.publish(queue_name, f"n{i}")
    fleet.start(broker, spec)
    fleet.start(broker, spec)
    wait_until(lambda: len(seen.started) == 40, "every message handled")
    # Then each key kept to 5/s (+1: a window's two ends) over about 2.8 s, the messages
    # without a key ran at once, and every message ran once, on its first attempt
    for tenant in ("a", "b"):
        times = [t for p, t in seen.started.items() if p.startswith(tenant)]
        assert most_in_any_window(times, 1.0) <= most_allowed(5, 1)
        assert 2.5 <= max(times) - min(times) <= 4.5
    unkeyed = [t for p, t in seen.started.items() if p.startswith("n")]
    assert max(unkeyed) - min(seen.started.values()) < 1.5
    assert set(seen.attempts.values()) == {1}
    assert broker.dead_letters.read(queue_name, "billing") == []


def test_an_ordered_consumer_keeps_each_keys_order_under_its_rate_per_key(
    broker: Broker, redis_client: redis.Redis, queue_name: str, fleet: Fleet
) -> None:
    # Given an ordered consumer with rate_per_key="10/s", two workers of 4 threads, and
    # 12 messages of one key
    order: list[str] = []
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            order.append(message.payload)

    spec = ConsumerSpec(
        queue_name,
        "billing",
        handler,
        POLICY,
        concurrency=4,
        ordered=True,
        rate_per_key=Rate.parse("10/s"),
    )
    broker.consumers.ensure(queue_name, "billing")
    sent = [f"m{i}" for i in range(12)]
    for payload in sent:
        broker.publish(queue_name, payload, key="tenant-a")
    fleet.start(broker, spec)
    fleet.start(broker, spec)
    # Then they ran once each, in publish order
    wait_until(lambda: len(order) >= 12, "every message handled", timeout=20)
    assert order == sent
