"""How a delivery was settled."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What happened to a delivery once its handler returned or raised.

    ``LOST`` means this instance no longer held the message when it tried to settle it
    (its lease expired and another instance took it over and settles it instead).
    """

    ACKED = "acked"
    RETRIED = "retried"
    DEAD = "dead"
    LOST = "lost"
