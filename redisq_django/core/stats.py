"""Queue and consumer statistics, read with pipelined commands: two round trips for any
number of queues and consumers (:func:`read_many`)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from redisq_django.core.archives import LAG_COUNT_CAP as ARCHIVE_LAG_CAP
from redisq_django.core.archives import ArchivedStream, legacy_field
from redisq_django.core.groups import worker_of
from redisq_django.core.keys import QueueKeys
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str, wire_int

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
        instances_alive: instances with a live heartbeat (a worker's handler threads:
            one per unit of concurrency, on each partition of a partitioned queue).
        last_delivered_id: its position in the log.
        oldest_pending_age_s: age of the oldest delivery not yet acknowledged, by its
            entry id (publish time in the log, retry or re-drive time in its private
            input), seconds; None when nothing is in flight.
        oldest_undelivered_age_s: age of the oldest log entry not yet delivered to it
            (by publish time), seconds; None when it has read the whole log.
        held_back: an ordered consumer's messages waiting behind the message that
            holds their ordering key (``core/ordered.py``); 0 for any other consumer.
        workers: the worker processes its live instances run in
            (:func:`~redisq_django.core.groups.worker_of` their names), as many as
            :data:`WORKERS_READ_CAP` instances tell apart.
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
    held_back: int = 0
    workers: frozenset[str] = frozenset()

    @property
    def backlog(self) -> int:
        """Messages waiting to be delivered to it now: not yet delivered from the log,
        plus re-driven and due retries waiting in its private input (``lag + direct``).
        Excludes what is in flight, retries still in their backoff, and delayed
        messages not yet due."""
        return self.lag + self.direct

    @property
    def stalled(self) -> bool:
        """It has a backlog and no instance alive to work on it."""
        return self.backlog > 0 and self.instances_alive == 0


@dataclass(frozen=True)
class QueueStats:
    """The state of one queue.

    Attributes:
        name: the queue.
        length: entries in the log, including acknowledged history kept for replay
            (the replay window): not a backlog.
        delayed: delayed messages not yet due.
        dropped: messages removed by the hard cap before every consumer acked them.
        oldest_id: the oldest entry of the log (None when empty).
        consumers: per logical consumer.
        archive_lag: log entries the archive furthest behind has not stored yet
            (capped at ``LAG_COUNT_CAP``; with history on and no archive registered, the
            whole log); None when history is off and no archive is registered.
        events: with history on, lifecycle events still in Redis; None when off.
        partitions: a partitioned queue's stats of each of its partitions, in order
            (its own figures add them up: ``core/partition_stats.py``); empty for a
            queue of one partition.
    """

    name: str
    length: int
    delayed: int
    dropped: int
    oldest_id: str | None
    consumers: list[ConsumerStats] = field(default_factory=list)
    archive_lag: int | None = None
    events: int | None = None
    partitions: list[QueueStats] = field(default_factory=list)

    @property
    def lag(self) -> int:
        """The largest lag of any consumer."""
        return max((c.lag for c in self.consumers), default=0)

    def total(self, figure: str) -> int:
        """The sum of per-consumer ``figure`` (e.g. ``"backlog"``) over its consumers:
        deliveries owed, so a message two consumers still need counts twice."""
        return sum(int(getattr(c, figure)) for c in self.consumers)

    @property
    def workers(self) -> frozenset[str]:
        """The worker processes running any of its consumers: one process serving three
        consumers is one worker here, where its instances count three times."""
        return frozenset().union(*(c.workers for c in self.consumers))

    @property
    def oldest_unacked_age_s(self) -> float | None:
        """The oldest unacknowledged message of any of its consumers, seconds."""
        ages = [c.oldest_unacked_age_s for c in self.consumers if c.oldest_unacked_age_s]
        return max(ages, default=None)


#: Above this many undelivered entries, lag figures Redis cannot give are this cap.
LAG_COUNT_CAP = ARCHIVE_LAG_CAP

#: Per queue, the commands of the first round trip, in order.
_QUEUE_REPLIES = 8
#: Per consumer, the commands of the second round trip, in order (plus one for a lag
#: Redis does not report).
_GROUP_REPLIES = 10
#: At most this many live instances of one logical consumer (of one partition) are read
#: by name to tell their worker processes apart; the count of instances is exact.
WORKERS_READ_CAP = 1000

_NO_PENDING: dict[str, Any] = {"pending": 0, "min": None}


def read_stats(client: RedisClient, keys: QueueKeys, *, history: bool = False) -> QueueStats:
    """The stats of one queue (see :func:`read_many`)."""
    return read_many(client, [keys], history=history)[0]


def read_many(
    client: RedisClient, keys_list: Sequence[QueueKeys], *, history: bool = False
) -> list[QueueStats]:
    """Length, delayed, drops and per-consumer lag, in-flight, retries, dead, age of the
    queues whose keys are ``keys_list``, in that order; with ``history``, also the
    archive's lag and the events waiting for it.

    Two pipelined round trips whatever the number of queues and consumers: the queues'
    figures and consumer lists, then every consumer's figures.

    Raises:
        redis.ConnectionError, redis.TimeoutError: Redis cannot be reached (a key of the
            wrong type does not raise: it counts as empty and is logged).
    """
    if not keys_list:
        return []
    with client.pipeline(transaction=False) as pipe:
        for keys in keys_list:
            pipe.xlen(keys.log)
            pipe.zcard(keys.delayed)
            pipe.hget(keys.meta, "dropped")
            pipe.xrange(keys.log, "-", "+", count=1)
            pipe.xinfo_groups(keys.log)
            pipe.hgetall(keys.archives)
            pipe.hget(keys.meta, legacy_field(ArchivedStream.MESSAGES))
            pipe.xlen(keys.events)
        first_trip = pipe.execute(raise_on_error=False)
    queues = []
    for i, keys in enumerate(keys_list):
        replies = first_trip[i * _QUEUE_REPLIES : (i + 1) * _QUEUE_REPLIES]
        # A key of the wrong type (an operator's mistake, another program) answers an
        # error in place of its figure: it counts as empty here, and is logged, rather
        # than failing the whole status page or command.
        queues.append(
            _usable(
                keys.queue,
                *zip(replies, (0, 0, None, [], [], {}, None, 0), strict=True),
            )
        )
    now = dt.datetime.now(dt.UTC)
    now_score = int(now.timestamp() * 1000)
    with client.pipeline(transaction=False) as pipe:
        behind = []
        for keys, (_, _, _, _, groups, registry, legacy, _) in zip(keys_list, queues, strict=True):
            for info in groups:
                _queue_group(pipe, keys, info, now_score)
            position = _furthest_behind(registry, legacy)
            if position is None and history:
                position = "0-0"  # history on, no archive yet: the whole log waits for one
            behind.append(position)
            if position is not None:
                _queue_count_after(pipe, keys.log, position)
        second_trip = iter(pipe.execute(raise_on_error=False))
    out = []
    for keys, (length, delayed, dropped, first, groups, _, _, events), position in zip(
        keys_list, queues, behind, strict=True
    ):
        consumers = [_consumer(keys, info, second_trip, now) for info in groups]
        archive_lag = None if position is None else _counted(next(second_trip), keys.queue)
        out.append(
            QueueStats(
                name=keys.queue,
                length=int(length),
                delayed=int(delayed),
                dropped=int(dropped or 0),
                oldest_id=to_str(first[0][0]) if first else None,
                consumers=sorted(consumers, key=lambda c: c.name),
                archive_lag=archive_lag,
                events=int(events) if history else None,
            )
        )
    return out


def _furthest_behind(registry: dict[bytes, bytes], legacy: bytes | None) -> str | None:
    """The lowest position of the archives of the log (registered, or an earlier version's
    unnamed one); None when there is none."""
    suffix = b":" + ArchivedStream.MESSAGES.value.encode()
    positions = [
        to_str(v) for k, v in registry.items() if k.endswith(suffix) and k.count(b":") == 1
    ]
    if legacy is not None:
        positions.append(to_str(legacy))
    return min(positions, key=id_order) if positions else None


def _queue_group(pipe: Any, keys: QueueKeys, info: dict[str, Any], now_score: int) -> None:
    """Queue the second round trip's commands of one consumer group."""
    name = to_str(info["name"])
    gkeys = keys.group(name)
    last = to_str(info["last-delivered-id"])
    pipe.xpending(keys.log, name)
    pipe.xpending(gkeys.direct, name)
    pipe.zcard(gkeys.retry)
    pipe.xlen(gkeys.direct)
    pipe.xlen(gkeys.dead)
    pipe.zcount(gkeys.instances, now_score, "+inf")
    pipe.zrangebyscore(gkeys.instances, now_score, "+inf", start=0, num=WORKERS_READ_CAP)
    pipe.xrange(keys.log, f"({last}", "+", count=1)
    pipe.xrange(gkeys.direct, "-", "+", count=1)
    pipe.get(gkeys.held_back)
    if info.get("lag") is None:  # Redis < 7, or a lag Redis cannot compute: count, capped
        _queue_count_after(pipe, keys.log, last)


def _consumer(
    keys: QueueKeys, info: dict[str, Any], replies: Any, now: dt.datetime
) -> ConsumerStats:
    """One consumer's figures from its replies of the second round trip."""
    name = to_str(info["name"])
    got = [next(replies) for _ in range(_GROUP_REPLIES)]
    p_log, p_direct, retry, direct, dead, alive, live, undelivered, first_direct, held = _usable(
        f"{keys.queue}/{name}",
        *zip(got, (_NO_PENDING, _NO_PENDING, 0, 0, 0, 0, [], [], [], None), strict=True),
    )
    p_direct = p_direct if isinstance(p_direct, dict) else _NO_PENDING
    lag = info.get("lag")
    if lag is None:
        lag = _counted(next(replies), f"{keys.queue}/{name}")
    # The oldest of: pending in the log, first undelivered in the log, first entry of
    # the direct stream (retries and re-drives waiting or in flight).
    candidates = (
        p_log.get("min"),
        undelivered[0][0] if undelivered else None,
        first_direct[0][0] if isinstance(first_direct, list) and first_direct else None,
    )
    oldest = [to_str(x) for x in candidates if x]
    pending = [to_str(x) for x in (p_log.get("min"), p_direct.get("min")) if x]
    first_new = to_str(undelivered[0][0]) if undelivered else None
    return ConsumerStats(
        name=name,
        lag=int(lag),
        in_flight=int(p_log["pending"]) + int(p_direct["pending"]),
        waiting_retry=int(retry),
        direct=int(direct) - int(p_direct["pending"]),
        dead=int(dead),
        oldest_unacked_age_s=age_s(min(oldest, key=id_order), now) if oldest else None,
        instances_alive=int(alive),
        last_delivered_id=to_str(info["last-delivered-id"]),
        oldest_pending_age_s=age_s(min(pending, key=id_order), now) if pending else None,
        oldest_undelivered_age_s=age_s(first_new, now),
        held_back=(wire_int(held) or 0) if isinstance(held, bytes | str) else 0,
        workers=frozenset(worker_of(to_str(m)) for m in live),
    )


def _usable(where: str, *replies: tuple[Any, Any]) -> list[Any]:
    """Each ``(reply, default)``'s reply, or its default when Redis answered an error.

    Raises:
        redis.ConnectionError: a node did not answer (also ``redis.TimeoutError``).
    """
    out: list[Any] = []
    for reply, default in replies:
        if isinstance(reply, redis.ConnectionError | redis.TimeoutError):
            # A cluster pipeline hands back a node that did not answer as a reply: an
            # outage for the caller to report, not an empty figure.
            raise reply
        if isinstance(reply, Exception):
            if not str(reply).startswith("no such key"):  # XINFO of a queue not yet written
                logger.warning("redisq stats of %s: %s (counted as empty)", where, reply)
            reply = default
        out.append(reply)
    return out


def _queue_count_after(pipe: Any, log: str, last: str) -> None:
    pipe.execute_command("XRANGE", log, f"({last}", "+", "COUNT", LAG_COUNT_CAP)


def _counted(reply: Any, where: str) -> int:
    """How many entries an XRANGE of :func:`_queue_count_after` returned."""
    (entries,) = _usable(where, (reply, []))
    return len(entries)


def id_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a sort key (``ms``, ``seq``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def age_s(entry_id: str | None, now: dt.datetime) -> float | None:
    if not entry_id:
        return None
    ms = int(entry_id.split("-", 1)[0])
    return max(0.0, now.timestamp() - ms / 1000.0)
