"""Queue and consumer statistics, read in one round trip per queue."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ConsumerStats:
    """The state of one logical consumer of a queue.

    Attributes:
        name: the logical consumer (consumer group).
        lag: log entries not yet delivered to it.
        in_flight: deliveries not yet acknowledged (log and direct input).
        waiting_retry: failed messages waiting for their backoff.
        direct: re-driven or retried messages waiting in its private input.
        dead: dead letters still in Redis (not yet moved to the database).
        oldest_unacked_age_s: age of the oldest message it has not acknowledged, seconds.
        instances_alive: instances with a live heartbeat.
        last_delivered_id: its position in the log.
    """

    name: str
    lag: int
    in_flight: int
    waiting_retry: int
    direct: int
    dead: int
    oldest_unacked_age_s: float | None
    instances_alive: int
    last_delivered_id: str


@dataclass(frozen=True)
class QueueStats:
    """The state of one queue.

    Attributes:
        name: the queue.
        length: entries in the log (including acknowledged history kept for replay).
        delayed: delayed messages not yet due.
        dropped: messages removed by the hard cap before every consumer acked them.
        oldest_id: the oldest entry of the log (None when empty).
        consumers: per logical consumer.
    """

    name: str
    length: int
    delayed: int
    dropped: int
    oldest_id: str | None
    consumers: list[ConsumerStats] = field(default_factory=list)

    @property
    def lag(self) -> int:
        """The largest lag of any consumer."""
        return max((c.lag for c in self.consumers), default=0)


def age_s(entry_id: str | None, now: dt.datetime) -> float | None:
    if not entry_id:
        return None
    ms = int(entry_id.split("-", 1)[0])
    return max(0.0, now.timestamp() - ms / 1000.0)
