"""The message object handlers receive: frozen.

A :class:`Message` cannot be changed once built (``message.attempts = 2`` raises
``dataclasses.FrozenInstanceError``); build another with ``dataclasses.replace(message,
attempts=2)``. A frozen dataclass would do that at a cost: its ``__init__`` sets each
field through ``object.__setattr__``, measured at about 1.3 µs more per message than a
plain slots dataclass, on the path of every message a worker fetches (bench/RESULTS.md,
"A frozen Message"). So the fields live in :class:`MessageFields`, a plain slots
dataclass built at full speed, and a :class:`Message` is the same object with its class
set to this one, which refuses every change: same slots, so the swap moves nothing, and
reads cost what they cost before.
"""

from __future__ import annotations

import datetime as dt
import inspect
import warnings
from dataclasses import FrozenInstanceError, dataclass, fields
from typing import TYPE_CHECKING, Any

from redisq_django.core.clock import ms_to_datetime


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


class Message(MessageFields):
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

    if not TYPE_CHECKING:  # the type checker reads MessageFields' __init__

        def __new__(cls, *args, **kwargs):
            message = MessageFields(*args, **kwargs)
            message.__class__ = cls  # frozen from here on
            return message

        def __init__(self, *args, **kwargs):
            pass  # built by __new__

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(
            f"cannot assign to field {name!r}: a Message is frozen; "
            f"dataclasses.replace(message, {name}=...) builds another"
        )

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}: a Message is frozen")

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle and copy rebuild it from its fields (its __new__ needs them).
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

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


# Its documented signature is its fields' (``help(Message)``, the docs).
Message.__signature__ = inspect.signature(MessageFields)  # type: ignore[attr-defined]
