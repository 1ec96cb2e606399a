"""The scheduler against a real Redis, with an injected (simulated) clock: each tick is
published exactly once however many workers evaluate it, also after a restart, a crash
between claim and publish, downtime, a lagging clock, or a lost Redis state; DST nights
in Europe/Paris and America/New_York through the whole path."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from zoneinfo import ZoneInfo

import pytest
import redis

from redisq_django.core.broker import Broker
from redisq_django.core.keys import queue_keys, schedule_keys
from redisq_django.schedules.scheduler import REPAIR_AFTER_MS, Fired, Scheduler
from redisq_django.schedules.spec import QueueTarget, ScheduleSpec, tick_id
from redisq_django.schedules.targets import firer, publish_tick
from redisq_django.schedules.timing import Missed, Timing
from tests.support.ticks import published_ids

SECOND = 1000
MINUTE = 60 * SECOND


def ms(text: str, zone: str = "UTC") -> int:
    return int(dt.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp() * 1000)


class SimClock:
    """A clock the test moves; ``skew_ms`` makes a worker's view of it late or early."""

    def __init__(self, start: int) -> None:
        self.now = start

    def view(self, skew_ms: int = 0) -> Callable[[], int]:
        return lambda: self.now + skew_ms


def make_worker(
    broker: Broker, specs: Callable[[], Sequence[ScheduleSpec]], clock: Callable[[], int]
) -> Scheduler:
    return Scheduler(broker.schedule_ledger, specs, firer(broker), clock=clock)


def run_together(
    workers: Sequence[Scheduler], clock: SimClock, start: int, end: int, step_ms: int
) -> list[Fired]:
    """Move the clock from ``start`` to ``end`` by ``step_ms``; at each step every worker
    evaluates at the same moment in a thread of its own (they race for each tick)."""
    fired: list[Fired] = []
    lock = threading.Lock()
    steps = list(range(start, end + 1, step_ms))
    barrier = threading.Barrier(len(workers) + 1, timeout=30)
    errors: list[BaseException] = []

    def loop(worker: Scheduler) -> None:
        try:
            for _ in steps:
                barrier.wait()
                done = worker.evaluate()
                with lock:
                    fired.extend(done)
                barrier.wait()
        except BaseException as exc:  # reported by the test, not lost in a thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    for now in steps:
        clock.now = now
        barrier.wait()  # go
        barrier.wait()  # all evaluated
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    return fired


def test_three_workers_over_five_simulated_minutes_publish_each_tick_once(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given three schedules (every second, every minute, every 10 s by a 6-field cron)
    broker = Broker(redis_client)
    t0 = ms("2025-06-01 12:00")
    specs = [
        ScheduleSpec(
            f"{queue_name}.1s", Timing.of(every=1), QueueTarget(queue_name, 1), since_ms=t0
        ),
        ScheduleSpec(
            f"{queue_name}.1m", Timing.of(cron="* * * * *"), QueueTarget(queue_name, 2), since_ms=t0
        ),
        ScheduleSpec(
            f"{queue_name}.10s",
            Timing.of(cron="*/10 * * * * *", timezone="Europe/Paris"),
            QueueTarget(queue_name, 3),
            since_ms=t0,
        ),
    ]
    # And three workers whose clocks differ (one 300 ms late, one 250 ms early)
    clock = SimClock(t0)
    workers = [make_worker(broker, lambda: specs, clock.view(skew)) for skew in (-300, 0, 250)]

    # When they all evaluate every 100 ms for 5 minutes of simulated time
    fired = run_together(workers, clock, t0, t0 + 5 * MINUTE, 100)

    # Then every tick of the 5 minutes is published exactly once
    expected = (
        [tick_id(specs[0].name, t0 + s * SECOND) for s in range(1, 301)]
        + [tick_id(specs[1].name, t0 + m * MINUTE) for m in range(1, 6)]
        + [tick_id(specs[2].name, t0 + s * SECOND) for s in range(10, 301, 10)]
    )
    ids = published_ids(redis_client, queue_name)
    assert Counter(ids) == Counter(expected)
    assert len(ids) == 335
    # And the workers say the same: 335 ticks fired between them, none twice
    assert sorted(f.message_id for f in fired) == sorted(expected)
    # And each message carries its schedule and tick time
    entries = redis_client.xrange(queue_keys("redisq", queue_name).log)
    headers = {f[b"id"].decode(): json.loads(f[b"headers"]) for _, f in entries}
    assert headers[tick_id(specs[1].name, t0 + MINUTE)] == {
        "schedule": specs[1].name,
        "scheduled_for": "2025-06-01T12:01:00+00:00",
    }


class ReadTogether:
    """A client whose pipelines (the scheduler's read of the claims) return only when
    every worker has read: all of them then see the same state and race for the tick."""

    def __init__(self, client: redis.Redis, barrier: threading.Barrier) -> None:
        self._client = client
        self._barrier = barrier

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    def pipeline(self, transaction: bool = True) -> object:
        pipe = self._client.pipeline(transaction=transaction)
        barrier = self._barrier

        class Waiting:
            def __getattr__(self, name: str) -> object:
                return getattr(pipe, name)

            def execute(self) -> list[object]:
                result = pipe.execute()
                barrier.wait()
                return result

        return Waiting()


def test_workers_that_read_the_same_state_at_once_fire_a_tick_once(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given three workers that all read the schedule's state before any of them claims
    t0 = ms("2025-06-01 12:00")
    spec = ScheduleSpec(queue_name, Timing.of(every=1), QueueTarget(queue_name), since_ms=t0)
    barrier = threading.Barrier(3, timeout=10)
    broker = Broker(redis_client)
    workers = [
        Scheduler(
            Broker(ReadTogether(redis_client, barrier)).schedule_ledger,
            lambda: [spec],
            firer(broker),
            clock=lambda: t0 + 1500,
        )
        for _ in range(3)
    ]
    results: list[list[Fired]] = []
    threads = [threading.Thread(target=lambda w=w: results.append(w.evaluate())) for w in workers]
    # When they evaluate together, each seeing the 12:00:01 tick due
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    # Then exactly one of them claimed and fired it, and it was published once
    assert sorted(len(r) for r in results) == [0, 0, 1]
    assert published_ids(redis_client, queue_name) == [tick_id(queue_name, t0 + 1000)]


def test_a_restarted_worker_does_not_fire_a_tick_again(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a worker that fired the 12:00:05 tick of an every-5-s schedule
    broker = Broker(redis_client)
    t0 = ms("2025-06-01 12:00")
    spec = ScheduleSpec(queue_name, Timing.of(every=5), QueueTarget(queue_name), since_ms=t0)
    clock = SimClock(t0 + 5 * SECOND + 40)
    assert [f.tick_ms for f in make_worker(broker, lambda: [spec], clock.view()).evaluate()] == [
        t0 + 5 * SECOND
    ]
    # When it restarts (a new scheduler, nothing in memory) within the same second
    restarted = make_worker(broker, lambda: [spec], clock.view())
    clock.now += 500
    # Then it fires nothing, and the next tick once
    assert restarted.evaluate() == []
    clock.now = t0 + 10 * SECOND + 10
    assert [f.tick_ms for f in restarted.evaluate()] == [t0 + 10 * SECOND]
    assert published_ids(redis_client, queue_name) == [
        tick_id(queue_name, t0 + 5 * SECOND),
        tick_id(queue_name, t0 + 10 * SECOND),
    ]


@pytest.mark.parametrize("first_send_went_through", [False, True])
def test_a_tick_claimed_by_a_worker_that_died_is_published_once_by_another(
    redis_client: redis.Redis, queue_name: str, first_send_went_through: bool
) -> None:
    # Given a worker that claimed the 12:01 tick and died before marking it sent (before
    # publishing it, or just after)
    broker = Broker(redis_client)
    t0 = ms("2025-06-01 12:00")
    tick = t0 + MINUTE
    spec = ScheduleSpec(
        queue_name, Timing.of(cron="* * * * *"), QueueTarget(queue_name), since_ms=t0
    )
    redis_client.zadd(schedule_keys("redisq").claimed, {queue_name: tick})
    if first_send_went_through:
        publish_tick(broker, spec, tick)
    # When another worker looks at once, and again once the repair delay has passed
    clock = SimClock(tick + 100)
    other = make_worker(broker, lambda: [spec], clock.view())
    assert other.evaluate() == []  # its claimer may still be sending
    clock.now = tick + REPAIR_AFTER_MS + 100
    repaired = other.evaluate()
    # Then the tick is published, once in all
    assert [(f.tick_ms, f.repaired) for f in repaired] == [(tick, True)]
    assert published_ids(redis_client, queue_name) == [tick_id(queue_name, tick)]
    assert redis_client.zscore(schedule_keys("redisq").sent, queue_name) == tick
    # And it is not repaired again
    clock.now += 5 * SECOND
    assert other.evaluate() == []


@pytest.mark.parametrize(
    ("missed", "catch_up_ms", "expected_minutes"),
    [
        (Missed.LATEST, 60 * SECOND, [0]),  # the most recent missed tick, once
        (Missed.SKIP, 10 * SECOND, []),  # 20 s late is too late
        (Missed.SKIP, 30 * SECOND, [0]),
        (Missed.ALL, 5 * MINUTE, [-4, -3, -2, -1, 0]),  # each at most 5 min old
    ],
)
def test_ticks_missed_during_downtime(
    redis_client: redis.Redis,
    queue_name: str,
    missed: Missed,
    catch_up_ms: int,
    expected_minutes: list[int],
) -> None:
    # Given an every-minute schedule that fired at 10:00, then every worker stopped
    broker = Broker(redis_client)
    start = ms("2025-06-01 10:00")
    spec = ScheduleSpec(
        queue_name,
        Timing.of(cron="* * * * *"),
        QueueTarget(queue_name),
        missed=missed,
        catch_up_ms=catch_up_ms,
        since_ms=start - MINUTE,
    )
    clock = SimClock(start + 100)
    assert len(make_worker(broker, lambda: [spec], clock.view()).evaluate()) == 1
    # When two workers start again at 11:00:20 and evaluate
    clock.now = ms("2025-06-01 11:00:20")
    workers = [make_worker(broker, lambda: [spec], clock.view()) for _ in range(2)]
    for worker in workers:
        worker.evaluate()
    # Then the missed ticks fire as the policy says, each once
    eleven = ms("2025-06-01 11:00")
    expected = [tick_id(queue_name, eleven + m * MINUTE) for m in expected_minutes]
    assert published_ids(redis_client, queue_name) == [tick_id(queue_name, start), *expected]
    # And the next tick fires on time whatever the policy
    clock.now = eleven + MINUTE + 50
    assert sum(len(w.evaluate()) for w in workers) == 1


def test_a_worker_whose_clock_lags_never_fires_an_older_tick_after_a_newer_one(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a schedule whose workers were down, and a worker that fired the latest
    # missed tick (11:00) by its clock
    broker = Broker(redis_client)
    spec = ScheduleSpec(
        queue_name,
        Timing.of(cron="* * * * *"),
        QueueTarget(queue_name),
        since_ms=ms("2025-06-01 09:00"),
    )
    ahead = make_worker(broker, lambda: [spec], lambda: ms("2025-06-01 11:00:05"))
    assert len(ahead.evaluate()) == 1
    # When a worker whose clock is 20 s behind evaluates (its latest tick is 10:59)
    behind = make_worker(broker, lambda: [spec], lambda: ms("2025-06-01 10:59:45"))
    # Then it fires nothing: the claim of 11:00 stops an older tick
    assert behind.evaluate() == []
    assert published_ids(redis_client, queue_name) == [tick_id(queue_name, ms("2025-06-01 11:00"))]


def test_the_last_run_in_the_database_stops_a_refire_when_redis_lost_its_state(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a schedule whose 12:00 tick the database records as its last run, and a
    # Redis that lost the claims (restarted without persistence)
    broker = Broker(redis_client)
    noon = ms("2025-06-01 12:00")
    spec = ScheduleSpec(
        queue_name,
        Timing.of(cron="0 * * * *"),
        QueueTarget(queue_name),
        since_ms=noon - 3600 * SECOND,
        last_run_ms=noon,
    )
    # When a worker evaluates at 12:00:30
    worker = make_worker(broker, lambda: [spec], lambda: noon + 30 * SECOND)
    # Then it fires nothing ("latest" would otherwise fire 12:00 again)
    assert worker.evaluate() == []
    assert published_ids(redis_client, queue_name) == []


def test_a_disabled_schedule_fires_nothing_and_a_failing_one_does_not_stop_others(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a disabled schedule, one whose publishing fails, and a healthy one
    broker = Broker(redis_client)
    t0 = ms("2025-06-01 12:00")
    timing = Timing.of(every=1)
    specs = [
        ScheduleSpec(
            f"{queue_name}.off", timing, QueueTarget(queue_name), enabled=False, since_ms=t0
        ),
        ScheduleSpec(f"{queue_name}.bad", timing, QueueTarget(queue_name), since_ms=t0),
        ScheduleSpec(f"{queue_name}.ok", timing, QueueTarget(queue_name), since_ms=t0),
    ]
    real = firer(broker)
    attempts: Counter[int] = Counter()

    def fire(spec: ScheduleSpec, tick: int) -> str:
        if spec.name.endswith(".bad"):
            attempts[tick] += 1
            raise ValueError("the target is broken")
        return real(spec, tick)

    clock = SimClock(t0)
    worker = Scheduler(broker.schedule_ledger, lambda: specs, fire, clock=clock.view())
    # When it evaluates for 3 s (every 100 ms)
    for step in range(1, 31):
        clock.now = t0 + step * 100
        worker.evaluate()
    # Then only the healthy schedule published, each of its ticks once
    assert published_ids(redis_client, queue_name) == [
        tick_id(f"{queue_name}.ok", t0 + s * SECOND) for s in (1, 2, 3)
    ]
    # And the failing one's ticks were each tried a bounded number of times
    assert set(attempts) == {t0 + SECOND, t0 + 2 * SECOND, t0 + 3 * SECOND}
    assert max(attempts.values()) <= 5


@pytest.mark.parametrize(
    ("zone", "night", "expected"),
    [
        # Paris, spring forward then fall back: "02:30" fires at 03:00 CEST and once at
        # 02:30 CEST.
        ("Europe/Paris", "2025-03-30", "03:00+0200"),
        ("Europe/Paris", "2025-10-26", "02:30+0200"),
        ("America/New_York", "2025-03-09", "03:00-0400"),
        ("America/New_York", "2025-11-02", "02:30-0500"),
    ],
)
def test_three_workers_through_a_dst_night_fire_the_daily_tick_once(
    redis_client: redis.Redis, queue_name: str, zone: str, night: str, expected: str
) -> None:
    # Given "every day at 02:30" local time, and three workers
    broker = Broker(redis_client)
    start = ms(f"{night} 00:00", zone) - 24 * 3600 * SECOND
    spec = ScheduleSpec(
        queue_name,
        Timing.of(cron="30 2 * * *", timezone=zone),
        QueueTarget(queue_name),
        since_ms=start,
    )
    clock = SimClock(start)
    workers = [make_worker(broker, lambda: [spec], clock.view()) for _ in range(3)]
    # When they evaluate every 30 s over the day before, the night and the day after
    fired = run_together(workers, clock, start, start + 3 * 24 * 3600 * SECOND, 30 * SECOND)
    # Then it fired once a day, at the expected local time on the DST night
    local = [
        dt.datetime.fromtimestamp(f.tick_ms / 1000, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M%z")
        for f in sorted(fired, key=lambda f: f.tick_ms)
    ]
    assert len(local) == 3 and len(set(local)) == 3
    assert local[1] == f"{night} {expected}"
    assert len(published_ids(redis_client, queue_name)) == 3
