"""Flow control's Redis side (issue 34, points 1 and 2): the rate limit (``rate.lua``, a
GCRA bucket on Redis's clock) and the concurrency slots (``slots.lua``, leases), called
as the worker calls them. Real redis-server."""

from __future__ import annotations

import time

import pytest
import redis

from redisq_django.core import Broker
from redisq_django.core.limits import (
    Rate,
    RateError,
    RateLimit,
    Slots,
    default_burst,
    rate_problem,
    slots_in_use,
    throttled_until,
)


def test_a_rate_is_a_count_per_second_minute_or_hour_with_a_burst() -> None:
    assert Rate.parse("100/s") == Rate(100, 1, default_burst(100, 1))
    assert Rate.parse(" 600 / m ", burst=4) == Rate(600, 60, 4)
    assert str(Rate.parse("5000/h")) == "5000/h"
    assert Rate.parse("100/s").interval_us == 10_000
    # The default burst: one, and 50 ms worth of the rate
    assert [default_burst(n, 1) for n in (1, 10, 50, 100, 1000)] == [1, 1, 3, 6, 51]
    assert default_burst(600, 60) == 1
    assert Rate.parse("50/s").describe() == "50/s, bursts of 3"


@pytest.mark.parametrize(
    ("text", "burst", "words"),
    [
        ("100", None, "'<count>/s'"),
        ("100/d", None, "'<count>/s'"),
        ("-1/s", None, "'<count>/s'"),
        ("0/s", None, "at least 1"),
        ("200000/s", None, "at most 100000 a second"),
        ("10/s", 0, "burst 0 must be an integer >= 1"),
        (100, None, "is not a rate"),
    ],
)
def test_a_rate_that_means_nothing_is_refused_saying_what_is_valid(
    text: object, burst: object, words: str
) -> None:
    problem = rate_problem(text, burst)
    assert problem is not None and words in problem
    with pytest.raises(RateError):
        Rate.parse(text, burst)  # type: ignore[arg-type]


def limit(broker: Broker, key: str, text: str, burst: int | None = None) -> RateLimit:
    return RateLimit(broker.client, broker.scripts, key, Rate.parse(text, burst))


def test_a_full_bucket_gives_its_burst_at_once_then_one_token_per_interval(
    broker: Broker, queue_name: str
) -> None:
    key = f"test:{queue_name}:rate"
    rate = limit(broker, key, "10/s", burst=3)
    # A full bucket: the burst at once, then nothing until the next interval
    assert rate.take(5).count == 3
    none = rate.take(1)
    assert none.count == 0 and 0.05 < none.due_in <= 0.1
    time.sleep(none.due_in + 0.01)
    one = rate.take(5)
    assert one.count == 1
    # Given back (no one took a token since): there again for the next taker
    assert rate.give(one, 0)
    assert rate.take(5).count == 1


def test_tokens_are_given_back_only_while_no_one_took_one_since(
    broker: Broker, queue_name: str
) -> None:
    # Two callers take a token each, one after the other (burst 1: one at a time)
    key = f"test:{queue_name}:rate"
    first = limit(broker, key, "10/s", burst=1).take(1)
    later = limit(broker, key, "10/s", burst=1).reserve(0.5)
    assert first.count == later.count == 1
    # The first cannot give its token back: the later one's turn would be a second's
    assert not limit(broker, key, "10/s", burst=1).give(first, 0)
    # The later can: it is the last turn given out
    assert limit(broker, key, "10/s", burst=1).give(later, 0)


def test_the_bucket_lives_in_redis_only_while_it_is_not_full(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    key = f"test:{queue_name}:rate"
    rate = limit(broker, key, "20/s", burst=1)
    assert throttled_until(redis_client, key) is None
    rate.take(1)
    until = throttled_until(redis_client, key)
    assert until is not None
    assert 0 < redis_client.pttl(key) <= 52
    time.sleep(0.1)
    taken = rate.take(1)  # after the bucket filled up again: the key was gone, and is back
    assert rate.give(taken, 0)
    assert not redis_client.exists(key)  # given back to full: no key


def test_many_callers_together_take_no_more_than_the_rate_allows(
    broker: Broker, queue_name: str
) -> None:
    # Given a 100/s limit with a burst of 1, and callers taking as fast as they can for
    # about 1.5 s (bounded by count and time)
    key = f"test:{queue_name}:rate"
    callers = [limit(broker, key, "100/s", burst=1) for _ in range(3)]
    taken = 0
    began = time.monotonic()
    for round_ in range(20_000):
        if time.monotonic() - began >= 1.5:
            break
        tokens = callers[round_ % 3].take(10)
        taken += tokens.count
        if not tokens.count:
            time.sleep(min(tokens.due_in, 0.005))
    elapsed = time.monotonic() - began
    # Then they took at most the burst + the rate over that time, and not much less
    assert taken <= 1 + 100 * elapsed + 1
    assert taken >= 100 * elapsed * 0.5  # callers sleeping late lose turns (burst 1)


def test_a_reservation_holds_the_next_turn_within_its_horizon_only(
    broker: Broker, queue_name: str
) -> None:
    key = f"test:{queue_name}:rate"
    rate = limit(broker, key, "10/s", burst=1)
    assert rate.reserve(0.5).count == 1  # full: now
    second = rate.reserve(0.5)  # the next: one interval away
    assert second.count == 1 and 0.08 < second.due_in <= 0.1
    third = rate.reserve(0.15)  # the one after: 0.2 s away, beyond 0.15 s
    assert third.count == 0 and 0 < third.due_in <= 0.051
    assert rate.take(1).count == 0  # the reserved turns are taken


def slots(broker: Broker, key: str, n: int, lease_ms: int = 10_000) -> Slots:
    return Slots(broker.client, broker.scripts, key, n, lease_ms)


def test_slots_are_shared_by_every_instance_up_to_the_limit(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    key = f"test:{queue_name}:slots"
    pool = slots(broker, key, 3)
    assert pool.take("a", 0, 2) == (2, None)
    got, wait = pool.take("b", 0, 5)
    assert got == 1 and wait is None
    got, wait = pool.take("c", 0, 1)
    assert got == 0 and wait is not None and 9 < wait <= 10
    assert sorted(redis_client.zrange(key, 0, -1)) == [b"a/1", b"a/2", b"b/1"]
    # One given back: the next taker gets it
    pool.give("a", 2, 1)
    assert pool.take("c", 0, 1)[0] == 1
    assert sorted(redis_client.zrange(key, 0, -1)) == [b"a/1", b"b/1", b"c/1"]
    now_ms = int(redis_client.time()[0]) * 1000
    assert slots_in_use(redis_client, key, now_ms) == 3


def test_a_dead_instances_slots_come_back_when_their_leases_end(
    broker: Broker, queue_name: str
) -> None:
    # Given an instance that took both slots with a 300 ms lease and died (no renewal)
    key = f"test:{queue_name}:slots"
    slots(broker, key, 2, lease_ms=300).take("dead", 0, 2)
    live = slots(broker, key, 2, lease_ms=300)
    assert live.take("live", 0, 1)[0] == 0
    # When its leases end, the slots are free; a renewed lease is not freed
    time.sleep(0.35)
    assert live.take("live", 0, 1)[0] == 1
    time.sleep(0.2)
    live.renew("live", 1)
    time.sleep(0.2)  # 400 ms after the take, 200 ms after the renewal
    assert live.take("other", 0, 2)[0] == 1  # one free: the renewed one is held


def test_a_lowered_limit_grants_nothing_until_enough_slots_came_back(
    broker: Broker, queue_name: str
) -> None:
    key = f"test:{queue_name}:slots"
    slots(broker, key, 4).take("a", 0, 4)
    lower = slots(broker, key, 2)
    assert lower.take("b", 0, 1)[0] == 0
    lower.give("a", 4, 3)
    assert lower.take("b", 0, 1)[0] == 1


def test_the_slots_key_outlives_every_lease_in_it(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # A take with a shorter lease than another holder's does not cut the key's life short
    key = f"test:{queue_name}:slots"
    slots(broker, key, 3, lease_ms=60_000).take("long", 0, 1)
    slots(broker, key, 3, lease_ms=500).take("short", 0, 1)
    assert redis_client.pttl(key) > 59_000
