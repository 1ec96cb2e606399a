"""``async def`` handlers: one instance per consumer keeping up to ``concurrency``
handlers in flight on the worker's event loop, with the acks, retries, dead letters,
leases, middleware and counts of handler threads; beside sync consumers in one worker.
Real redis-server; the worker in this process."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import redis

from redisq_django.core import Broker, ConsumerSpec, CoreConfig, Message, Reject, RetryPolicy
from redisq_django.core.delivery import Delivery
from redisq_django.core.worker import Middleware, Worker, WorkerOptions
from redisq_django.core.worker.coroutines import is_async_handler

POLICY = RetryPolicy.from_seconds(
    max_retries=2, backoff=0.01, max_backoff=0.02, visibility_timeout=30
)


def burst(broker: Broker, specs: list[ConsumerSpec], middleware: Any = ()) -> Worker:
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0)
    worker = Worker(broker, specs, options, middleware=middleware)
    assert worker.run() == 0
    return worker


def _pending(client: redis.Redis, broker: Broker, queue: str, group: str) -> int:
    keys = broker.keys(queue)
    total = 0
    for stream in (keys.log, keys.group(group).direct):
        if client.exists(stream):
            total += int(client.xpending(stream, group)["pending"])
    return total


class InFlight:
    """Counts handlers running now, and the most seen at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.seen: list[str] = []

    async def handler(self, message: Message) -> None:
        self.now += 1  # on the one loop thread: no lock needed
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0.05)
            self.seen.append(message.id)
        finally:
            self.now -= 1


def test_async_handlers_run_concurrency_at_a_time_and_are_each_acked(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20, history=True))
    ids = broker.publish_many(queue_name, [{"n": i} for i in range(60)])
    flight = InFlight()
    assert is_async_handler(flight.handler)
    spec = ConsumerSpec(queue_name, "billing", flight.handler, start="earliest", concurrency=20)

    # When a burst worker runs the async consumer with concurrency 20
    worker = burst(broker, [spec])

    # Then every message was handled once, 20 handlers in flight at most (and at once)
    assert sorted(flight.seen) == sorted(ids)
    assert flight.most == 20
    # by one instance, on one event loop thread that is gone after the run
    assert len(worker.threads[spec.key]) == 1
    assert worker.loop is not None and worker.loop.loop.is_closed()
    # And each was acknowledged, counted and recorded as handled
    assert _pending(redis_client, broker, queue_name, "billing") == 0
    assert worker.totals()["handled"] == 60
    events = redis_client.xrange(broker.keys(queue_name).events)
    assert sum(1 for _, f in events if f[b"e"] == b"handled") >= 3


def test_sync_and_async_consumers_in_one_worker(redis_client: redis.Redis, queue_name: str) -> None:
    broker = Broker(redis_client)
    ids = broker.publish_many(queue_name, [{"n": i} for i in range(40)])
    seen: Counter[tuple[str, str]] = Counter()
    threads: set[str] = set()

    def sync_handler(message: Message) -> None:
        seen["sync", message.id] += 1
        threads.add(threading.current_thread().name)

    async def async_handler(message: Message) -> None:
        await asyncio.sleep(0)
        seen["async", message.id] += 1
        threads.add(threading.current_thread().name)

    specs = [
        ConsumerSpec(queue_name, "mail", sync_handler, start="earliest", concurrency=2),
        ConsumerSpec(queue_name, "http", async_handler, start="earliest", concurrency=8),
    ]
    burst(broker, specs)
    # Then each logical consumer handled every message once, the async one on the loop
    assert sorted(i for kind, i in seen if kind == "sync") == sorted(ids)
    assert sorted(i for kind, i in seen if kind == "async") == sorted(ids)
    assert set(seen.values()) == {1}
    assert "redisq-asyncio" in threads
    assert any(name.startswith(f"redisq-{queue_name}-mail-") for name in threads)


def test_a_failing_async_handler_is_retried_then_dead_and_reject_is_dead_at_once(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client)
    fail = broker.publish(queue_name, {"do": "fail"})
    reject = broker.publish(queue_name, {"do": "reject"})
    good = broker.publish_many(queue_name, [{"do": "ok"}] * 5)
    attempts: Counter[str] = Counter()

    async def handler(message: Message) -> None:
        attempts[message.id] += 1
        await asyncio.sleep(0.01)
        if message.payload["do"] == "fail":
            raise ValueError(f"failed on attempt {message.attempts}")
        if message.payload["do"] == "reject":
            raise Reject("never")

    spec = ConsumerSpec(
        queue_name, "billing", handler, policy=POLICY, start="earliest", concurrency=4
    )
    worker = burst(broker, [spec])

    # Then the failing one was tried max_retries + 1 times, the rejected one once
    assert attempts[fail] == 3 and attempts[reject] == 1
    assert all(attempts[i] == 1 for i in good)
    dead = {d.id: d for d in broker.dead_letters.read(queue_name, "billing")}
    assert set(dead) == {fail, reject}
    assert (dead[fail].attempts, dead[fail].error_class) == (3, "ValueError")
    assert "failed on attempt 3" in dead[fail].error_message
    assert "ValueError" in dead[fail].traceback
    assert dead[reject].reason == "rejected"
    totals = worker.totals()
    assert (totals["handled"], totals["dead"], totals["retried"]) == (5, 2, 2)
    assert _pending(redis_client, broker, queue_name, "billing") == 0


class Recorder(Middleware):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None]] = []

    def before_process(self, message: Delivery) -> None:
        self.calls.append(("before", message.id, None))

    def after_process(self, message: Delivery, *, error: BaseException | None) -> None:
        self.calls.append(("after", message.id, type(error).__name__ if error else None))


def test_middleware_sees_each_async_handler_as_it_runs(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client)
    ids = broker.publish_many(queue_name, [1, 2, 3])
    recorder = Recorder()

    async def handler(message: Message) -> None:
        await asyncio.sleep(0.01 * message.payload)
        if message.payload == 2:
            raise Reject("two")

    spec = ConsumerSpec(queue_name, "billing", handler, start="earliest", concurrency=3)
    burst(broker, [spec], middleware=[recorder])
    # All three started before the first ended: the handlers ran together
    assert [c[0] for c in recorder.calls] == ["before"] * 3 + ["after"] * 3
    assert [(c[1], c[2]) for c in recorder.calls[3:]] == [
        (ids[0], None),
        (ids[1], "Reject"),
        (ids[2], None),
    ]


def test_a_long_async_handler_keeps_its_lease(redis_client: redis.Redis, queue_name: str) -> None:
    # Given a visibility timeout of 1 s and handlers that take 2.5 s
    broker = Broker(redis_client)
    ids = broker.publish_many(queue_name, [1, 2])
    policy = RetryPolicy.from_seconds(
        max_retries=0, backoff=0.01, max_backoff=0.02, visibility_timeout=1
    )

    async def handler(message: Message) -> None:
        await asyncio.sleep(2.5)

    spec = ConsumerSpec(
        queue_name, "billing", handler, policy=policy, start="earliest", concurrency=2
    )
    broker.consumers.ensure(queue_name, "billing", "earliest")  # before other's first look
    other = broker.subscribe(queue_name, "billing", "other", policy=policy)
    taken: list[str] = []
    worker = Worker(broker, [spec], WorkerOptions(block_ms=50, burst=True, stats_interval=0))
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        # When another instance looks for expired leases while they run
        deadline = time.monotonic() + 2.2
        while time.monotonic() < deadline:
            taken += [m.id for m in other.reclaim(10)]
            time.sleep(0.2)
    finally:
        runner.join(timeout=30)
    # Then it finds none: the leases of both running messages were renewed
    assert taken == []
    assert worker.totals()["handled"] == 2
    assert _pending(redis_client, broker, queue_name, "billing") == 0
    assert len(ids) == 2


def test_concurrency_changed_at_run_time_sets_the_handlers_in_flight(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given an async consumer running 3 handlers at a time
    broker = Broker(redis_client)
    broker.publish_many(queue_name, list(range(40)))
    flight = InFlight()
    spec = ConsumerSpec(queue_name, "billing", flight.handler, start="earliest", concurrency=3)
    # When its concurrency becomes 7 (an admin edit) while it runs
    worker = Worker(
        broker,
        [spec],
        WorkerOptions(block_ms=50, burst=True, stats_interval=0, refresh_interval=0.01),
        refresh=lambda: [spec.evolve(concurrency=7)],
    )
    assert worker.run() == 0
    # Then it keeps 7 handlers in flight from then on, still on one instance
    assert len(flight.seen) == 40
    assert flight.most == 7
    assert len(worker.threads[spec.key]) == 1


def _call_on_loop(worker: Worker, fn: Any) -> None:
    """Run ``fn`` on the worker's event loop (where its handlers' asyncio objects live)."""
    assert worker.loop is not None
    worker.loop.loop.call_soon_threadsafe(fn)


def _wait_until(condition: Any, what: str, timeout: float = 20.0) -> bool:
    """Poll ``condition`` until true or ``timeout`` s; whether it became true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    print(f"gave up waiting for {what}")
    return False


def test_a_slow_async_handler_holds_one_slot_and_the_others_are_refilled(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a slow message (its handler waits until the test lets it go), then 20 fast ones
    broker = Broker(redis_client)
    slow = broker.publish(queue_name, {"slow": True})
    fast = broker.publish_many(queue_name, [{"slow": False, "n": i} for i in range(20)])
    release = asyncio.Event()
    flight = InFlight()
    done: list[str] = []

    async def handler(message: Message) -> None:
        flight.now += 1  # on the one loop thread: no lock needed
        flight.most = max(flight.most, flight.now)
        try:
            if message.payload["slow"]:
                await release.wait()
            else:
                await asyncio.sleep(0.01)
            done.append(message.id)
        finally:
            flight.now -= 1

    spec = ConsumerSpec(queue_name, "billing", handler, start="earliest", concurrency=4)
    worker = Worker(broker, [spec], WorkerOptions(block_ms=50, burst=True, stats_interval=0))
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        # When the worker runs it with concurrency 4 while the slow handler waits
        _wait_until(
            lambda: len(done) == 20 and _pending(redis_client, broker, queue_name, "billing") == 1,
            "the fast messages to be handled and acked",
        )
        # Then the three other slots were refilled: every fast message is handled and
        # acknowledged while the slow one still runs, the only one pending
        assert sorted(done) == sorted(fast)
        assert flight.now == 1
        log = broker.keys(queue_name).log
        pending = redis_client.xpending_range(log, "billing", "-", "+", 100)
        assert [p["message_id"].decode() for p in pending] == [slow]
        assert worker.totals()["handled"] == 20
    finally:
        if worker.loop is not None:
            _call_on_loop(worker, release.set)
        runner.join(timeout=30)
    # And once it is let go, the slow one is handled and acked too, 4 in flight at most
    assert not runner.is_alive()
    assert sorted(done) == sorted([slow, *fast])
    assert flight.most == 4
    assert _pending(redis_client, broker, queue_name, "billing") == 0
    assert worker.totals()["handled"] == 21


def test_graceful_stop_lets_async_handlers_in_flight_finish_and_acks_them(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given an async consumer with 4 handlers in flight, each waiting for the test
    broker = Broker(redis_client)
    ids = broker.publish_many(queue_name, list(range(10)))
    release = asyncio.Event()
    started: list[str] = []
    done: list[str] = []

    async def handler(message: Message) -> None:
        started.append(message.id)
        await release.wait()
        done.append(message.id)

    spec = ConsumerSpec(queue_name, "billing", handler, start="earliest", concurrency=4)
    options = WorkerOptions(block_ms=50, stats_interval=0, grace_period=30)
    worker = Worker(broker, [spec], options)
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(worker.run()))
    runner.start()
    try:
        assert _wait_until(lambda: len(started) == 4, "4 handlers in flight")
        # When the worker is asked to stop warm while they run, and they finish after
        worker.stop()
    finally:
        if worker.loop is not None:
            _call_on_loop(worker, release.set)
        runner.join(timeout=30)
    # Then the worker exits cleanly, the 4 in flight handled and acknowledged, and no
    # other message fetched: nothing is pending, the other 6 wait in the log
    assert codes == [0]
    assert sorted(done) == sorted(started) == sorted(ids[:4])
    assert worker.totals()["handled"] == 4
    assert _pending(redis_client, broker, queue_name, "billing") == 0
    # (the next worker gets them)
    assert burst(broker, [spec]).totals()["handled"] == 6
    assert sorted(done) == sorted(ids)
