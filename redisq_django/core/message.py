"""The message object handlers receive: frozen.

A :class:`Message` cannot be changed once built (``message.attempts = 2`` raises
``dataclasses.FrozenInstanceError``); build another with ``dataclasses.replace(message,
attempts=2)``. Its fields live in :class:`MessageFields`, a plain slots dataclass built at
full speed on the path of every message a worker fetches, and a Message is the same
object made frozen (:class:`~redisq_django.core.frozen.Frozen`).
"""

from __future__ import annotations

import datetime as dt
import warnings
from dataclasses import dataclass
from typing import Any

from redisq_django.core.clock import ms_to_datetime
from redisq_django.core.frozen import Frozen


@dataclass(slots=True)
class MessageFields:
    """A message's fields, writable: what a :class:`Message` is while it is built. Only
    the core builds one (``core/subscription.py``), and frees it at once as a Message."""

    id: str
    queue: str
    payload: Any
    headers: dict[str, Any]
    attempts: int
    consumer: str
    published_at_ms: int
    due_at_ms: int | None = None
    first_failed_at_ms: int | None = None
    failures: int = 0
    #: The instance it was delivered to.
    instance: str = ""
    #: Its ordering key, or None.
    key: str | None = None


class Message(Frozen, MessageFields):
    """A message as its handler gets it: one delivery to one instance of a logical
    consumer. (The worker's bookkeeping of that delivery, entry id, stream, lease and
    timings, is the :class:`~redisq_django.core.delivery.Delivery` that holds it.)

    Frozen: assigning or deleting a field raises ``dataclasses.FrozenInstanceError``;
    ``dataclasses.replace(message, **changes)`` builds another.

    Attributes:
        id: the message id: stable across retries, re-drives and replays.
        queue: the queue it was published to.
        payload: the decoded JSON payload.
        headers: the decoded headers (``{}`` when none).
        attempts: which delivery this is for this logical consumer, counting from 1;
            failed handler runs and crashed instances both count.
        consumer: the logical consumer it was delivered to (``@consumer(..., name=)``).
        instance: the running instance of that consumer it was delivered to.
        published_at_ms: when it was published, milliseconds since the epoch
            (``published_at`` gives it as an aware UTC datetime).
        due_at_ms: for delayed messages, when they were due (ms), else None
            (``due_at``: as a datetime).
        first_failed_at_ms: when its first failure was recorded (ms), else None
            (``first_failed_at``: as a datetime).
        failures: of the deliveries before this one, those whose handler raised, for a
            consumer that counts them apart from crashes (Django tasks, whose
            ``max_retries`` counts failures only); 0 otherwise.
        key: its ordering key (``publish(..., key="order-42")``), the entity it is
            about, or None when it was published without one. An ordered consumer
            handles the messages of one key one at a time, in order (``core/ordered.py``).
    """

    __slots__ = ()

    @property
    def group(self) -> str:
        """Deprecated (gone in the next minor version): the logical consumer, :attr:`consumer`."""
        warnings.warn(
            "Message.group is deprecated, use Message.consumer (the logical consumer); "
            "Message.instance is the running instance",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.consumer

    # Datetimes are built on demand: most handlers never look at them, and building
    # three per message is a measurable share of a consumer's per-message cost.
    @property
    def published_at(self) -> dt.datetime:
        """When it was published (aware, UTC)."""
        return ms_to_datetime(self.published_at_ms)

    @property
    def due_at(self) -> dt.datetime | None:
        """For delayed messages, when they were due (aware, UTC), else None."""
        return None if self.due_at_ms is None else ms_to_datetime(self.due_at_ms)

    @property
    def first_failed_at(self) -> dt.datetime | None:
        """When its first failure was recorded (aware, UTC), else None."""
        return None if self.first_failed_at_ms is None else ms_to_datetime(self.first_failed_at_ms)
