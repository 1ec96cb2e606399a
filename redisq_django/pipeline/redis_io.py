"""Redis access for the data source: clients built from options, stream ids, ranges.

Executors build their own client from the options (URL, prefix, cluster flag) and never
touch Django. XRANGE replies are taken raw (flat ``[field, value, ...]`` lists) because
redis-py's reply callback builds a dict per entry, which is most of the cost of a read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from redisq_django.core.archives import TRIMMED_FIELDS, ArchivedStream
from redisq_django.core.clock import first_id_of_ms, last_id_of_ms
from redisq_django.core.groups import group_names
from redisq_django.core.keys import readable_names, registry_key
from redisq_django.core.types import RedisClient, execute
from redisq_django.pipeline import places
from redisq_django.pipeline.schemas import Table
from redisq_django.pipeline.source_options import SourceOptions

if TYPE_CHECKING:
    from redisq_django.core.broker import Broker

#: "Nothing read yet": every real entry id is after it.
ZERO_ID = "0-0"

#: A raw XRANGE entry: ``[entry_id, [field, value, ...]]``.
RawEntry = list[Any]


def _raw(response: Any, **_options: Any) -> Any:
    return response


def client(options: SourceOptions) -> RedisClient:
    """A bytes client for ``options.url`` whose XRANGE replies stay raw lists.

    Its socket and connect timeouts are option ``socketTimeout``: a stalled Redis fails a
    call after that long (and :class:`~redisq_django.pipeline.outages.Link` tries again)
    instead of blocking it for as long as the operating system keeps the connection.
    """
    timeouts = {
        "socket_timeout": options.socket_timeout,
        "socket_connect_timeout": options.socket_timeout,
    }
    conn: RedisClient
    if options.cluster:
        from redis.cluster import RedisCluster

        conn = RedisCluster.from_url(options.url, **timeouts)
    else:
        conn = redis.Redis.from_url(options.url, **timeouts)
    conn.set_response_callback("XRANGE", _raw)
    conn.set_response_callback("XREVRANGE", _raw)
    return conn


def broker(
    options: SourceOptions,
    conn: RedisClient | None = None,
    partitions: dict[str, int] | None = None,
) -> Broker:
    """A broker on ``conn`` (default: a new :func:`client`) with ``options``' prefix and
    ``partitions`` (queue -> K, as Redis records them: :func:`places.counts`), so that it
    routes to a partitioned queue's partitions as every other process does."""
    # Here, not at the top: the broker brings most of the core (the operator, the
    # subscription, the asyncio client), which a Spark worker reading a stream never needs.
    from redisq_django.core.broker import Broker
    from redisq_django.core.config import CoreConfig

    config = CoreConfig(prefix=options.prefix, partitions=partitions or {})
    return Broker(conn if conn is not None else client(options), config)


def parse_id(entry_id: str) -> tuple[int, int]:
    """``"1700000000000-3"`` as ``(1700000000000, 3)`` (for comparing ids)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def later(a: str, b: str) -> str:
    """The later of two entry ids."""
    return a if parse_id(a) >= parse_id(b) else b


def earlier(a: str, b: str) -> str:
    """The earlier of two entry ids."""
    return a if parse_id(a) <= parse_id(b) else b


def previous_id(entry_id: str) -> str:
    """The greatest id before ``entry_id`` (``5-0`` gives ``4-18446744073709551615``)."""
    ms, seq = parse_id(entry_id)
    return f"{ms}-{seq - 1}" if seq else last_id_of_ms(ms - 1)


def text(value: Any) -> str:
    """A reply value as text."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class StreamRef:
    """One stream the data source reads: a queue's log or events, or one consumer's
    dead letters, of the queue or of one of its partitions (``part``). ``name`` is its
    key in streaming offsets, ``place`` where its archive records are
    (:mod:`~redisq_django.pipeline.places`)."""

    queue: str
    key: str
    consumer: str | None = None
    part: int | None = None

    @property
    def place(self) -> str:
        """``queue``, or ``queue#part`` for a partition's stream."""
        return places.place(self.queue, self.part)

    @property
    def name(self) -> str:
        # Queue and consumer names never contain ":" or "#", so "q#i:g" is unambiguous.
        return self.place if self.consumer is None else f"{self.place}:{self.consumer}"


def list_queues(conn: RedisClient, options: SourceOptions) -> list[str]:
    """The queues to read: the ``queue`` option, else every queue in ``P:queues`` (but a
    member that is no queue name: another client may write anything there)."""
    if options.queues:
        return list(options.queues)
    return readable_names(sorted(text(q) for q in conn.smembers(registry_key(options.prefix))))[0]


def streams(
    conn: RedisClient, options: SourceOptions, queues: list[str], known: dict[str, int]
) -> list[StreamRef]:
    """The streams that hold ``options.table`` for ``queues``: each partition's of a
    partitioned queue. ``known``: the queues' numbers of partitions (queue -> K) read so
    far; those of the others are read (one round trip) and added to it."""
    missing = [q for q in queues if q not in known]
    if missing:
        known.update(places.counts(conn, options.prefix, missing))
    out = []
    for _, keys in places.layouts(options.prefix, {q: known[q] for q in queues}):
        queue = keys.queue
        if options.table is Table.MESSAGES:
            out.append(StreamRef(queue, keys.log, part=keys.part))
        elif options.table is Table.EVENTS:
            out.append(StreamRef(queue, keys.events, part=keys.part))
        else:
            for consumer in sorted(group_names(conn, keys)):
                out.append(StreamRef(queue, keys.group(consumer).dead, consumer, keys.part))
    return out


def bounds(conn: RedisClient, key: str) -> tuple[str, str] | None:
    """The first and last entry ids of stream ``key`` (None when empty or missing)."""
    first = execute(conn, "XRANGE", key, "-", "+", "COUNT", 1)
    if not first:
        return None
    last = execute(conn, "XREVRANGE", key, "+", "-", "COUNT", 1)
    return text(first[0][0]), text(last[0][0])


def last_id(conn: RedisClient, key: str) -> str:
    """The last entry id of stream ``key`` (``0-0`` when empty or missing)."""
    last = execute(conn, "XREVRANGE", key, "+", "-", "COUNT", 1)
    return text(last[0][0]) if last else ZERO_ID


def split(lo: str, hi: str, parts: int) -> list[tuple[str, str]]:
    """Split the inclusive id range ``[lo, hi]`` into up to ``parts`` inclusive ranges of
    equal time spans (cut at millisecond boundaries, so no id falls between two)."""
    lo_ms, hi_ms = parse_id(lo)[0], parse_id(hi)[0]
    span = hi_ms - lo_ms
    parts = max(1, min(parts, span + 1))
    if parts == 1:
        return [(lo, hi)]
    cuts = [lo_ms + span * i // parts for i in range(1, parts)]
    cuts = sorted(set(c for c in cuts if lo_ms < c <= hi_ms))
    starts = [lo, *(first_id_of_ms(c) for c in cuts)]
    ends = [*(last_id_of_ms(c - 1) for c in cuts), hi]
    return list(zip(starts, ends, strict=True))


def marks(conn: RedisClient, options: SourceOptions, refs: list[StreamRef]) -> dict[str, str]:
    """Per stream, the greatest entry id retention ever removed from it (``0-0``: none;
    dead letters leave by the sink, never by retention: always ``0-0``). One round trip."""
    if options.table is Table.DEAD or not refs:
        return {ref.name: ZERO_ID for ref in refs}
    field = TRIMMED_FIELDS[ArchivedStream(options.table.value)]
    with conn.pipeline(transaction=False) as pipe:
        for ref in refs:
            pipe.hget(places.keys_of(options.prefix, ref.place).meta, field)
        replies = pipe.execute()
    return {ref.name: text(r) if r else ZERO_ID for ref, r in zip(refs, replies, strict=True)}


def first_ids(conn: RedisClient, key: str, ranges: list[tuple[str, str]]) -> list[str | None]:
    """The first entry id of each ``(lo, hi)`` range of stream ``key`` (``lo`` may be
    ``"(id"``: after ``id``), None where there is none. One round trip."""
    with conn.pipeline(transaction=False) as pipe:
        for lo, hi in ranges:
            pipe.execute_command("XRANGE", key, lo, hi, "COUNT", 1)
        replies = pipe.execute()
    return [text(reply[0][0]) if reply else None for reply in replies]


def checked_pages(
    fetch: Callable[[str, int], list[RawEntry]],
    lo: str,
    page_size: int,
    expect: str,
    missing: Callable[[str, str | None], None],
) -> Iterator[list[RawEntry]]:
    """Pages of a range read with ``fetch(start, count)`` (:func:`page` of the range,
    through a retrying link), checking that no entry went missing before it was read.

    Each page reads one entry more than it yields: the next page must start with it.
    When a page does not start with the entry expected (``expect`` first: the range's
    first entry when it was planned), entries were removed before they were read, and
    ``missing(first missing id, first id still there or None)`` is called (it raises to
    fail, or returns to go on with what is there). A fetch tried again after a fault
    asks from the same ``start``, so a retry never looks like a loss.
    """
    start: str | None = lo
    while start is not None:
        entries = fetch(start, page_size + 1)
        if not entries or text(entries[0][0]) != expect:
            missing(expect, text(entries[0][0]) if entries else None)
        if not entries:
            return
        if len(entries) > page_size:
            expect = text(entries[page_size][0])
            start = expect
            entries = entries[:page_size]
        else:
            start = None
        yield entries


def page(conn: RedisClient, key: str, start: str, hi: str, page_size: int) -> list[RawEntry]:
    """One raw XRANGE page of ``key``: up to ``page_size`` entries from ``start`` (an id,
    or ``"(id"``: after it) to ``hi``, inclusive."""
    entries = execute(conn, "XRANGE", key, start, hi, "COUNT", page_size)
    if entries and isinstance(entries[0][1], dict):
        # RedisCluster applies its nodes' reply callbacks before ours: flatten back.
        entries = [[eid, [x for kv in fields.items() for x in kv]] for eid, fields in entries]
    return list(entries or [])


def pages(
    conn: RedisClient, key: str, lo: str, hi: str, page_size: int
) -> Iterator[list[RawEntry]]:
    """Raw XRANGE pages of ``key`` from ``lo`` to ``hi``, both inclusive, in id order."""
    start = lo
    while True:
        entries = page(conn, key, start, hi, page_size)
        if not entries:
            return
        yield entries
        if len(entries) < page_size:
            return
        start = "(" + text(entries[-1][0])
