"""Time limits (issue 34, point 3): a handler past its consumer's ``time_limit`` is
stopped, its attempt fails with "time limit exceeded after N s" (retried, then a dead
letter), and the worker goes on with the other messages. Thread handlers get the
exception raised into them; async ones are cancelled; a thread blocked in a call Python
cannot interrupt is left, and its worker stops cold once it is stuck past the grace
period. Real redis-server; the worker in this process."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from redisq_django.core import Broker, ConsumerSpec, Message, RetryPolicy
from redisq_django.core.dead_entry import DeadReason
from redisq_django.core.worker import Worker, WorkerOptions
from redisq_django.core.worker.time_limits import TimeLimitExceeded

#: No retry: a timed-out attempt is a dead letter at once, which the test reads.
DEAD_AT_ONCE = RetryPolicy.from_seconds(
    max_retries=0, backoff=0.01, max_backoff=0.02, visibility_timeout=30
)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 20) -> float:
    """Seconds until ``condition`` held (bounded: fails after ``timeout``)."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if condition():
            return time.monotonic() - began
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def running(broker: Broker, spec: ConsumerSpec, **options: Any) -> tuple[Worker, threading.Thread]:
    worker = Worker(broker, [spec], WorkerOptions(block_ms=50, stats_interval=0, **options))
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    return worker, runner


def dead(broker: Broker, queue: str) -> dict[str, Any]:
    return {d.id: d for d in broker.dead_letters.read(queue, "billing")}


def test_a_thread_handler_in_python_code_is_stopped_at_its_limit_and_its_thread_goes_on(
    broker: Broker, queue_name: str
) -> None:
    # Given a consumer with a 1 s limit and one thread, whose handler loops in Python for
    # ever on the first message and returns at once on the others
    seen: list[tuple[str, str]] = []

    def handler(message: Message) -> None:
        if message.payload == "loop":
            try:
                while True:
                    time.sleep(0.01)  # Python code between short C calls: interruptible
            except TimeLimitExceeded:
                seen.append(("stopped", message.id))
                raise
        seen.append(("handled", message.id))

    spec = ConsumerSpec(
        queue_name, "billing", handler, DEAD_AT_ONCE, start="earliest", time_limit=1
    )
    looping = broker.publish(queue_name, "loop")
    others = broker.publish_many(queue_name, ["a", "b", "c"])
    worker, runner = running(broker, spec)
    try:
        # When it runs: the loop is stopped after about 1 s, and the same thread goes on
        took = wait_until(lambda: len(seen) == 4, "the loop stopped and 3 handled")
    finally:
        worker.stop()
        runner.join(timeout=30)
    # Then the handler saw TimeLimitExceeded, the other three were handled after it by
    # the only thread, and the looping message is a dead letter saying why
    assert seen == [("stopped", looping), *(("handled", i) for i in others)]
    assert 1 <= took < 10
    letter = dead(broker, queue_name)[looping]
    assert letter.reason == DeadReason.FAILED
    assert letter.error_class == "TimeLimitExceeded"
    assert letter.error_message == "time limit exceeded after 1 s"
    assert set(dead(broker, queue_name)) == {looping}
    totals = worker.totals()
    assert (totals["handled"], totals["failed"], totals["dead"]) == (3, 1, 1)
    # ...counted as time-limited in this minute's trends (the admin's "last hour")
    assert broker.operator.flow(queue_name, "billing")[1] == 1


def test_a_thread_blocked_in_a_c_call_has_its_message_failed_at_the_limit_while_the_others_go_on(
    broker: Broker, queue_name: str
) -> None:
    # Given a 1 s limit, two threads, and a handler that sleeps 4 s in one C call
    # (time.sleep: no exception reaches it before the call returns) on one message
    ended: list[str] = []

    def handler(message: Message) -> None:
        if message.payload == "slow":
            time.sleep(4)
        ended.append(message.id)

    spec = ConsumerSpec(
        queue_name,
        "billing",
        handler,
        RetryPolicy.from_seconds(
            max_retries=1, backoff=0.01, max_backoff=0.02, visibility_timeout=30
        ),
        start="earliest",
        concurrency=2,
        time_limit=1,
    )
    slow = broker.publish(queue_name, "slow")
    worker, runner = running(broker, spec, prefetch=1)
    try:
        # When the slow one has run past its limit
        began = time.monotonic()
        others = [broker.publish(queue_name, i) for i in range(5)]
        wait_until(lambda: set(others) <= set(ended), "the other messages handled")
        # Then its first attempt failed at about 1 s, before the sleep ended: its retry
        # (the second and last attempt) is the one running now, or done
        wait_until(lambda: worker.totals()["failed"] >= 1, "the first attempt failed")
        assert time.monotonic() - began < 3.9
        wait_until(lambda: slow in dead(broker, queue_name), "the retry timed out too", 30)
    finally:
        worker.stop()
        runner.join(timeout=30)
    # ...and after its retry timed out as well it is a dead letter with the limit's
    # error, while every other message was handled once
    letter = dead(broker, queue_name)[slow]
    assert (letter.error_class, letter.attempts) == ("TimeLimitExceeded", 2)
    assert sorted(i for i in ended if i != slow) == sorted(others)
    assert worker.totals()["handled"] == 5


def test_an_async_handler_is_cancelled_at_its_limit(broker: Broker, queue_name: str) -> None:
    # Given an async consumer with a 1 s limit whose handler waits 30 s on one message
    cancelled: list[str] = []

    async def handler(message: Message) -> None:
        if message.payload == "slow":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(message.id)
                raise

    spec = ConsumerSpec(
        queue_name, "billing", handler, DEAD_AT_ONCE, start="earliest", time_limit=1
    )
    slow = broker.publish(queue_name, "slow")
    quick = broker.publish_many(queue_name, ["a", "b"])
    worker, runner = running(broker, spec)
    try:
        # When it runs
        took = wait_until(lambda: slow in dead(broker, queue_name), "the slow one dead")
        wait_until(lambda: worker.totals()["handled"] == 2, "the quick ones handled")
    finally:
        worker.stop()
        runner.join(timeout=30)
    # Then it was cancelled at about 1 s and is a dead letter saying why
    assert cancelled == [slow]
    assert 1 <= took < 10
    assert dead(broker, queue_name)[slow].error_message == "time limit exceeded after 1 s"
    assert set(dead(broker, queue_name)) == {slow}
    assert len(quick) == worker.totals()["handled"]


def test_handlers_within_their_limit_are_acked_as_always(broker: Broker, queue_name: str) -> None:
    # Given 200 quick messages and a limit far above their handlers' time
    ids = broker.publish_many(queue_name, list(range(200)))
    seen: list[str] = []
    spec = ConsumerSpec(
        queue_name,
        "billing",
        lambda m: seen.append(m.id),
        DEAD_AT_ONCE,
        start="earliest",
        concurrency=4,
        time_limit=5,
    )
    # When a worker drains them
    worker = Worker(broker, [spec], WorkerOptions(block_ms=50, burst=True, stats_interval=0))
    assert worker.run() == 0
    # Then every one was handled once and acknowledged, none failed
    assert sorted(seen) == sorted(ids)
    assert worker.totals()["handled"] == 200 and worker.totals()["failed"] == 0
    assert dead(broker, queue_name) == {}


def test_a_handler_stuck_past_the_grace_period_stops_its_worker_cold(
    broker: Broker, queue_name: str
) -> None:
    # Given a 1 s limit, a 1 s grace period, and a handler blocked in a C call for 30 s
    gate = threading.Event()
    spec = ConsumerSpec(
        queue_name,
        "billing",
        lambda m: gate.wait(30),  # one C-level wait: no exception reaches it
        DEAD_AT_ONCE,
        start="earliest",
        time_limit=1,
    )
    stuck = broker.publish(queue_name, "stuck")
    worker = Worker(broker, [spec], WorkerOptions(block_ms=50, stats_interval=0, grace_period=1))
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(worker.run()), daemon=True)
    began = time.monotonic()
    runner.start()
    try:
        # When it is still blocked 1 s after its limit
        runner.join(timeout=20)
    finally:
        gate.set()
    # Then the worker stopped by itself, cold, exit code 1 (its supervisor starts a new
    # process), about 2 s in; the stuck message had failed at its limit already
    assert codes == [1] and worker.cold
    assert 2 <= time.monotonic() - began < 15
    assert dead(broker, queue_name)[stuck].error_class == "TimeLimitExceeded"
