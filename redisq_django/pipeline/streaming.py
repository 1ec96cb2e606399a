"""Streaming reads of the ``redisq`` data source; a named archive's registration and commit.

Offsets are JSON objects ``{stream: last entry id read}``: the stream is named by its
queue (``"orders"``), or ``"queue:consumer"`` for dead letters (names never contain
``:``); a partitioned queue's streams by partition (``"orders#0"``, ``"orders#0:billing"``:
entry ids are per partition). A micro-batch reads, per stream, the ids after its start
offset up to its end offset.

A stream is read-only unless option ``archive`` names it: then it is that named archive
(:mod:`redisq_django.core.archives.named`). It registers each stream before it reads it (a new
query where ``startingOffsets`` says, a resumed one at its checkpoint's offset), and
``commit(end)`` moves its position in Redis, so retention trims behind it and never
before (a partitioned queue's: in each partition's record, so that each partition's log
is trimmed exactly behind it). Its name is its query's alone: the offsets carry the
query's owner token (:mod:`~redisq_django.pipeline.owner`), and another query under the
name is refused unless option ``takeOver`` says it replaces the owner. A read-only
stream writes nothing to Redis and holds nothing: retention may remove what it has not
read yet. Either way, entries removed before the stream read them are a data loss
(:mod:`redisq_django.pipeline.loss`): with ``failOnDataLoss`` (default) the query fails,
naming them. Offsets also carry a named archive's owner token (``"@owner"``).

Admission control (``maxEntriesPerTrigger``, ``maxRecordsPerTrigger``: see
:mod:`~redisq_django.pipeline.admission`) uses the ``latestOffset(start, limit)`` API of
PySpark >= 4.2, and ``Trigger.AvailableNow`` is honoured through
``SupportsTriggerAvailableNow``: the query stops at what existed when it started. Each
driver-side call waits out a transient Redis fault and runs again whole
(:mod:`~redisq_django.pipeline.outages`): they read, and a commit never moves back.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from redisq_django.core.archives import Archives, Gap, Registered
from redisq_django.core.clock import ms_to_datetime
from redisq_django.pipeline import admission, loss, owner, places, redis_io
from redisq_django.pipeline.columns import Batch
from redisq_django.pipeline.loss import Loss
from redisq_django.pipeline.outages import Link, waits_out_outages
from redisq_django.pipeline.reading import plan_ranges, read_slice
from redisq_django.pipeline.redis_io import ZERO_ID, StreamRef, later, parse_id
from redisq_django.pipeline.schemas import Table
from redisq_django.pipeline.source_options import (
    SourceOptions,
    StartingOffsets,
    refuse_unknown_streams,
)

Offset = dict[str, str]

logger = logging.getLogger("redisq.pipeline")


def starting_offset(
    start: StartingOffsets, names: Sequence[str], last: dict[str, str], trimmed: dict[str, str]
) -> Offset:
    """The initial offset of a read-only stream (option ``startingOffsets``).

    Args:
        start: the option, parsed.
        names: the streams read.
        last: each stream's last entry id now (used for ``latest``).
        trimmed: each stream's greatest id retention removed: ``earliest`` and a time
            start after it (whatever is still there), so what was gone before the query
            started is no data loss of it.
    """
    out = {}
    given = dict(start.ids)
    for name in names:
        gone = trimmed.get(name, ZERO_ID)
        if start.kind == "latest":
            out[name] = later(last.get(name, ZERO_ID), gone)
        elif start.kind == "time" and start.after:
            out[name] = later(start.after, gone)
        else:
            out[name] = given.get(name, gone)
    return out


def stream_of(options: SourceOptions, name: str) -> StreamRef:
    """The stream an offset key names (``"q"``, or ``"q:consumer"`` for dead letters;
    ``"q#i"`` and ``"q#i:consumer"`` in partition ``i`` of a partitioned queue)."""
    where, _, consumer = name.partition(":")
    keys = places.keys_of(options.prefix, where)
    if options.table is Table.DEAD:
        return StreamRef(keys.queue, keys.group(consumer).dead, consumer, keys.part)
    key = keys.events if options.table is Table.EVENTS else keys.log
    return StreamRef(keys.queue, key, part=keys.part)


class RedisqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streams a table; each micro-batch reads the ids between two offsets."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.link = Link(options)
        self._target: Offset | None = None  # Trigger.AvailableNow: stop here
        self._initial: Offset | None = None
        self._committed: Offset = {}
        self._registered: set[str] = set()
        self._partitions: dict[str, int] = {}  # queue -> K, read once per queue
        self._token = ""  # the owner token this query's offsets carry (pipeline/owner.py)

    @property
    def conn(self) -> Any:
        """The driver-side client (opened on first use, and again after an outage; Spark
        pickles the reader to the executors without it)."""
        return self.link.client

    @property
    def archives(self) -> Archives:
        """The named archives of the Redis read (driver side), addressed by place
        (``"q"``, or ``"q#i"``: a partition's records)."""
        return places.archives(self.conn, self.options.prefix)

    @property
    def checked(self) -> bool:
        """Whether this stream can lose data: messages and events can be trimmed; dead
        letters leave Redis for the database, which is no loss."""
        return self.options.table is not Table.DEAD

    def _streams(self) -> list[StreamRef]:
        # Listed again at every trigger: without option queue, new queues join the stream.
        # A queue's number of partitions changes only when it is drained and every process
        # restarted (core/repartition.py): read once per queue and query.
        queues = redis_io.list_queues(self.conn, self.options)
        return redis_io.streams(self.conn, self.options, queues, self._partitions)

    def _last_ids(self, refs: list[StreamRef] | None = None) -> dict[str, str]:
        """Each stream's last entry id, or the last id retention removed from it when
        that is later: entries that are gone still move the stream on, so that a batch
        finds their loss."""
        refs = self._streams() if refs is None else refs
        gone = redis_io.marks(self.conn, self.options, refs)
        return {s.name: later(redis_io.last_id(self.conn, s.key), gone[s.name]) for s in refs}

    def _register(
        self, ref: StreamRef, start: str, *, token: str, resumed: bool = False, check: bool = True
    ) -> str:
        """Register this archive for ``ref`` unless it is (``start``: where it starts,
        see ``Archives.register``; ``token``: the owner token of an offset Spark logged,
        "" when none was; ``resumed``: where its checkpoint is); the position to read
        from. ``check``: whether the name's owner was checked (then this process does
        not register the stream again)."""
        assert self.options.archive is not None
        table = self.options.table.value
        got = self.archives.register(
            ref.place,
            self.options.archive,
            table,
            start,
            owner=token,
            take_over=self.options.take_over,
        )
        if check:
            self._registered.add(ref.name)
        if got.taken_from_ms is not None:
            logger.warning(
                "redisq: archive %r of the %s of queue %r taken over (option takeOver) from "
                "the query that last committed at %s; that query stops at its next commit.",
                self.options.archive,
                table,
                ref.place,
                ms_to_datetime(got.taken_from_ms).isoformat(timespec="seconds"),
            )
        if got.status is Registered.NOW and resumed:
            logger.warning(
                "redisq: archive %r was not registered for the %s of queue %r; registered "
                "now at %s, where its query is (it was removed, or its Redis was replaced).",
                self.options.archive,
                table,
                ref.place,
                got.position,
            )
        return got.position

    def _ensure_registered(self, streams: Offset, token: str) -> None:
        """Register at ``streams``' positions (a logged offset's) what this process has
        not, checking the name's owner (``token``: the offset's, "" when Spark has not
        logged it yet)."""
        if self.options.archive is None:
            return
        for name, position in streams.items():
            if name not in self._registered:
                self._register(stream_of(self.options, name), position, token=token, resumed=True)

    def _start_of(self, ref: StreamRef, last: str, gone: str, token: str | None = None) -> str:
        """Where a stream starts that this query has not read yet (a named archive
        registers there, or continues from its registered position).

        ``token``: the owner token of the offset this is planned from; None in
        ``initialOffset``, which Spark also calls to learn where a resumed query's first
        batch started, before that query's logged token is known: there the registered
        position is read and the owner is not checked (the first batch does it)."""
        start = self.options.starting_offsets
        if self.options.archive is None:
            return starting_offset(start, [ref.name], {ref.name: last}, {ref.name: gone})[ref.name]
        if start.kind in ("earliest", "latest"):
            where = start.kind
        elif start.kind == "time" and start.after:
            where = later(start.after, gone)
        else:
            where = dict(start.ids).get(ref.name, "earliest")
        if token is not None:
            return self._register(ref, where, token=token)
        table = self.options.table.value
        registered = self.archives.positions(ref.place, self.options.archive).get(table)
        if registered is not None:
            return registered
        return self._register(ref, where, token="", check=False)

    @waits_out_outages("starting a streaming query")
    def initialOffset(self) -> Offset:
        """Where a new query starts (option ``startingOffsets``; default earliest).

        Spark asks again at every trigger until a first batch ran (and a query with
        nothing to read runs none): the answer, and the owner token it carries, is made
        once per query run, as Kafka's source keeps its initial offsets."""
        if self._initial is not None:
            return self._initial
        refs = self._streams()
        names = [ref.name for ref in refs]
        refuse_unknown_streams(
            [name for name, _ in self.options.starting_offsets.ids if name not in names],
            ", ".join(names) or "no queue yet",
        )
        gone = redis_io.marks(self.conn, self.options, refs)
        if self.options.archive is not None:
            self._token = self._token or owner.new_token()
        streams = {
            ref.name: self._start_of(ref, redis_io.last_id(self.conn, ref.key), gone[ref.name])
            for ref in refs
        }
        self._initial = owner.carry(self._token, streams)
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
        with new entries, the ones furthest behind first: :mod:`.admission`). A stream
        seen for the first time starts where ``startingOffsets`` says, next batch."""
        token, streams = owner.split(start)
        # A checkpoint of an earlier version carries no token: one is made, for the
        # offsets this query logs from now on. A new query's first start is not logged.
        self._token = token or self._token or owner.new_token()
        logged = token if start != self._initial else ""
        self._ensure_registered(streams, logged)
        if start != self._initial:
            # Spark calls this only once the batch ending at `start` is done, but calls
            # commit(start) only when it plans another batch: without this, the archive
            # position would lag one batch behind (for ever, after an availableNow run).
            self.commit(start)
        end = self._end(streams, limit, logged)
        return owner.carry(self._token if self.options.archive else "", end)

    def _end(self, start: Offset, limit: ReadLimit, token: str) -> Offset:
        """The streams' end positions of the next micro-batch (:meth:`latestOffset`;
        ``token``: the owner token ``start`` was logged with)."""
        latest = self._target if self._target is not None else self._last_ids()
        end = dict(start)
        behind = []
        for name, last in latest.items():
            if name not in end:
                ref = stream_of(self.options, name)
                gone = redis_io.marks(self.conn, self.options, [ref])[name]
                end[name] = self._start_of(ref, redis_io.last_id(self.conn, ref.key), gone, token)
            elif parse_id(last) > parse_id(end[name]):
                behind.append((parse_id(end[name]), name, last))
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
        """Per stream, the ids after ``start`` up to ``end``, in slices by time and size;
        first, the check that nothing after ``start`` was removed before this batch could
        read it."""
        # `end` is logged before a batch is planned (a resumed query's first batch starts
        # at an initialOffset made again, whose token is new: the end's is the query's).
        token, end = owner.split(end)
        start = owner.split(start)[1]
        self._ensure_registered(start, token)
        due = {
            name: (start[name], hi)
            for name, hi in sorted(end.items())
            if name in start and parse_id(hi) > parse_id(start[name])
        }
        if self.checked:
            self._check_losses({name: lo for name, (lo, _) in due.items()})
        out: list[InputPartition] = []
        for name, (lo, hi) in due.items():
            stream = stream_of(self.options, name)
            out.extend(
                plan_ranges(self.options, self.conn, stream, f"({lo}", hi, checked=self.checked)
            )
        return out

    def _check_losses(self, positions: Offset) -> None:
        """Fail (``failOnDataLoss``), or warn and go on, when retention removed entries
        after a stream's position before this batch read them; a named archive settles
        its gap record (forgets what it had read anyway, records what it lost)."""
        refs = [stream_of(self.options, name) for name in positions]
        gone = redis_io.marks(self.conn, self.options, refs)
        table = self.options.table.value
        archive = self.options.archive
        for ref in refs:
            after, last_gone = positions[ref.name], gone[ref.name]
            gap = self.archives.gap(ref.place, archive, table) if archive else None
            if parse_id(last_gone) <= parse_id(after):
                if gap is not None and archive:
                    self.archives.settle(ref.place, archive, table, after)
                continue
            found = loss.report(
                self._loss(ref, after, last_gone, gap), self.options.fail_on_data_loss
            )
            if archive:
                self.archives.settle(ref.place, archive, table, last_gone, found.to_json())

    def _loss(self, ref: StreamRef, after: str, last_gone: str, gap: Gap | None) -> Loss:
        """The entries after ``after`` up to ``last_gone``, with the first of them and
        their number when the archive's gap record says (it counts from its position,
        which may be behind this stream's)."""
        loss_of = Loss(
            queue=ref.queue,
            partition=ref.part,
            table=self.options.table.value,
            archive=self.options.archive,
            after=after,
            last=last_gone,
        )
        purge = gap.purge if gap is not None else None
        if purge is not None and parse_id(purge.last) > parse_id(after):
            # A purge removed them, or some of them: say so, with how many when its
            # record starts after this stream's position.
            whole = parse_id(purge.first) > parse_id(after)
            loss_of = dataclasses.replace(
                loss_of, purged_ms=purge.at_ms, purged=purge.count if whole else None
            )
        if gap is None or parse_id(gap.last) != parse_id(last_gone):
            return loss_of
        exact = parse_id(gap.first) > parse_id(after)
        return dataclasses.replace(
            loss_of, first=gap.first if exact else None, count=gap.count, at_most=not exact
        )

    def read(self, partition: InputPartition) -> Iterator[Batch]:
        """The rows of ``partition``, a slice (on an executor)."""
        return read_slice(self.options, partition)

    @waits_out_outages("committing the archive position")
    def commit(self, end: Offset) -> None:
        """A named archive records its position (messages and events; dead letters
        leave Redis through the database sink), a partitioned queue's per partition; a
        read-only stream writes nothing.

        Only an offset Spark logged with this query's owner token commits (one an
        earlier version logged is committed by the next batch, whose offset carries it):
        so the token Redis records as the name's owner is always in the checkpoint.

        Raises:
            ArchiveNotRegistered: the archive was removed while it ran.
            ArchiveOwned: another query took the name over.
        """
        if self.options.archive is None or self.options.table is Table.DEAD:
            return
        token, streams = owner.split(end)
        if not token:
            return
        table = self.options.table.value
        for where, entry_id in sorted(streams.items()):  # a place: "q", or "q#i"
            if entry_id not in (ZERO_ID, self._committed.get(where)):
                self.archives.commit(
                    where,
                    self.options.archive,
                    table,
                    entry_id,
                    owner=token,
                    take_over=self.options.take_over,
                )
                self._committed[where] = entry_id

    def stop(self) -> None:
        """Close the driver-side client."""
        self.link.close()
