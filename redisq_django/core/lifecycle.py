"""Lifecycle events: what each logical consumer did with each message (history on).

Every settle writes one entry to the queue's ``events`` stream *in the same script* as
the settle itself, so there is no outcome without its event and no event without its
outcome (PROTOCOL.md, "Lifecycle events"). An entry's fields:

- ``e``: the event (:class:`EventName`); ``g``: the logical consumer; ``c``: the
  instance ("" when an operator did it);
- ``m``: a JSON array of ``[message id, attempt, handler duration in ms or null]``, one
  per message concerned: an acknowledged batch is one ``handled`` entry;
- optionally ``error_class``, ``error_message`` (``retried``, ``dead``), ``reason``
  (``dead``), ``next_due`` (``retried``: ms, added by the settling script itself from the
  due time it makes by Redis's clock), ``start`` (``reset``: the id moved to).

The event time is the entry id's millisecond part. Publishing needs no event: the log is
the record of publishes.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum

from redisq_django.core.dead_entry import MAX_ERROR_TEXT, DeadReason, Failure


class EventName(StrEnum):
    """What happened to a message in one logical consumer."""

    HANDLED = "handled"  # acknowledged after its handler returned
    RETRIED = "retried"  # its handler raised; it comes back after a backoff
    DEAD = "dead"  # became a dead letter
    RELEASED = "released"  # handed back unstarted (warm shutdown)
    RECLAIMED = "reclaimed"  # taken over after a lease expired or an instance died
    REDRIVEN = "redriven"  # sent again from the dead letters (admin, shell)
    RESET = "reset"  # the consumer was moved to another point (replay)


#: Event errors are cut shorter than dead letters': the stream is kept for a while.
MAX_EVENT_ERROR = min(MAX_ERROR_TEXT, 2000)


def record(message_id: str, attempt: int, duration_ms: int | None = None) -> bytes:
    """One message of an event, as JSON: ``["<id>",<attempt>,<ms or null>]``."""
    if _PLAIN_ID.fullmatch(message_id):
        # Entry ids and our hex ids need no JSON escaping; formatting them directly costs
        # a fraction of json.dumps, on a path that runs once per acknowledged message.
        ms = "null" if duration_ms is None else int(duration_ms)
        return f'["{message_id}",{int(attempt)},{ms}]'.encode()
    return json.dumps([message_id, attempt, duration_ms], separators=(",", ":")).encode()


_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:-]+")


def records_array(records: list[tuple[str, int, int | None]]) -> bytes:
    """The ``m`` field of many messages at once: a JSON array of
    ``["<id>",<attempt>,<ms or null>]`` (as :func:`record` makes one)."""
    if _PLAIN_ID.fullmatch(":".join(r[0] for r in records) or "-"):
        # One check for the whole batch (":" is plain itself), then plain formatting:
        # this runs on every acknowledged batch when history is on.
        return (
            "["
            + ",".join(
                [f'["{i}",{int(a)},{"null" if ms is None else int(ms)}]' for i, a, ms in records]
            )
            + "]"
        ).encode()
    return json.dumps([list(r) for r in records], separators=(",", ":")).encode()


def fields(
    name: EventName,
    group: str,
    instance: str,
    records: list[bytes],
    *,
    failure: Failure | None = None,
    reason: DeadReason | None = None,
    start: str | None = None,
) -> list[bytes]:
    """An event entry as the flat field/value list the scripts write."""
    out = [b"e", name.value.encode(), b"g", group.encode(), b"c", instance.encode()]
    out += [b"m", b"[" + b",".join(records) + b"]"]
    if failure is not None:
        out += [b"error_class", failure.error_class.encode("utf-8", "backslashreplace")]
        message = failure.message[:MAX_EVENT_ERROR]
        out += [b"error_message", message.encode("utf-8", "backslashreplace")]
    if reason is not None:
        out += [b"reason", reason.value.encode()]
    if start is not None:
        out += [b"start", start.encode()]
    return out
