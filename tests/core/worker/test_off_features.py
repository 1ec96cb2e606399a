"""Features that are off cost a drain nothing: their hooks are never called.

A worker with no limits (rate, per key, ``max_in_flight``), no time limit, history
off, no middleware that looks at each message and no ended marks drains without
entering any of their code (issue 39: the per-message budget of a no-op handler is
the fetch, the handler call and one write). Tracing and metrics are middleware that
are not in the chain when off (``tests/metrics/test_tracing.py``), so what a chain
without per-message hooks costs is shown here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, ConsumerSpec, CoreConfig, Message, lifecycle, ordered
from redisq_django.core import ended as ended_marks
from redisq_django.core.delivery import Delivery
from redisq_django.core.subscription import Subscription
from redisq_django.core.worker import Middleware, Worker, WorkerOptions
from redisq_django.core.worker.acks import AckPipe
from redisq_django.core.worker.flow import Flow
from redisq_django.core.worker.middleware import MiddlewareChain
from redisq_django.core.worker.time_limits import Watch

N = 200

#: What each feature runs when it is on, by feature.
OFF_HOOKS: dict[str, list[tuple[Any, str]]] = {
    "rate and max_in_flight limits": [
        (Flow, "take_slots"),
        (Flow, "give_slots"),
        (Flow, "take_tokens"),
        (Flow, "give_tokens"),
        (Flow, "admit_fetched"),
    ],
    "per-key rates": [(Flow, "key_turns")],
    "time limits": [(Watch, "arm"), (Watch, "disarm"), (Watch, "overdue")],
    "ended marks (none exist)": [
        (ended_marks, "marks_of"),
        (Subscription, "_end_marked"),
    ],
    "history": [(lifecycle, "record")],
    "ordered consumers": [(ordered, "read_or_wait")],
    "per-message middleware hooks": [
        (MiddlewareChain, "before_process"),
        (MiddlewareChain, "after_process"),
        (MiddlewareChain, "after_settle"),
    ],
    "handlers that settle themselves (tasks)": [(AckPipe, "count_settled")],
}


class BatchOnly(Middleware):
    """Looks at batches only, as the database hygiene middleware does."""

    def __init__(self) -> None:
        self.batches = 0

    def before_batch(self, deliveries: Sequence[Delivery]) -> None:
        self.batches += 1


def test_a_drain_never_calls_the_hooks_of_features_that_are_off(
    redis_client: redis.Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given N messages and a consumer with every optional feature off
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20, history=False))
    broker.consumers.ensure(queue_name, "billing")
    ids = broker.publish_many(queue_name, [{"n": i} for i in range(N)])
    called: Counter[str] = Counter()
    for feature, hooks in OFF_HOOKS.items():
        for owner, name in hooks:
            original = getattr(owner, name)

            def spy(*args: Any, _f: Any = original, _what: str = feature, **kw: Any) -> Any:
                called[_what] += 1
                return _f(*args, **kw)

            monkeypatch.setattr(owner, name, spy)
    seen: list[str] = []

    def handler(message: Message) -> None:
        seen.append(message.id)

    middleware = BatchOnly()
    spec = ConsumerSpec(queue_name, "billing", handler, start="earliest")
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0)

    # When a worker drains them
    assert Worker(broker, [spec], options, middleware=[middleware]).run() == 0

    # Then each was handled once, the batch hook ran, and no off feature's code did
    assert sorted(seen) == sorted(ids)
    assert middleware.batches > 0
    assert called == Counter()
