"""The archive's positions in Redis: how far the history pipeline has stored each stream.

With history on, retention treats the archive like one more logical consumer: the log and
the events stream are never trimmed past what it committed (``trim.lua``).
"""

from __future__ import annotations

from enum import StrEnum

from redisq_django.core.keys import QueueKeys
from redisq_django.core.scripts import Scripts
from redisq_django.core.wire import to_str


class ArchivedStream(StrEnum):
    """The streams of a queue the archive keeps."""

    MESSAGES = "messages"  # the log
    EVENTS = "events"  # lifecycle events


def position_field(stream: ArchivedStream | str) -> str:
    """The ``meta`` hash field holding the archive's position in ``stream``."""
    return f"archive:{ArchivedStream(stream).value}"


def commit(scripts: Scripts, keys: QueueKeys, stream: ArchivedStream | str, entry_id: str) -> str:
    """Record that the archive stored ``stream`` up to ``entry_id`` (never moves back).

    Returns:
        The position now recorded.
    """
    return to_str(scripts("archive_commit", [keys.meta], [position_field(stream), entry_id]))


def positions(client: object, keys: QueueKeys) -> dict[str, str]:
    """``{"messages": id, "events": id}`` for the streams the archive has committed."""
    raw = client.hgetall(keys.meta)  # type: ignore[attr-defined]
    out = {}
    for stream in ArchivedStream:
        value = raw.get(position_field(stream).encode())
        if value is not None:
            out[stream.value] = to_str(value)
    return out
