"""Retry timing (``core/retry.py``): pure functions, no Redis."""

from __future__ import annotations

import random

import pytest

from redisq_django.core.retry import compute_backoff, should_retry


class FixedRandom(random.Random):
    """A random source whose ``random()`` always returns ``value`` (0 <= value < 1)."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_seeded_values_stay_between_half_the_ceiling_and_the_ceiling() -> None:
    # Given a seeded random source and base 0.5 s, cap 60 s
    rng = random.Random(1234)
    for attempt in range(1, 15):
        ceiling = min(60.0, 0.5 * 2 ** (attempt - 1))
        # When many waits are drawn for this attempt
        waits = [compute_backoff(attempt, base_s=0.5, max_s=60.0, rng=rng) for _ in range(200)]
        # Then every one is in [ceiling / 2, ceiling], and they are spread out
        assert all(ceiling / 2 <= w <= ceiling for w in waits), (attempt, min(waits), max(waits))
        assert len(set(waits)) > 150


def test_same_seed_gives_same_waits() -> None:
    first = [compute_backoff(a, base_s=1, max_s=300, rng=random.Random(7)) for a in range(1, 9)]
    again = [compute_backoff(a, base_s=1, max_s=300, rng=random.Random(7)) for a in range(1, 9)]
    assert first == again


def test_ceiling_doubles_per_attempt_until_the_cap() -> None:
    # Given a random source at its extremes
    top, bottom = FixedRandom(1.0), FixedRandom(0.0)
    # When waits are computed for attempts 1..12 with base 1 s, cap 100 s
    highs = [compute_backoff(a, base_s=1.0, max_s=100.0, rng=top) for a in range(1, 13)]
    lows = [compute_backoff(a, base_s=1.0, max_s=100.0, rng=bottom) for a in range(1, 13)]
    # Then the ceiling doubles (1, 2, 4, ... 64) and then stays at the cap
    assert highs == [1, 2, 4, 8, 16, 32, 64, 100, 100, 100, 100, 100]
    # and the shortest wait is half the ceiling
    assert lows == [0.5, 1, 2, 4, 8, 16, 32, 50, 50, 50, 50, 50]


def test_huge_attempt_numbers_do_not_overflow() -> None:
    rng = random.Random(3)
    for attempt in (1_000, 10**6, 10**100):
        wait = compute_backoff(attempt, base_s=2.0, max_s=300.0, rng=rng)
        assert 150.0 <= wait <= 300.0


def test_without_rng_uses_module_random() -> None:
    wait = compute_backoff(3, base_s=1.0, max_s=300.0)
    assert 2.0 <= wait <= 4.0


@pytest.mark.parametrize("attempt", [0, -1, -100])
def test_attempt_below_one_raises(attempt: int) -> None:
    with pytest.raises(ValueError, match=f"attempt must be >= 1, got {attempt}"):
        compute_backoff(attempt, base_s=1.0, max_s=10.0)


@pytest.mark.parametrize("max_retries", [0, 1, 2, 5, 10])
def test_should_retry_allows_exactly_max_retries_plus_one_deliveries(max_retries: int) -> None:
    # Given a message that fails on every delivery
    deliveries = 0
    while True:
        # When it is delivered and fails
        deliveries += 1
        assert deliveries < 100
        if not should_retry(deliveries, max_retries):
            break
    # Then it was delivered max_retries + 1 times in all
    assert deliveries == max_retries + 1


def test_should_retry_boundaries() -> None:
    assert should_retry(0, 0)
    assert not should_retry(1, 0)
    assert should_retry(3, 3)
    assert not should_retry(4, 3)
    assert not should_retry(5, 3)
