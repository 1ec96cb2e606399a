"""Settlement as a value: what settling a delivery returns, and what the worker hands its
middleware, says how it was settled (the backoff of a retry, the reason of a dead
letter, the handler's error)."""

from __future__ import annotations

import threading

import redis

from redisq_django.core import (
    Broker,
    ConsumerSpec,
    CoreConfig,
    DeadReason,
    Delivery,
    Message,
    Outcome,
    Reject,
    RetryPolicy,
    Settlement,
)
from redisq_django.core.worker import Middleware, Worker, WorkerOptions


class Settlements(Middleware):
    def __init__(self) -> None:
        self.seen: list[tuple[str, int, Settlement]] = []
        self.lock = threading.Lock()

    def after_settle(self, message: Delivery, settlement: Settlement) -> None:
        with self.lock:
            self.seen.append((message.payload["do"], message.attempts, settlement))


def test_the_worker_hands_each_settlement_to_its_middleware(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a handler that succeeds, rejects, or fails on every attempt (one retry)
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    broker.ensure_consumer(queue_name, "billing")
    broker.publish_many(queue_name, [{"do": "ok"}, {"do": "reject"}, {"do": "fail"}])
    errors: dict[str, BaseException] = {}

    def handler(message: Message) -> None:
        do = message.payload["do"]
        if do == "reject":
            raise errors.setdefault(do, Reject("order deleted"))
        if do == "fail":
            errors[f"{do}{message.attempts}"] = exc = KeyError("customer")
            raise exc

    policy = RetryPolicy(max_retries=1, backoff_s=0.05, max_backoff_s=0.05)
    spec = ConsumerSpec(queue_name, "billing", handler, policy=policy)
    recorder = Settlements()
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0)
    # When a worker drains the queue
    assert Worker(broker, [spec], options, middleware=[recorder]).run() == 0
    # Then its middleware saw each settlement as a value
    seen = {(do, attempts): s for do, attempts, s in recorder.seen}
    assert sorted(seen) == [("fail", 1), ("fail", 2), ("ok", 1), ("reject", 1)]
    assert seen["ok", 1] == Settlement.acked()
    assert seen["reject", 1] == Settlement.dead(DeadReason.REJECTED, errors["reject"])
    retried = seen["fail", 1]
    assert retried.outcome is Outcome.RETRIED
    assert retried.retry_in_ms is not None and 1 <= retried.retry_in_ms <= 50
    assert retried.error is errors["fail1"]
    assert seen["fail", 2] == Settlement.dead(DeadReason.FAILED, errors["fail2"])


def test_settling_returns_a_settlement(redis_client: redis.Redis, queue_name: str) -> None:
    # Given three delivered messages
    broker = Broker(redis_client)
    broker.ensure_consumer(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": i} for i in range(3)])
    policy = RetryPolicy(max_retries=3, backoff_s=10, max_backoff_s=10)
    with broker.subscribe(queue_name, "billing", "w1", policy=policy) as sub:
        first, second, third = sub.fetch(count=3, block_ms=500)
        # When one fails, one is rejected and one made a dead letter by its caller
        error = ValueError("x")
        failed = sub.fail(first, error)
        rejected = sub.reject(second, ValueError("y"))
        dead = sub.dead_letter(third, ValueError("z"), DeadReason.FAILED)
        # Then each says how: the backoff of the retry, the reasons of the dead letters
        assert failed.outcome is Outcome.RETRIED
        assert failed.retry_in_ms is not None and 5_000 <= failed.retry_in_ms <= 10_000
        assert (rejected.outcome, rejected.reason) == (Outcome.DEAD, DeadReason.REJECTED)
        assert (dead.outcome, dead.reason) == (Outcome.DEAD, DeadReason.FAILED)
        # and settling one again, no longer held, is lost
        assert sub.fail(first, error) == Settlement.lost()
