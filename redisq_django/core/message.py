"""The message object handlers receive."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Message:
    """One delivery of a message to one instance of a logical consumer.

    Attributes:
        id: the message id: stable across retries, re-drives and replays.
        queue: the queue it was published to.
        payload: the decoded JSON payload.
        headers: the decoded headers (``{}`` when none).
        attempts: which delivery this is for this logical consumer, counting from 1;
            failed handler runs and crashed instances both count.
        published_at: when it was published (UTC).
        group: the logical consumer it was delivered to.
        due_at: for delayed messages, when they were due (UTC), else None.
        first_failed_at: when its first failure was recorded (UTC), else None.
    """

    id: str
    queue: str
    payload: Any
    headers: dict[str, Any]
    attempts: int
    published_at: dt.datetime
    group: str
    due_at: dt.datetime | None = None
    first_failed_at: dt.datetime | None = None
    # Transport details: which stream entry this delivery is, and its raw fields
    # (kept so a retry or dead letter carries the exact original envelope).
    stream: str = field(default="log", repr=False)
    entry_id: bytes = field(default=b"", repr=False)
    fields: dict[bytes, bytes] = field(default_factory=dict, repr=False)
