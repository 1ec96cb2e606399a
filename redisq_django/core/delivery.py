"""One delivery of a message to one instance: the message, and the worker's bookkeeping."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from redisq_django.core.message import Message
from redisq_django.core.retry import RetryPolicy


class Stream(StrEnum):
    """Which stream of a logical consumer a delivery came from."""

    LOG = "log"  # the queue's log, shared by every logical consumer
    DIRECT = "direct"  # the consumer's private input: retries, re-drives


@dataclass(slots=True, eq=False)
class Delivery:
    """What a :class:`~redisq_django.core.subscription.Subscription` fetches, settles
    and renews: one delivery of :attr:`message` to one instance. The handler gets the
    message alone; the rest is transport and timing that only the worker, its
    middleware and a handler that settles its delivery itself (a Django task's) use.

    It reads as its message (``delivery.id``, ``.payload``, ``.attempts``, …), so code
    written against the core's ``sub.fetch()`` / ``sub.ack()`` keeps working.

    Attributes:
        message: what the handler gets.
        stream: the stream the entry was read from (the log or the consumer's direct).
        entry_id: the stream entry this delivery is.
        fields: its raw fields, so that a retry or dead letter carries the exact
            original envelope.
        policy: the retry policy of its logical consumer when it was delivered.
        lease_ms: a visibility timeout of its own (ms), set by a handler that recorded
            one when it started (a task's): the worker renews that lease instead
            (``core/leases.py``).
        duration_ms: how long its handler ran (ms), once it ran (in its ``handled``
            event); ``duration_ns`` the same in nanoseconds and ``ended_ns`` when it
            ended (``time.perf_counter_ns()``), for metrics.
        failed: whether its handler raised (``Reject`` included), once it ran.
        timed_out: its handler ran past its consumer's ``time_limit``: the worker
            settled it as a failed attempt (``core/worker/time_limits.py``), so whatever
            the handler does after that is ignored.
    """

    message: Message
    stream: Stream = Stream.LOG
    entry_id: bytes = b""
    fields: dict[bytes, bytes] = field(default_factory=dict, repr=False)
    policy: RetryPolicy | None = field(default=None, repr=False)
    lease_ms: int | None = None
    duration_ms: int | None = field(default=None, repr=False)
    duration_ns: int | None = field(default=None, repr=False)
    ended_ns: int | None = field(default=None, repr=False)
    failed: bool = field(default=False, repr=False)
    timed_out: bool = field(default=False, repr=False)

    # -- its message's fields, read through ----------------------------------------------

    @property
    def id(self) -> str:
        """The message id."""
        return self.message.id

    @property
    def queue(self) -> str:
        """The queue it was published to."""
        return self.message.queue

    @property
    def payload(self) -> Any:
        """The decoded JSON payload."""
        return self.message.payload

    @property
    def headers(self) -> dict[str, Any]:
        """The decoded headers."""
        return self.message.headers

    @property
    def attempts(self) -> int:
        """Which delivery this is for its logical consumer, counting from 1."""
        return self.message.attempts

    @property
    def consumer(self) -> str:
        """The logical consumer it was delivered to."""
        return self.message.consumer

    @property
    def instance(self) -> str:
        """The instance it was delivered to."""
        return self.message.instance

    @property
    def failures(self) -> int:
        """Of the deliveries before this one, those whose handler raised (tasks)."""
        return self.message.failures

    @property
    def key(self) -> str | None:
        """The message's ordering key, or None."""
        return self.message.key

    @property
    def published_at_ms(self) -> int:
        """When the message was published (ms since the epoch)."""
        return self.message.published_at_ms

    @property
    def due_at_ms(self) -> int | None:
        """For a delayed message, when it was due (ms), else None."""
        return self.message.due_at_ms

    @property
    def first_failed_at_ms(self) -> int | None:
        """When its first failure was recorded (ms), else None."""
        return self.message.first_failed_at_ms

    @property
    def published_at(self) -> dt.datetime:
        """When the message was published (aware, UTC)."""
        return self.message.published_at

    @property
    def due_at(self) -> dt.datetime | None:
        """For a delayed message, when it was due (aware, UTC), else None."""
        return self.message.due_at
