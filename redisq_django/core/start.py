"""Start points of a logical consumer: latest, earliest, a time, a message id."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from redisq_django.core.clock import last_id_of_ms

_ENTRY_ID = re.compile(r"^([0-9]+)(?:-([0-9]+))?\Z")  # ASCII digits; no final "\n"


@dataclass(frozen=True)
class StartPoint:
    """Where a logical consumer starts reading the log.

    ``to_last_delivered_id`` gives the consumer-group id such that the *next* entry
    delivered is the first one at or after the point (times and ids are inclusive).
    """

    kind: str  # "latest" | "earliest" | "time" | "id"
    value: str = ""

    @classmethod
    def parse(cls, start: str | dt.datetime | StartPoint) -> StartPoint:
        """Accept ``"latest"``, ``"earliest"``, an aware datetime, or a stream id.

        Raises:
            ValueError: anything else, with a message saying what is accepted.
        """
        if isinstance(start, StartPoint):
            return start
        if isinstance(start, dt.datetime):
            if start.tzinfo is None:
                raise ValueError(
                    f"Start time {start!r} has no time zone; pass an aware datetime "
                    "(e.g. django.utils.timezone.now() or datetime.now(UTC))."
                )
            return cls("time", str(int(start.timestamp() * 1000)))
        if start in ("latest", "$"):
            return cls("latest")
        if start in ("earliest", "0", "0-0"):
            return cls("earliest")
        if isinstance(start, str) and _ENTRY_ID.match(start):
            return cls("id", start)
        raise ValueError(
            f"Invalid start point {start!r}: use 'latest', 'earliest', an aware datetime "
            "or a message id such as '1700000000000-0'."
        )

    def to_last_delivered_id(self) -> str:
        if self.kind == "latest":
            return "$"
        if self.kind == "earliest":
            return "0-0"
        if self.kind == "time":
            return _id_before(int(self.value), 0)
        match = _ENTRY_ID.match(self.value)
        assert match is not None
        return _id_before(int(match.group(1)), int(match.group(2) or 0))


def _id_before(ms: int, seq: int) -> str:
    """The largest stream id smaller than ``ms-seq``."""
    if seq > 0:
        return f"{ms}-{seq - 1}"
    return last_id_of_ms(ms - 1)
