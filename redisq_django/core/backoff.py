"""Retry timing: pure functions, tested without Redis."""

from __future__ import annotations

import random


def compute_backoff(
    attempt: int,
    *,
    base_s: float,
    max_s: float,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retrying a message whose ``attempt``-th delivery failed.

    Exponential with "equal jitter": the ceiling ``min(max_s, base_s * 2**(attempt-1))``
    is halved and a uniform random share of the other half is added, so retries of many
    messages that failed together spread out, yet no wait is shorter than half the
    ceiling or longer than ``max_s``.

    Args:
        attempt: 1 for the first failed delivery, 2 for the second, ...
        base_s: wait ceiling after the first failure.
        max_s: cap on any wait.
        rng: random source (tests pass a seeded one).

    Returns:
        The wait in seconds, in ``[ceiling / 2, ceiling]``.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    # Bound the exponent so a huge attempt count cannot overflow the float.
    ceiling = min(max_s, base_s * 2.0 ** min(attempt - 1, 64))
    half = ceiling / 2.0
    return half + (rng or random).uniform(0.0, half)


def should_retry(attempts_done: int, max_retries: int) -> bool:
    """True if a message that has failed ``attempts_done`` times gets another delivery.

    A message is delivered at most ``max_retries + 1`` times in all.
    """
    return attempts_done < max_retries + 1
