"""Per-minute trends: counters written with the work they count, samples of the backlog,
and reading them back for charts.

One hash per queue and minute, ``redisq:{q}:trend:<minute>`` (minute = ms since the
epoch // 60000, by the writer's clock), holds:

=====================  =========================================================
field                  what
=====================  =========================================================
``published``          messages published to the queue (log or delayed set)
``handled:<g>``        deliveries consumer ``g`` acknowledged (its handler returned)
``failed:<g>``         deliveries whose handler raised (``Reject`` included)
``retried:<g>``        failed deliveries scheduled for another attempt
``dead:<g>``           messages that became dead letters (any reason)
``ms:<g>``             handler time of the handled and failed deliveries, whole ms
``timed_out:<g>``      failed deliveries whose handler ran past its time limit
``skipped:<g>``        deliveries of messages an ``atomic=True`` consumer had handled
``backlog:<g>`` …      samples (``backlog``, ``in_flight``, ``retrying`` per
                       consumer, ``delayed`` per queue), the last one of the minute
                       (one worker samples every queue every 15 s, or the admin
                       while none runs: ``core/operator/trend_sampler.py``)
=====================  =========================================================

Counters go in the same round trip as what they count: the ``HINCRBY`` rides in the
same write as the publish (inside its ``MULTI`` for a batch), the acknowledgement or the
``fail.lua`` call, each with its reply skipped (``CLIENT REPLY SKIP``) where the write
has one reply to read. They are not inside the scripts, so a command sent twice (a write
repeated after a lost connection, a relay's publish-once sent again) counts twice, and
a failure whose lease another instance took over meanwhile counts on both instances:
trends for charts, not accounting.

Each hash lives :data:`TTL_S` (48 h): every writer sets it with the first write of each
minute (again after a failed write), and the workers' sampler sets it too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redisq_django.core.batch import Command, run_batch, run_script
from redisq_django.core.clock import now_ms
from redisq_django.core.keys import QueueKeys
from redisq_django.core.scripts import ScriptName, Scripts
from redisq_django.core.stats import read_many
from redisq_django.core.types import RedisClient, execute
from redisq_django.core.wire import to_str

#: How long a minute's hash is kept, seconds (48 hours).
TTL_S = 48 * 3600
#: Minutes in :data:`TTL_S`: the longest range a chart can show.
KEPT_MINUTES = TTL_S // 60
MINUTE_MS = 60_000
#: How often the backlogs are sampled (``core/operator/trend_sampler.py``), seconds.
SAMPLE_INTERVAL_S = 15.0

PUBLISHED = "published"
HANDLED, FAILED, RETRIED, DEAD, HANDLER_MS = "handled", "failed", "retried", "dead", "ms"
TIMED_OUT = "timed_out"
SKIPPED = "skipped"
#: The error class of a time-limited attempt (``core/worker/time_limits.py``).
TIME_LIMIT_ERROR = "TimeLimitExceeded"
#: Sampled gauges: per consumer, and the queue's delayed set.
BACKLOG, IN_FLIGHT, RETRYING, DELAYED = "backlog", "in_flight", "retrying", "delayed"
#: Counted per logical consumer (``<what>:<consumer>``).
CONSUMER_COUNTERS = (HANDLED, FAILED, RETRIED, DEAD, HANDLER_MS)
CONSUMER_SAMPLES = (BACKLOG, IN_FLIGHT, RETRYING)


def minute_of(ms: int) -> int:
    """The minute (ms since the epoch // 60000) that ``ms`` falls in."""
    return ms // MINUTE_MS


def per_consumer(what: str, consumer: str) -> str:
    """The field of counter or sample ``what`` of ``consumer`` (``handled:billing``)."""
    return f"{what}:{consumer}"


class Counter:
    """Builds the commands that count in one queue's current minute.

    Thread-safe enough for sharing: a race only sends one more ``EXPIRE``.

    Args:
        keys: the queue's keys.
    """

    def __init__(self, keys: QueueKeys) -> None:
        self.keys = keys
        self._expiring = -1  # the minute whose hash this counter gave its TTL
        self._lock = threading.Lock()
        # (minute, n, commands) of the last published(n) without an EXPIRE.
        self._published: tuple[int, int, tuple[Command, ...]] = (-1, 0, ())

    def commands(self, counts: Mapping[str, int], now: int | None = None) -> list[Command]:
        """``HINCRBY`` of each non-zero count in this minute's hash, and its ``EXPIRE``
        the first time this counter writes in that minute."""
        minute = minute_of(now_ms() if now is None else now)
        key = self.keys.trend(minute)
        out: list[Command] = [("HINCRBY", key, f, n) for f, n in counts.items() if n]
        if out and minute != self._expiring:
            with self._lock:
                self._expiring = minute
            out.append(("EXPIRE", key, TTL_S))
        return out

    def published(self, n: int) -> tuple[Command, ...]:
        """:meth:`commands` of ``n`` messages published: the same tuple for every call of
        a minute after its first (the publish path's, built once a minute, not per call).
        """
        minute = minute_of(now_ms())
        cached = self._published
        if cached[0] == minute and cached[1] == n and minute == self._expiring:
            return cached[2]
        out = tuple(self.commands({PUBLISHED: n}, minute * MINUTE_MS))
        self._published = (minute, n, out[:1])  # the HINCRBY alone: the EXPIRE went once
        return out

    def forget(self) -> None:
        """A write failed: its ``EXPIRE`` may be lost, so send one again next time."""
        with self._lock:
            self._expiring = -1


_counters: dict[QueueKeys, Counter] = {}
_counters_lock = threading.Lock()


def counter(keys: QueueKeys) -> Counter:
    """The process's :class:`Counter` of queue ``keys`` (one per queue)."""
    found = _counters.get(keys)
    if found is None:
        with _counters_lock:
            found = _counters.setdefault(keys, Counter(keys))
    return found


class CountedCalls:
    """Runs a settling script (or a plain ``XACK``) with its trend counters in the same
    write: what an instance uses to acknowledge and settle.

    Args:
        client, scripts: the Redis client and its scripts.
        keys: the queue's keys.
        on: whether trends are kept (off: the call alone, as before trends existed).
    """

    def __init__(self, client: RedisClient, scripts: Scripts, keys: QueueKeys, on: bool) -> None:
        self.client, self.scripts, self.on = client, scripts, on
        self.counter = counter(keys)

    def __call__(
        self, name: ScriptName | None, keys: list[str], args: list[Any], counts: dict[str, int]
    ) -> Any:
        """Script ``name`` (None: ``XACK keys… args…``) and ``counts``; its reply."""
        if not self.on:
            if name is None:  # one plain command, no script: cheaper for Redis too
                return execute(self.client, "XACK", *keys, *args)
            return self.scripts(name, keys, args)
        quiet = self.counter.commands(counts)
        try:
            if name is None:
                command = ("XACK", *keys, *args)
                return run_batch(self.client, [command], transaction=False, quiet=quiet)[0]
            return run_script(self.client, self.scripts, name, keys, args, quiet=quiet)
        except BaseException:
            self.counter.forget()
            raise


def settle_counts(
    consumer: str, failed: bool, outcome: str, ms: int | None, error_class: str = ""
) -> dict[str, int]:
    """The counts of one failed delivery, or of a message dead-lettered without running.

    Args:
        consumer: the logical consumer.
        failed: its handler raised (``Reject`` included).
        outcome: ``retried`` or ``dead``.
        ms: how long its handler ran (counted only when ``failed``).
        error_class: what it raised (a time limit's is counted as such too).
    """
    counts = {per_consumer(outcome, consumer): 1}
    if failed:
        counts[per_consumer(FAILED, consumer)] = 1
        if ms:
            counts[per_consumer(HANDLER_MS, consumer)] = ms
        if error_class == TIME_LIMIT_ERROR:
            counts[per_consumer(TIMED_OUT, consumer)] = 1
    return counts


def handled_counts(consumer: str, durations: Iterable[int | None]) -> dict[str, int]:
    """The counts of handled deliveries whose handlers ran ``durations`` ms."""
    n = total = 0
    for ms in durations:
        n += 1
        total += ms or 0
    return {per_consumer(HANDLED, consumer): n, per_consumer(HANDLER_MS, consumer): total}


def sample_commands(keys: QueueKeys, stats: Any, now: int | None = None) -> list[Command]:
    """``HSET`` of the backlog, in-flight and retrying figures of each consumer and of
    the queue's delayed count into this minute's hash, and its ``EXPIRE``.

    Args:
        keys: the queue's keys.
        stats: its :class:`~redisq_django.core.stats.QueueStats`.
    """
    key = keys.trend(minute_of(now_ms() if now is None else now))
    values: list[Any] = [DELAYED, stats.delayed]
    for c in stats.consumers:
        values += [per_consumer(BACKLOG, c.name), c.backlog]
        values += [per_consumer(IN_FLIGHT, c.name), c.in_flight]
        values += [per_consumer(RETRYING, c.name), c.waiting_retry]
    return [("HSET", key, *values), ("EXPIRE", key, TTL_S)]


def sample(client: RedisClient, keys_list: Sequence[QueueKeys], now: int | None = None) -> None:
    """Sample the figures of the queues ``keys_list`` into this minute's trends: two
    round trips to read them (:func:`~redisq_django.core.stats.read_many`), one to write.

    Raises:
        redis.ConnectionError, redis.TimeoutError: Redis cannot be reached.
    """
    if not keys_list:
        return
    commands = []
    for keys, stats in zip(keys_list, read_many(client, keys_list), strict=True):
        commands += sample_commands(keys, stats, now)
    run_batch(client, commands, transaction=False)


@dataclass(frozen=True)
class Trend:
    """One queue's minutes, oldest first.

    Attributes:
        queue: the queue.
        first_minute: the minute of ``minutes[0]``.
        minutes: each minute's fields (empty: nothing was written that minute).
        partitions: a partitioned queue's trend of each of its partitions, in order
            (``minutes`` adds them up: ``core/partition_stats.py``); empty for a queue
            of one partition.
    """

    queue: str
    first_minute: int
    minutes: list[dict[str, int]] = field(default_factory=list)
    partitions: list[Trend] = field(default_factory=list)

    def consumers(self) -> list[str]:
        """Every logical consumer that appears in these minutes, sorted."""
        names = {f.split(":", 1)[1] for m in self.minutes for f in m if ":" in f}
        return sorted(names)

    def buckets(self, size: int) -> list[Bucket]:
        """The minutes in buckets of ``size`` minutes (the last one may be shorter)."""
        out = []
        for start in range(0, len(self.minutes), size):
            chunk = self.minutes[start : start + size]
            out.append(Bucket(self.first_minute + start, len(chunk), chunk))
        return out


@dataclass(frozen=True)
class Bucket:
    """Consecutive minutes of a :class:`Trend`, summed (counters) or sampled (gauges)."""

    first_minute: int
    size: int
    minutes: Sequence[dict[str, int]]

    @property
    def start_ms(self) -> int:
        return self.first_minute * MINUTE_MS

    def total(self, name: str, consumers: Iterable[str] | None = None) -> int:
        """Counter ``name`` summed over the bucket: the queue's own field (``published``)
        when ``consumers`` is None, else summed over those consumers."""
        fields = [name] if consumers is None else [per_consumer(name, c) for c in consumers]
        return sum(m.get(f, 0) for m in self.minutes for f in fields)

    def sample(self, name: str, consumers: Iterable[str] | None = None) -> int | None:
        """Gauge ``name``: the largest sample in the bucket (summed over ``consumers``
        within each minute), or None when no minute of the bucket has one."""
        fields = [name] if consumers is None else [per_consumer(name, c) for c in consumers]
        present = [
            sum(m[f] for f in fields if f in m) for m in self.minutes if any(f in m for f in fields)
        ]
        return max(present) if present else None


def read_trends(
    client: RedisClient, keys_list: Sequence[QueueKeys], minutes: int, now: int | None = None
) -> list[Trend]:
    """The last ``minutes`` minutes (this one included) of each queue, in one pipelined
    round trip (one ``HGETALL`` per queue and minute).

    Raises:
        redis.ConnectionError, redis.TimeoutError: Redis cannot be reached.
    """
    minutes = max(1, min(minutes, KEPT_MINUTES))
    last = minute_of(now_ms() if now is None else now)
    first = last - minutes + 1
    if not keys_list:
        return []
    with client.pipeline(transaction=False) as pipe:
        for keys in keys_list:
            for minute in range(first, last + 1):
                pipe.hgetall(keys.trend(minute))
        replies = pipe.execute(raise_on_error=False)
    out = []
    for i, keys in enumerate(keys_list):
        chunk = replies[i * minutes : (i + 1) * minutes]
        out.append(Trend(keys.queue, first, [_ints(r) for r in chunk]))
    return out


def _ints(reply: Any) -> dict[str, int]:
    """A ``HGETALL`` reply as field -> int (an error or an odd value counts as empty)."""
    if not isinstance(reply, dict):
        return {}
    out = {}
    for k, v in reply.items():
        try:
            out[to_str(k)] = int(v)
        except ValueError:
            continue
    return out
