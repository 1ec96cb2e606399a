"""The liveness thread and its margins, without Redis (fake subscriptions record calls)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

from redisq_django.core.delivery import Delivery
from redisq_django.core.errors import RedisUnavailable
from redisq_django.core.message import Message
from redisq_django.core.worker import Every, Ticker
from redisq_django.core.worker.liveness import LivenessThread, lease_renewal_interval


@dataclass
class FakeSub:
    instance: str
    calls: list[tuple[str, object]] = field(default_factory=list)
    broken: bool = False

    def heartbeat(self, ttl_ms: int, running: object = None) -> None:
        if self.broken:
            raise RedisUnavailable("gone")
        self.calls.append(("heartbeat", ttl_ms))

    def extend(self, held: list[Delivery]) -> list[Delivery]:
        if self.broken:
            raise RuntimeError("NOGROUP")
        self.calls.append(("extend", tuple(m.id for m in held)))
        return []


def msg(message_id: str, lease_ms: int | None = None) -> Delivery:
    m = Message(id=message_id, queue="q", payload=None, headers={}, attempts=1, consumer="g",
                published_at_ms=0)  # fmt: skip
    return Delivery(m, entry_id=message_id.encode(), lease_ms=lease_ms)


class FakeThread:
    def __init__(self, sub: FakeSub, held: list[str]) -> None:
        self.sub, self.held = sub, [msg(m) for m in held]

    def is_alive(self) -> bool:
        return True


def test_leases_are_renewed_every_third_of_the_shortest_visibility_timeout() -> None:
    assert lease_renewal_interval([60_000, 3_000]) == pytest.approx(1.0)
    assert lease_renewal_interval([]) == pytest.approx(20.0)  # the 60 s default
    assert lease_renewal_interval([100]) == pytest.approx(0.2)  # never busier than 5/s


def test_ticker_says_when_the_next_job_is_due() -> None:
    now = [100.0]
    ticker = Ticker(clock=lambda: now[0])
    assert ticker.seconds_to_next() == 1.0  # nothing to run
    ticker.add(Every("a", 2.0, lambda: None, first_after_s=3.0))
    assert ticker.seconds_to_next() == pytest.approx(3.0)
    now[0] = 104.0  # late: due at once
    assert ticker.seconds_to_next() == 0.0


def test_liveness_runs_while_the_caller_is_blocked_and_one_failure_spares_the_others() -> None:
    # Given two instances, the first one's Redis calls failing
    broken, fine = FakeSub("a", broken=True), FakeSub("b")
    threads = [FakeThread(broken, ["m1"]), FakeThread(fine, ["m2", "m3"])]
    liveness = LivenessThread(
        threads=lambda: threads,  # type: ignore[arg-type,return-value]
        heartbeat_interval=0.05,
        heartbeat_ttl=0.5,
        renewal_interval=lambda: 0.05,
    )

    # When it runs while this thread is blocked (as the main thread is on a locked database)
    liveness.start()
    blocked = threading.Event()
    blocked.wait(0.4)

    # Then the healthy instance was heartbeaten and its leases renewed all along
    assert fine.calls.count(("heartbeat", 500)) >= 4
    assert fine.calls.count(("extend", ("m2", "m3"))) >= 4

    # And after stop() nothing more is sent (a cold stop then expires the heartbeats)
    liveness.stop()
    assert not liveness.is_alive()
    sent = len(fine.calls)
    time.sleep(0.15)
    assert len(fine.calls) == sent


def test_a_lease_of_its_own_is_renewed_every_third_of_it_whatever_the_consumer_s() -> None:
    # Given an instance running a message with a lease of its own of 0.9 s, and another
    # running a plain one, with consumers' visibility timeouts renewed every 10 s
    own, plain = FakeSub("a"), FakeSub("b")
    threads = [FakeThread(own, []), FakeThread(plain, ["p1"])]
    threads[0].held = [msg("t1", lease_ms=900)]
    liveness = LivenessThread(
        threads=lambda: threads,  # type: ignore[arg-type,return-value]
        heartbeat_interval=10.0,
        heartbeat_ttl=15.0,
        renewal_interval=lambda: 10.0,
    )
    # When the liveness thread runs for 1.2 s
    liveness.start()
    try:
        started = time.monotonic()
        threading.Event().wait(1.2)
        elapsed = time.monotonic() - started
    finally:
        liveness.stop()
    # Then the own lease was renewed about every 0.3 s (its first renewal a third of it
    # after it was seen: its start began it), and never by the consumers' schedule
    renewals = own.calls.count(("extend", ("t1",)))
    assert 2 <= renewals <= elapsed / 0.3 + 1
    # And the plain message was renewed once, at the start, on the consumers' schedule
    assert plain.calls.count(("extend", ("p1",))) == 1
