"""Settlement as a value: what settling a delivery returns, and what the worker hands its
middleware, says how it was settled (the backoff of a retry, the reason of a dead
letter, the handler's error)."""

from __future__ import annotations

import threading

import pytest
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
from redisq_django.core.handler import Settled, settling
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
    broker.consumers.ensure(queue_name, "billing")
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
    broker.consumers.ensure(queue_name, "billing")
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


def _run(broker: Broker, spec: ConsumerSpec, recorder: Settlements) -> dict[str, int]:
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0)
    worker = Worker(broker, [spec], options, middleware=[recorder])
    assert worker.run() == 0
    return {"handled": 0, "failed": 0, **worker.totals()}


def test_a_handler_that_settles_its_delivery_returns_how_and_is_not_acked_again(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a handler that gets the delivery and settles it itself: it acknowledges one
    # message and leaves the other pending, returning "acknowledged" for both
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    broker.consumers.ensure(queue_name, "billing")
    log = broker.keys(queue_name).log
    broker.publish_many(queue_name, [{"do": "ack"}, {"do": "leave"}])

    @settling
    def handler(delivery: Delivery) -> Settlement:
        if delivery.payload["do"] == "ack":
            redis_client.xack(log, "billing", delivery.entry_id)
        return Settlement.acked()

    recorder = Settlements()
    # When a worker drains the queue
    totals = _run(broker, ConsumerSpec(queue_name, "billing", handler), recorder)
    # Then both count as handled, and the worker acknowledged neither itself
    assert totals["handled"] == 2
    assert totals["failed"] == 0
    assert sorted((do, s) for do, _, s in recorder.seen) == [
        ("ack", Settlement.acked()),
        ("leave", Settlement.acked()),
    ]
    assert redis_client.xpending(log, "billing")["pending"] == 1


def test_raising_settled_still_works_and_warns(redis_client: redis.Redis, queue_name: str) -> None:
    # Given a settling handler written for the old way: it raises Settled(ACKED)
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    broker.consumers.ensure(queue_name, "billing")
    log = broker.keys(queue_name).log
    broker.publish(queue_name, {"do": "ack"})

    @settling
    def handler(delivery: Delivery) -> None:
        redis_client.xack(log, "billing", delivery.entry_id)
        raise Settled(Outcome.ACKED)

    recorder = Settlements()
    # When a worker runs it
    with pytest.warns(DeprecationWarning, match="return the Settlement instead"):
        totals = _run(broker, ConsumerSpec(queue_name, "billing", handler), recorder)
    # Then it counts as handled, not failed, and its middleware sees the settlement
    assert (totals["handled"], totals["failed"]) == (1, 0)
    assert [s for _, _, s in recorder.seen] == [Settlement.acked()]


def test_a_settlement_compared_with_an_outcome_still_answers_and_warns() -> None:
    # Code written when Subscription.fail() and after_settle() gave an Outcome keeps
    # working for one minor version (docs/background/versioning.md), with a warning.
    from redisq_django.core import Outcome, Settlement

    settlement = Settlement.retried(1000)
    with pytest.warns(DeprecationWarning, match="compare settlement.outcome"):
        assert settlement == Outcome.RETRIED
    with pytest.warns(DeprecationWarning):
        assert settlement != Outcome.DEAD
    assert settlement == Settlement.retried(1000) and settlement != Settlement.retried(5)
    assert len({Settlement.acked(), Settlement.acked()}) == 1
