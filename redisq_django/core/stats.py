"""Queue and consumer statistics, read with pipelined commands."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

from redisq_django.core.keys import QueueKeys
from redisq_django.core.wire import to_str

logger = logging.getLogger("redisq.stats")


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
        oldest_pending_age_s: age of the oldest delivery not yet acknowledged, by its
            entry id (publish time in the log, retry or re-drive time in its private
            input), seconds; None when nothing is in flight.
        oldest_undelivered_age_s: age of the oldest log entry not yet delivered to it
            (by publish time), seconds; None when it has read the whole log.
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
    oldest_pending_age_s: float | None = None
    oldest_undelivered_age_s: float | None = None


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
        archive_lag: with history on, log entries the archive has not stored yet
            (capped at ``LAG_COUNT_CAP``); None when history is off.
        events: with history on, lifecycle events still in Redis; None when off.
    """

    name: str
    length: int
    delayed: int
    dropped: int
    oldest_id: str | None
    consumers: list[ConsumerStats] = field(default_factory=list)
    archive_lag: int | None = None
    events: int | None = None

    @property
    def lag(self) -> int:
        """The largest lag of any consumer."""
        return max((c.lag for c in self.consumers), default=0)


#: Above this many undelivered entries, Redis < 7 lag figures are reported as this cap.
LAG_COUNT_CAP = 10_000


def read_stats(client: Any, keys: QueueKeys, *, history: bool = False) -> QueueStats:
    """Length, delayed, drops and per-consumer lag, in-flight, retries, dead, age of the
    queue whose keys are ``keys`` (two round trips, plus one per consumer); with
    ``history``, also the archive's lag and the events waiting for it."""
    with client.pipeline(transaction=False) as pipe:
        pipe.xlen(keys.log)
        pipe.zcard(keys.delayed)
        pipe.hget(keys.meta, "dropped")
        pipe.xrange(keys.log, "-", "+", count=1)
        pipe.xinfo_groups(keys.log)
        pipe.hget(keys.meta, "archive:messages")
        pipe.xlen(keys.events)
        length, delayed, dropped, first, groups, archived, events = pipe.execute(
            raise_on_error=False
        )
    # A key of the wrong type (an operator's mistake, another program) answers an error in
    # place of its figure: it counts as empty here, and is logged, rather than failing the
    # whole status page or command.
    length, delayed, dropped, first, groups, archived, events = _usable(
        keys.queue,
        (length, 0),
        (delayed, 0),
        (dropped, None),
        (first, []),
        (groups, []),
        (archived, None),
        (events, 0),
    )
    now = dt.datetime.now(dt.UTC)
    now_score = int(now.timestamp() * 1000)
    consumers = []
    for info in groups:
        name = to_str(info["name"])
        gkeys = keys.group(name)
        last = to_str(info["last-delivered-id"])
        with client.pipeline(transaction=False) as pipe:
            pipe.xpending(keys.log, name)
            pipe.xpending(gkeys.direct, name)
            pipe.zcard(gkeys.retry)
            pipe.xlen(gkeys.direct)
            pipe.xlen(gkeys.dead)
            pipe.zcount(gkeys.instances, now_score, "+inf")
            pipe.xrange(keys.log, f"({last}", "+", count=1)
            pipe.xrange(gkeys.direct, "-", "+", count=1)
            p_log, p_direct, retry, direct, dead, alive, undelivered, first_direct = pipe.execute(
                raise_on_error=False
            )
        none_pending: dict[str, Any] = {"pending": 0, "min": None}
        p_log, p_direct, retry, direct, dead, alive, undelivered, first_direct = _usable(
            f"{keys.queue}/{name}",
            (p_log, none_pending),
            (p_direct, none_pending),
            (retry, 0),
            (direct, 0),
            (dead, 0),
            (alive, 0),
            (undelivered, []),
            (first_direct, []),
        )
        p_direct = p_direct if isinstance(p_direct, dict) else none_pending
        lag = info.get("lag")
        if lag is None:  # Redis < 7, or a lag Redis cannot compute: count, capped
            lag = _count_after(client, keys.log, last) if undelivered else 0
        # The oldest of: pending in the log, first undelivered in the log, first
        # entry of the direct stream (retries and re-drives waiting or in flight).
        candidates = (
            p_log.get("min"),
            undelivered[0][0] if undelivered else None,
            first_direct[0][0] if isinstance(first_direct, list) and first_direct else None,
        )
        oldest = [to_str(x) for x in candidates if x]
        pending = [to_str(x) for x in (p_log.get("min"), p_direct.get("min")) if x]
        first_new = to_str(undelivered[0][0]) if undelivered else None
        consumers.append(
            ConsumerStats(
                name=name,
                lag=int(lag),
                in_flight=int(p_log["pending"]) + int(p_direct["pending"]),
                waiting_retry=int(retry),
                direct=int(direct) - int(p_direct["pending"]),
                dead=int(dead),
                oldest_unacked_age_s=age_s(min(oldest, key=_id_key), now) if oldest else None,
                instances_alive=int(alive),
                last_delivered_id=last,
                oldest_pending_age_s=age_s(min(pending, key=_id_key), now) if pending else None,
                oldest_undelivered_age_s=age_s(first_new, now),
            )
        )
    return QueueStats(
        name=keys.queue,
        length=int(length),
        delayed=int(delayed),
        dropped=int(dropped or 0),
        oldest_id=to_str(first[0][0]) if first else None,
        consumers=sorted(consumers, key=lambda c: c.name),
        archive_lag=_count_after(client, keys.log, to_str(archived or b"0-0")) if history else None,
        events=int(events) if history else None,
    )


def _usable(where: str, *replies: tuple[Any, Any]) -> list[Any]:
    """Each ``(reply, default)``'s reply, or its default when Redis answered an error."""
    out: list[Any] = []
    for reply, default in replies:
        if isinstance(reply, Exception):
            logger.warning("redisq stats of %s: %s (counted as empty)", where, reply)
            reply = default
        out.append(reply)
    return out


def _count_after(client: Any, log: str, last: str) -> int:
    ids = client.execute_command("XRANGE", log, f"({last}", "+", "COUNT", LAG_COUNT_CAP)
    return len(ids)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def age_s(entry_id: str | None, now: dt.datetime) -> float | None:
    if not entry_id:
        return None
    ms = int(entry_id.split("-", 1)[0])
    return max(0.0, now.timestamp() - ms / 1000.0)
