"""What a handler can raise, and the runtime description of one logical consumer."""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

from redisq_django.core.delivery import Delivery
from redisq_django.core.limits import Rate
from redisq_django.core.message import Message
from redisq_django.core.outcome import Outcome, Settlement
from redisq_django.core.retry import RetryPolicy


class Reject(Exception):
    """Raise from a handler to make the message a dead letter now, without retries.

    Use it for messages that can never succeed (bad data, a deleted object): retrying
    them would only delay the dead letter. The exception's message is stored with it.
    """


class Settled(Exception):
    """Deprecated: a handler that settled its delivery itself returns its
    :class:`~redisq_django.core.outcome.Settlement` instead (see :func:`settling`).
    Raising it still works until the next minor version, with a ``DeprecationWarning``.

    Attributes:
        outcome: ``ACKED`` (counted as handled), ``RETRIED``, ``DEAD`` or ``LOST``
            (another instance held the message).
        error: what the handler caught, for logs and middleware (None after a success).
    """

    def __init__(self, outcome: Outcome, error: BaseException | None = None) -> None:
        warnings.warn(
            "raising redisq_django.core.handler.Settled from a handler is deprecated and "
            "stops working in the next minor version: return the Settlement instead, e.g. "
            "`return Settlement.acked()` (redisq_django.core.Settlement)",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(f"{outcome.value}: {error!r}" if error is not None else outcome.value)
        self.outcome = outcome
        self.error = error

    @property
    def settlement(self) -> Settlement:
        """What the handler would return instead."""
        return Settlement(self.outcome, error=self.error)


Handler = Callable[[Message], Any]


class _Duplicate:
    """The type of :data:`DUPLICATE` (one instance)."""

    def __repr__(self) -> str:
        return "DUPLICATE"


#: What a handler returns to say that the message was handled before (an inbox found
#: its record, ``consuming/inbox.py``): the delivery is acknowledged, as after any
#: return, and counted as a duplicate skipped instead of as handled work.
DUPLICATE = _Duplicate()

#: The attribute that marks a handler that settles its delivery itself.
_SETTLES = "redisq_settles_itself"


def settling(handler: Callable[[Delivery], Settlement | None]) -> Handler:
    """Mark ``handler`` as one that settles its delivery itself: the worker then calls it
    with the :class:`Delivery`, whose entry id, stream and lease it needs, instead of the
    :class:`Message` alone.

    Such a handler returns how it settled the delivery (a
    :class:`~redisq_django.core.outcome.Settlement`, its ``error`` the exception it
    caught, if any): the worker then neither acknowledges nor retries it, and counts it.
    Returning None leaves the delivery to the worker, as any handler's return; raising
    fails it, as any handler's raise.

    Returns:
        ``handler``, marked, usable as a :class:`ConsumerSpec`'s handler.
    """
    setattr(handler, _SETTLES, True)
    return cast("Handler", handler)


def settles_itself(handler: Handler) -> bool:
    """Whether ``handler`` was marked by :func:`settling` (it gets the delivery)."""
    return getattr(handler, _SETTLES, False) is True


@dataclass(frozen=True)
class ConsumerSpec:
    """A logical consumer as the worker runs it (effective values, after overrides).

    Attributes:
        queue: the queue it consumes.
        name: the logical consumer (consumer group) name.
        handler: called with each :class:`Message`; returning acks, raising retries,
            raising :class:`Reject` dead-letters at once.
        policy: its retries, backoff and visibility timeout.
        concurrency: handler threads of this consumer in one worker process.
        start: where a newly registered consumer starts (see ``Broker.ensure_consumer``).
        paused: when true, the worker fetches nothing for it (in-flight work finishes).
        enabled: when false, the worker does not run it at all.
        ordered: one message of an ordering key out at a time (``core/ordered.py``).
        wait_replicas: an ordered consumer's reads wait until this many replicas have
            them (None: the config's ``ordered_wait_replicas``; 0: no wait).
        time_limit: seconds a handler may run on one message (None: no limit); past it
            the attempt fails with ``TimeLimitExceeded`` (``core/worker/time_limits.py``).
        rate: at most this many messages started per period by all its instances
            together (None: no limit; ``core/limits.py``).
        rate_per_key: at most this many messages of each ordering key started per period
            (None: no limit); a message over it is handed back until its turn.
        max_in_flight: at most this many of its handlers running at once across all its
            instances (None: no limit).
        flow_queue: the queue whose keys hold its rate and slots (None: its own), for
            consumers that share their limits (a task queue's priority levels).
        priority: ``(ladder, rank)`` when this consumer is one level of a priority
            ladder (``core/worker/priority.py``: the levels of one task queue, a queue
            each) that a worker reads highest first (rank 0 is the highest): its
            threads fetch only while every higher level's last fetch came back empty.
    """

    queue: str
    name: str
    handler: Handler
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    concurrency: int = 1
    start: str | dt.datetime = "latest"
    paused: bool = False
    enabled: bool = True
    priority: tuple[str, int] | None = None
    ordered: bool = False
    wait_replicas: int | None = None
    time_limit: float | None = None
    rate: Rate | None = None
    rate_per_key: Rate | None = None
    max_in_flight: int | None = None
    flow_queue: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.queue, self.name)

    def evolve(self, **changes: Any) -> ConsumerSpec:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)

    def tunables(self) -> dict[str, object]:
        """What the admin can change, by name (the worker logs the changes)."""
        p = self.policy
        return {
            "paused": self.paused,
            "enabled": self.enabled,
            "concurrency": self.concurrency,
            "max_retries": p.max_retries,
            "backoff_s": p.backoff_s,
            "max_backoff_s": p.max_backoff_s,
            "visibility_timeout_ms": p.visibility_timeout_ms,
            "time_limit": self.time_limit,
            "rate": self.rate.describe() if self.rate else None,
            "rate_per_key": self.rate_per_key.describe() if self.rate_per_key else None,
            "max_in_flight": self.max_in_flight,
        }
