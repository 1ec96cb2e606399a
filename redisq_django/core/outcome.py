"""How a delivery was settled: the outcome, and the settlement value that carries it."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from enum import StrEnum

from redisq_django.core.dead_entry import DeadReason


class Outcome(StrEnum):
    """What happened to a delivery once its handler returned or raised.

    ``LOST`` means this instance no longer held the message when it tried to settle it
    (its lease expired and another instance took it over and settles it instead).
    """

    ACKED = "acked"
    RETRIED = "retried"
    DEAD = "dead"
    LOST = "lost"

    @property
    def counted_as(self) -> str:
        """The worker's count (and metric label) it adds to: ``handled`` for
        ``ACKED``, else its value (``retried``, ``dead``, ``lost``)."""
        return "handled" if self is Outcome.ACKED else self.value


@dataclass(frozen=True, slots=True)
class Settlement:
    """How one delivery was settled: what ``Subscription.fail``, ``dead_letter`` and
    ``reject`` return, what a handler that settles its own delivery returns
    (``core.handler.settling``), and what the worker counts, logs and hands to the
    middleware's ``after_settle`` hook.

    Attributes:
        outcome: acknowledged, retry scheduled, dead-lettered, or lost.
        retry_in_ms: ``RETRIED``: the backoff, after which it is delivered again (by
            Redis's clock).
        reason: ``DEAD``: why it became a dead letter.
        error: what its handler raised, as the worker hands it on (None: it returned,
            or never ran, or the settlement comes from a ``Subscription`` method).
        duplicate: ``ACKED`` without running the work again: an inbox had the message
            as handled (``consuming/inbox.py``); counted as skipped too.
    """

    outcome: Outcome
    retry_in_ms: int | None = None
    reason: DeadReason | None = None
    error: BaseException | None = None
    duplicate: bool = False

    @classmethod
    def acked(cls) -> Settlement:
        """Acknowledged: its handler returned."""
        return ACKED

    @classmethod
    def skipped(cls) -> Settlement:
        """Acknowledged as handled before (an inbox had it): its work did not run again."""
        return SKIPPED

    @classmethod
    def retried(cls, in_ms: int, error: BaseException | None = None) -> Settlement:
        """Failed, delivered again in ``in_ms`` ms."""
        return cls(Outcome.RETRIED, retry_in_ms=in_ms, error=error)

    @classmethod
    def dead(cls, reason: DeadReason, error: BaseException | None = None) -> Settlement:
        """Made a dead letter, for ``reason``."""
        return cls(Outcome.DEAD, reason=reason, error=error)

    @classmethod
    def lost(cls, error: BaseException | None = None) -> Settlement:
        """Not settled here: another instance holds the message now."""
        return cls(Outcome.LOST, error=error)

    @property
    def failed(self) -> bool:
        """Whether its handler raised."""
        return self.error is not None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Outcome):
            # Until 0.10: code written when fail() and after_settle() gave an Outcome.
            warnings.warn(
                "comparing a Settlement with an Outcome is deprecated and stops working "
                "in redisq-django 0.10: compare settlement.outcome",
                DeprecationWarning,
                stacklevel=2,
            )
            return self.outcome is other
        if not isinstance(other, Settlement):
            return NotImplemented
        return (self.outcome, self.retry_in_ms, self.reason, self.error) == (
            other.outcome,
            other.retry_in_ms,
            other.reason,
            other.error,
        )

    def __hash__(self) -> int:
        return hash((self.outcome, self.retry_in_ms, self.reason, id(self.error)))

    def with_error(self, error: BaseException | None) -> Settlement:
        """The same settlement, after its handler raised ``error``."""
        if error is self.error:
            return self
        return Settlement(self.outcome, self.retry_in_ms, self.reason, error, self.duplicate)


#: The settlement of every handled message (one value: acks are the hot path).
ACKED = Settlement(Outcome.ACKED)
#: The settlement of a message acknowledged as a duplicate (see ``Settlement.skipped``).
SKIPPED = Settlement(Outcome.ACKED, duplicate=True)
