"""The retry policy of a logical consumer, and retry timing as pure functions.

One :class:`RetryPolicy` carries max retries, backoff, cap and visibility timeout in the
core's units; :meth:`RetryPolicy.from_seconds` / :meth:`RetryPolicy.to_seconds` are the
only place seconds (Django settings, ``@consumer``, the admin) meet milliseconds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

#: Retries after the first attempt before a message becomes a dead letter.
DEFAULT_MAX_RETRIES = 5
#: Base of the exponential retry backoff (seconds).
DEFAULT_BACKOFF_S = 1.0
#: Upper bound of one retry backoff (seconds).
DEFAULT_MAX_BACKOFF_S = 300.0
#: A fetched message not acked within this time is delivered again (milliseconds).
DEFAULT_VISIBILITY_TIMEOUT_MS = 60_000


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

    Raises:
        ValueError: ``attempt`` is below 1.
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


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How a logical consumer retries and how long a delivery may stay unacknowledged.

    Attributes:
        max_retries: retries after the first delivery before the message is dead.
        backoff_s: base of the exponential backoff, seconds.
        max_backoff_s: cap of one backoff wait, seconds.
        visibility_timeout_ms: lease of a delivery; an unacknowledged delivery goes to
            another instance after it (the worker extends it while a handler runs).
    """

    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS

    @classmethod
    def from_seconds(
        cls,
        *,
        max_retries: int,
        backoff: float,
        max_backoff: float,
        visibility_timeout: float,
    ) -> RetryPolicy:
        """A policy from values in seconds (settings, ``@consumer``, the admin)."""
        return cls(
            max_retries=int(max_retries),
            backoff_s=float(backoff),
            max_backoff_s=float(max_backoff),
            visibility_timeout_ms=round(float(visibility_timeout) * 1000),
        )

    def to_seconds(self) -> dict[str, Any]:
        """The policy with every time in seconds, keyed as the settings name them
        (``max_retries``, ``backoff``, ``max_backoff``, ``visibility_timeout``)."""
        return {
            "max_retries": self.max_retries,
            "backoff": self.backoff_s,
            "max_backoff": self.max_backoff_s,
            "visibility_timeout": self.visibility_timeout_ms / 1000,
        }

    def evolve(self, **changes: Any) -> RetryPolicy:
        """A copy with ``changes`` applied (``None`` values are ignored)."""
        given = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **given) if given else self

    def problems(self) -> list[str]:
        """Why this policy is invalid (empty when it is valid)."""
        found = []
        if self.max_retries < 0:
            found.append(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_s < 0:
            found.append(f"backoff must be >= 0 seconds, got {self.backoff_s}")
        if self.max_backoff_s < 0:
            found.append(f"max_backoff must be >= 0 seconds, got {self.max_backoff_s}")
        if self.visibility_timeout_ms < 0:
            found.append(
                f"visibility_timeout must be >= 0 seconds, got {self.visibility_timeout_ms / 1000}"
            )
        return found

    def should_retry(self, attempts_done: int) -> bool:
        """Whether a message that failed ``attempts_done`` deliveries gets another one."""
        return should_retry(attempts_done, self.max_retries)

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the ``attempt``-th failed delivery (see
        :func:`compute_backoff`)."""
        return compute_backoff(attempt, base_s=self.backoff_s, max_s=self.max_backoff_s, rng=rng)
