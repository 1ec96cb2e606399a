"""The worker's small parts, without Redis: middleware order, the ticker, the budget."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from redisq_django.core import Delivery, Message, Settlement
from redisq_django.core.errors import RedisUnavailable
from redisq_django.core.worker import Every, Middleware, MiddlewareChain, Quota, Ticker


class Recorder(Middleware):
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def before_batch(self, messages: Sequence[Delivery]) -> None:
        self.calls.append(f"{self.name}.before_batch")

    def after_batch(self, messages: Sequence[Delivery]) -> None:
        self.calls.append(f"{self.name}.after_batch")

    def before_process(self, message: Delivery) -> None:
        self.calls.append(f"{self.name}.before_process")

    def after_process(self, message: Delivery, *, error: BaseException | None) -> None:
        self.calls.append(f"{self.name}.after_process")

    def after_settle(self, message: Delivery, settlement: Settlement) -> None:
        self.calls.append(f"{self.name}.after_settle:{settlement.outcome}")


def message() -> Delivery:
    return Delivery(
        Message(
            id="1-0", queue="q", payload={}, headers={}, attempts=1, consumer="g", published_at_ms=1
        )
    )


def test_before_hooks_run_in_order_and_after_hooks_in_reverse() -> None:
    calls: list[str] = []
    chain = MiddlewareChain([Recorder("outer", calls), Recorder("inner", calls)])
    m = message()
    chain.before_batch([m])
    chain.before_process(m)
    chain.after_process(m, error=None)
    chain.after_settle(m, Settlement.acked())
    chain.after_batch([m])
    assert calls == [
        "outer.before_batch",
        "inner.before_batch",
        "outer.before_process",
        "inner.before_process",
        "inner.after_process",
        "outer.after_process",
        "inner.after_settle:acked",
        "outer.after_settle:acked",
        "inner.after_batch",
        "outer.after_batch",
    ]


def test_a_failing_hook_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    class Broken(Middleware):
        def before_process(self, message: Delivery) -> None:
            raise RuntimeError("boom")

    chain = MiddlewareChain([Broken(), Recorder("after", calls)])
    chain.before_process(message())
    assert calls == ["after.before_process"]
    assert "Middleware hook" in caplog.text and "boom" in caplog.text


def test_per_message_hooks_are_skipped_when_nobody_implements_them() -> None:
    class BatchOnly(Middleware):
        def before_batch(self, messages: Sequence[Delivery]) -> None: ...

    assert MiddlewareChain([BatchOnly()]).per_message is False
    assert MiddlewareChain([Recorder("r", [])]).per_message is True


def test_ticker_runs_due_jobs_on_its_clock_and_survives_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    ran: list[str] = []

    def broken() -> None:
        ran.append("broken")
        raise ValueError("nope")

    def offline() -> None:
        ran.append("offline")
        raise RedisUnavailable("127.0.0.1:1", ConnectionError("refused"))

    ticker = Ticker(
        [
            Every("fast", 1.0, lambda: ran.append("fast")),
            Every("later", 5.0, lambda: ran.append("later"), first_after_s=5.0),
            Every("broken", 1.0, broken),
            Every("offline", lambda: 2.0, offline),
        ],
        clock=lambda: now[0],
    )
    ticker.run_due()
    assert ran == ["fast", "broken", "offline"]
    now[0] = 101.0
    ticker.run_due()
    assert ran[3:] == ["fast", "broken"]
    now[0] = 105.0
    ticker.run_due()
    assert ran[5:] == ["fast", "later", "broken", "offline"]
    assert "Worker housekeeping job 'broken' failed" in caplog.text


def test_quota_is_shared_and_bounded() -> None:
    quota = Quota(2)
    assert [quota.take() for _ in range(3)] == [True, True, False]
    assert quota.exhausted
    assert Quota(None).take() and not Quota(None).exhausted
