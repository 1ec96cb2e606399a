"""A worker whose ordered consumer meets a value another client wrote (``held_back`` that
is no count): it logs the key once as an error, keeps its threads, reads nothing
meanwhile, and once an operator repairs the key handles every message once, in order.
Real redis-server; the worker in this process."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from redisq_django.core import Broker, ConsumerSpec, Message
from redisq_django.core.keys import queue_keys
from redisq_django.core.worker import Worker, WorkerOptions


def test_a_corrupt_held_back_stops_the_ordered_consumer_loudly_until_repaired(
    broker: Broker, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an ordered consumer, 6 messages of key a and 3 without a key, and a held_back
    # another client set to text
    broker.consumers.ensure(queue_name, "ledger", "earliest")
    ids = [broker.publish(queue_name, {"n": n}, key="a") for n in range(6)]
    ids += [broker.publish(queue_name, {"n": n}) for n in range(6, 9)]
    held_back = queue_keys("redisq", queue_name).group("ledger").held_back
    broker.client.set(held_back, "lots")
    handled: list[str] = []
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            handled.append(message.id)

    spec = ConsumerSpec(queue_name, "ledger", handler, ordered=True, concurrency=2)
    worker = Worker(broker, [spec], WorkerOptions(block_ms=50, stats_interval=0))
    runner = threading.Thread(target=worker.run, daemon=True)
    caplog.set_level(logging.WARNING)
    # When it runs
    runner.start()
    try:
        for _ in range(100):
            if any(held_back in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.05)
        time.sleep(0.3)
        # Then it logs the key as an error, handles nothing, and keeps running
        errors = [r for r in caplog.records if held_back in r.getMessage()]
        assert errors and all(r.levelno == logging.ERROR for r in errors)
        assert "lots" in errors[0].getMessage()
        assert len(errors) <= spec.concurrency  # once per thread, not once per try
        assert handled == []
        assert runner.is_alive()
        # And once an operator sets it right, every message is handled once, in order
        broker.client.set(held_back, 0)
        deadline = time.monotonic() + 20
        for _ in range(400):
            with lock:
                if len(handled) >= len(ids) or time.monotonic() > deadline:
                    break
            time.sleep(0.05)
    finally:
        worker.stop()
        runner.join(timeout=15)
    assert sorted(handled) == sorted(ids)
    assert [i for i in handled if i in ids[:6]] == ids[:6]
    assert any("repaired" in r.getMessage() for r in caplog.records)
