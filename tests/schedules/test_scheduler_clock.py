"""The scheduler on Redis's clock, in process against a real Redis (C13): its
``RedisClock`` ignores steps of this host's wall clock, and a worker given a clock that
runs ahead of Redis's (any clock may be injected) neither fires a tick early nor makes
the ticks before it unclaimable, alone or beside a worker on Redis's clock; a client in
another language claims ticks with the shipped script beside a Python worker."""

# ruff: noqa: F811

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from redisq_django.core.broker import Broker
from redisq_django.core.keys import schedule_keys
from redisq_django.schedules.scheduler import RedisClock, Scheduler
from redisq_django.schedules.spec import QueueTarget, ScheduleSpec, tick_id
from redisq_django.schedules.targets import firer
from redisq_django.schedules.timing import Missed, Timing
from tests.core.test_protocol_cli import Cli, Keys, cli, keys  # noqa: F401
from tests.support.clock_steps import redis_ms
from tests.support.ticks import published_ticks

SECOND = 1000


def test_redis_clock_ignores_a_step_of_this_hosts_wall_clock(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a RedisClock that has read Redis's clock
    clock = RedisClock(Broker(redis_client).schedule_ledger)
    before = redis_ms(redis_client)
    assert before <= clock() <= redis_ms(redis_client)
    # When this host's wall clock steps 5 s forward, then 5 s back
    for step_s in (5, -5):
        real_time, real_time_ns = time.time, time.time_ns
        monkeypatch.setattr(time, "time", lambda s=step_s, f=real_time: f() + s)
        monkeypatch.setattr(
            time, "time_ns", lambda s=step_s, f=real_time_ns: f() + s * 1_000_000_000
        )
        # Then it still reads Redis's clock: never ahead of it, at most a round trip behind
        low = redis_ms(redis_client)
        now = clock()
        high = redis_ms(redis_client)
        assert low - 50 <= now <= high, (now - low, step_s)
        monkeypatch.undo()


def test_redis_clock_takes_an_earlier_now_that_redis_answered(redis_client: redis.Redis) -> None:
    # Given a RedisClock, and a "now" from Redis 3 s earlier than it reads (Redis's
    # clock was stepped back)
    clock = RedisClock(Broker(redis_client).schedule_ledger)
    earlier = clock() - 3000
    # When it is told, then it reads from there on; a later "now" changes nothing
    clock.observe(earlier)
    assert earlier <= clock() < earlier + 1000
    clock.observe(earlier + 60_000)
    assert clock() < earlier + 1000


@pytest.mark.parametrize("missed", [Missed.LATEST, Missed.SKIP, Missed.ALL])
@pytest.mark.parametrize("beside", [False, True], ids=["alone", "beside-a-true-worker"])
def test_a_worker_whose_clock_runs_ahead_fires_no_tick_early_and_blocks_none(
    redis_client: redis.Redis, queue_name: str, missed: Missed, beside: bool
) -> None:
    # Given a schedule ticking every second from now, and a worker whose clock runs 5 s
    # ahead of Redis's (alone, or beside a worker on Redis's clock)
    broker = Broker(redis_client)
    start = redis_ms(redis_client)
    spec = ScheduleSpec(
        queue_name, Timing.of(every=1), QueueTarget(queue_name), missed=missed, since_ms=start
    )

    def worker(clock: Callable[[], int]) -> Scheduler:
        return Scheduler(broker.schedule_ledger, lambda: [spec], firer(broker), clock=clock)

    workers = [worker(lambda: redis_ms(redis_client) + 5 * SECOND)]
    if beside:
        workers.append(worker(lambda: redis_ms(redis_client)))
    # When they evaluate for 3.5 s, each when it asks to (at most 0.1 s apart)
    deadline = time.monotonic() + 3.5
    last_round = start  # Redis's time as the last round began: every tick due is fired in it
    for _ in range(200):
        if time.monotonic() >= deadline:
            break
        last_round = redis_ms(redis_client)
        for w in workers:
            w.evaluate()
        time.sleep(min(0.1, *(w.seconds_to_next() for w in workers)))
    end = redis_ms(redis_client)

    # Then no tick was published before it was due by Redis's clock, none twice, and
    # every tick of the run was published (the 5 s ahead ones were not claimed first)
    seen = published_ticks(redis_client, queue_name)
    assert [(t, at - t) for t, at in seen if at < t] == []
    assert [t for t, n in Counter(t for t, _ in seen).items() if n > 1] == []
    # (A starved CPU may sleep well past a tick after the last round: only the ticks
    # due by the last round's start are owed.)
    expected = list(range((start // SECOND + 1) * SECOND, last_round + 1, SECOND))
    assert len(expected) >= 2
    assert sorted(t for t, _ in seen if t <= last_round) == expected
    assert redis_client.zscore(schedule_keys("redisq").claimed, queue_name) <= end


def test_a_foreign_client_claims_ticks_by_redis_clock_beside_a_python_worker(
    cli: Cli, keys: Keys, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given an every-second schedule evaluated by a Python worker, and a client in
    # another language (redis-cli) evaluating it too, as PROTOCOL.md's *Periodic
    # schedules* says
    broker = Broker(redis_client)
    claimed, sent = schedule_keys("redisq").claimed, schedule_keys("redisq").sent
    now = cli.now_ms()
    tick = now // SECOND * SECOND
    spec = ScheduleSpec(
        queue_name, Timing.of(every=1), QueueTarget(queue_name), since_ms=tick - 60 * SECOND
    )
    python = Scheduler(
        broker.schedule_ledger, lambda: [spec], firer(broker), clock=lambda: tick + 500
    )

    # When the foreign client, whose clock runs 5 s ahead, claims the tick it thinks due
    refused, redis_now = cli.script("schedule_claim", [claimed], [queue_name, tick + 5000])
    # Then it is refused with Redis's now, and nothing is claimed
    assert refused == -1 and now <= redis_now <= cli.now_ms()
    assert cli("ZSCORE", claimed, queue_name) is None
    # When it claims the tick due by that now, publishes it once and marks it sent
    assert cli.script("schedule_claim", [claimed], [queue_name, tick])[0] == 1
    mid = tick_id(queue_name, tick)
    headers = json.dumps({"schedule": queue_name, "scheduled_for": "-"})
    fields = ["payload", "null", "headers", headers, "id", mid]
    once = [keys.meta, keys.log, keys.delayed, keys.sent(mid)]
    assert cli.script("publish_once", once, [1, 86400000, 0, "", *fields])[0] == 1
    assert cli("ZADD", sent, "GT", tick, queue_name) == 1
    # Then the Python worker, evaluating the same tick, fires nothing: it was claimed
    assert python.evaluate() == []
    assert [f[b"id"].decode() for _, f in redis_client.xrange(keys.log)] == [mid]
