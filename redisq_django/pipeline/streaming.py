"""Streaming reads of the ``redisq`` data source, and the archive's commit.

Offsets are JSON objects ``{stream: last entry id read}``: the stream is named by its
queue (``"orders"``), or ``"queue:consumer"`` for dead letters (names never contain
``:``). ``"0-0"`` means nothing read yet. A micro-batch reads, per stream, the ids after
its start offset up to its end offset; ``commit(end)`` then records in Redis how far the
archive got (``Broker.commit_archive``), so retention may trim behind it.

Admission control (``maxEntriesPerTrigger``, ``maxRecordsPerTrigger``: see
:mod:`~redisq_django.pipeline.admission`) uses the ``latestOffset(start, limit)`` API of
PySpark >= 4.2, and ``Trigger.AvailableNow`` is honoured through
``SupportsTriggerAvailableNow``: the query stops at what existed when it started. Each
driver-side call waits out a transient Redis fault and runs again whole
(:mod:`~redisq_django.pipeline.outages`): they read, and a commit never moves back.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from redisq_django.core.clock import datetime_to_ms, last_id_of_ms
from redisq_django.core.keys import queue_keys
from redisq_django.pipeline import admission, redis_io
from redisq_django.pipeline.columns import Batch
from redisq_django.pipeline.outages import Link, waits_out_outages
from redisq_django.pipeline.reading import plan_ranges, read_partition
from redisq_django.pipeline.redis_io import ZERO_ID, StreamRef, parse_id
from redisq_django.pipeline.schemas import Table
from redisq_django.pipeline.source_options import OptionError, SourceOptions

Offset = dict[str, str]


def starting_offset(value: str, names: Sequence[str], last: dict[str, str]) -> Offset:
    """The initial offset for option ``startingOffsets``.

    Args:
        value: ``earliest``, ``latest``, an ISO 8601 time (naive: UTC) or a JSON object
            ``{"stream": "entry id"}`` (streams it leaves out start at the earliest).
        names: the streams read.
        last: each stream's last entry id now (used for ``latest``).

    Raises:
        OptionError: ``value`` is none of these.
    """
    text = value.strip()
    if text.lower() == "earliest":
        return dict.fromkeys(names, ZERO_ID)
    if text.lower() == "latest":
        return {n: last.get(n, ZERO_ID) for n in names}
    if text.startswith("{"):
        try:
            given = json.loads(text)
            out = {n: str(given.get(n, ZERO_ID)) for n in names}
            for entry_id in out.values():
                parse_id(entry_id)
            return out
        except (ValueError, AttributeError):
            raise OptionError(f"startingOffsets {text!r} is not a JSON object of ids.") from None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise OptionError(
            f"startingOffsets must be earliest, latest, an ISO time or JSON; got {text!r}."
        ) from None
    when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    # Exclusive start: the last possible id of the millisecond before, so entries of
    # that very millisecond are read.
    return dict.fromkeys(names, last_id_of_ms(datetime_to_ms(when) - 1))


def stream_of(options: SourceOptions, name: str) -> StreamRef:
    """The stream an offset key names (``"q"``, or ``"q:consumer"`` for dead letters)."""
    queue, _, consumer = name.partition(":")
    keys = queue_keys(options.prefix, queue)
    if options.table is Table.DEAD:
        return StreamRef(queue, keys.group(consumer).dead, consumer)
    return StreamRef(queue, keys.events if options.table is Table.EVENTS else keys.log)


class RedisqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streams a table; each micro-batch reads the ids between two offsets."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.link = Link(options)
        self._target: Offset | None = None  # Trigger.AvailableNow: stop here
        self._initial: Offset | None = None
        self._committed: Offset = {}

    @property
    def conn(self) -> Any:
        """The driver-side client (opened on first use, and again after an outage; Spark
        pickles the reader to the executors without it)."""
        return self.link.client

    def _streams(self) -> list[StreamRef]:
        # Listed again at every trigger: without option queue, new queues join the stream.
        queues = redis_io.list_queues(self.conn, self.options)
        return redis_io.streams(self.conn, self.options, queues)

    def _last_ids(self) -> dict[str, str]:
        return {s.name: redis_io.last_id(self.conn, s.key) for s in self._streams()}

    @waits_out_outages("starting a streaming query")
    def initialOffset(self) -> Offset:
        """Where a new query starts (option ``startingOffsets``; default earliest)."""
        last = self._last_ids()
        self._initial = starting_offset(self.options.starting_offsets, list(last), last)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRecordsPerTrigger`` or ``maxEntriesPerTrigger`` as a read limit (default:
        everything new); :meth:`latestOffset` applies both."""
        limit = self.options.max_records_per_trigger or self.options.max_entries_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    @waits_out_outages("starting a streaming query")
    def prepareForTriggerAvailableNow(self) -> None:
        """Remember what exists now: an ``availableNow`` query reads up to there only."""
        self._target = self._last_ids()

    @waits_out_outages("planning a micro-batch")
    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        """The end offset of the next micro-batch: each stream's last id, or, under a
        ``ReadMaxRows`` limit, at most ``maxEntriesPerTrigger`` entries and
        ``maxRecordsPerTrigger`` rows after ``start`` in all (shared among the streams
        with new entries, the ones furthest behind first: :mod:`.admission`)."""
        if start != self._initial:
            # Spark calls this only once the batch ending at `start` is done, but calls
            # commit(start) only when it plans another batch: without this, the archive
            # position would lag one batch behind (for ever, after an availableNow run).
            self.commit(start)
        latest = self._target if self._target is not None else self._last_ids()
        end = dict(start)
        behind = []
        for name, last in latest.items():
            position = start.get(name, ZERO_ID)
            end.setdefault(name, position)
            if parse_id(last) > parse_id(position):
                behind.append((parse_id(position), name, last))
        if not isinstance(limit, ReadMaxRows):
            end.update({name: last for _, name, last in behind})
            return end
        behind.sort()
        entries = self.options.max_entries_per_trigger
        rows = self.options.max_records_per_trigger
        if entries is None and rows is None:
            rows = limit.max_rows  # a limit Spark set itself
        streams = [
            admission.Behind(name, stream_of(self.options, name).key, end[name], last)
            for _, name, last in behind
        ]
        table, page_size = self.options.table, self.options.page_size
        end.update(admission.admit(self.conn, table, streams, entries, rows, page_size))
        return end

    @waits_out_outages("planning a micro-batch")
    def partitions(self, start: Offset, end: Offset) -> Sequence[InputPartition]:
        """Per stream, the ids after ``start`` up to ``end``, split by time and size."""
        out: list[InputPartition] = []
        for name, hi in sorted(end.items()):
            lo = start.get(name, ZERO_ID)
            if parse_id(hi) > parse_id(lo):
                stream = stream_of(self.options, name)
                out.extend(plan_ranges(self.options, self.conn, stream, f"({lo}", hi))
        return out

    def read(self, partition: InputPartition) -> Iterator[Batch]:
        """The rows of ``partition`` (on an executor)."""
        return read_partition(self.options, partition)

    @waits_out_outages("committing the archive position")
    def commit(self, end: Offset) -> None:
        """Record the archive's position (messages and events, unless option
        ``commitArchive`` is false; dead letters leave Redis through the database sink)."""
        if self.options.table is Table.DEAD or not self.options.commit_archive:
            return
        broker = redis_io.broker(self.options, self.conn)
        for queue, entry_id in sorted(end.items()):
            if entry_id not in (ZERO_ID, self._committed.get(queue)):
                broker.commit_archive(queue, self.options.table.value, entry_id)
                self._committed[queue] = entry_id

    def stop(self) -> None:
        """Close the driver-side client."""
        self.link.close()
