"""Message ids chosen before publishing (delayed messages, outbox rows, batches)."""

from __future__ import annotations

import itertools
import os

from redisq_django.core.clock import now_ms


def new_message_id() -> str:
    """A message id chosen before publishing: 32 hex characters, increasing in the order
    of the calls within a process (12 of them the time in ms, never going back; 4 a
    sequence; 16 random: 64 bits that keep ids of different processes apart).

    Increasing, because delayed messages of one due time leave the delayed set in the
    order of their members' bytes, and a member starts with its id (``Envelope.member``):
    a delayed batch, or messages given one ``eta``, are promoted in publish order, which
    an ordered consumer keeps for their key. ``os.urandom`` rather than ``uuid4()``: no
    UUID object on a path that runs once per message.
    """
    global _last_id_ms
    ms = _last_id_ms = max(now_ms(), _last_id_ms)  # a clock stepping back keeps the order
    return f"{ms:012x}{next(_id_sequence) & 0xFFFF:04x}{os.urandom(8).hex()}"


#: The time part of the latest :func:`new_message_id` (ms) and its sequence (racing
#: threads may share a millisecond; ``next()`` of a count is atomic under the GIL).
_last_id_ms = 0
_id_sequence = itertools.count()
