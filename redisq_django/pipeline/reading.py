"""Reading streams by entry-id range: the slices of batch and streaming reads.

A slice is one stream's inclusive id range, read by one Spark task (a Spark input
partition; "partition" alone is a queue's, docs/layout.md); ``read`` pages through it
with XRANGE and yields one ``pyarrow.RecordBatch`` per page (PySpark >= 4.0 takes
record batches from a Python data source as they are, so no per-row tuple or ``Row`` is
ever built), with the columns built in :mod:`redisq_django.pipeline.columns`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from redisq_django.pipeline import loss, places, redis_io, sizing
from redisq_django.pipeline.columns import CONVERTERS, Batch
from redisq_django.pipeline.loss import Loss
from redisq_django.pipeline.outages import Link, waits_out_outages
from redisq_django.pipeline.redis_io import StreamRef
from redisq_django.pipeline.source_options import SourceOptions


@dataclass
class RangeSlice(InputPartition):
    """One Spark task's share of a read (Spark's input partition): an entry-id range of
    one stream.

    Attributes:
        stream: the stream (a queue's log or events, or one consumer's dead letters).
        lo: the first id, inclusive, or ``"(id"`` to start after ``id``.
        hi: the last id, inclusive.
        expect: for a streaming read, the range's first entry when it was planned: the
            read checks that nothing went missing before it was read (None: no check).
    """

    stream: StreamRef
    lo: str
    hi: str
    expect: str | None = None


def read_slice(options: SourceOptions, piece: InputPartition) -> Iterator[Batch]:
    """The rows of one slice, a record batch per XRANGE page (runs on executors:
    it connects with the options alone). A transient Redis fault is waited out and the
    read goes on after the last page it yielded (see :mod:`.outages`)."""
    if not isinstance(piece, RangeSlice):  # Spark's placeholder when none planned
        return
    link = Link(options)
    try:
        convert = CONVERTERS[options.table]
        key = piece.stream.key
        if piece.expect is None:
            pages = resumed_pages(link, key, piece.lo, piece.hi, options.page_size)
        else:

            def fetch(start: str, count: int) -> list[redis_io.RawEntry]:
                call = functools.partial(_page, link, key, start, piece.hi, count)
                return link.run(call, f"reading {key}")

            pages = redis_io.checked_pages(
                fetch,
                piece.lo,
                options.page_size,
                piece.expect,
                _on_missing(options, link, piece),
            )
        for page in pages:
            yield convert(piece.stream, page)
    finally:
        link.close()


def _page(link: Link, key: str, start: str, hi: str, page_size: int) -> list[Any]:
    return redis_io.page(link.client, key, start, hi, page_size)


def resumed_pages(
    link: Link, key: str, lo: str, hi: str, page_size: int
) -> Iterator[list[redis_io.RawEntry]]:
    """:func:`redis_io.pages` through ``link``: each page is tried again after a
    transient fault, starting after the last entry already yielded (XRANGE by id is
    idempotent: nothing is read twice or skipped)."""
    start = lo
    while True:
        fetch = functools.partial(_page, link, key, start, hi, page_size)
        entries = link.run(fetch, f"reading {key}")
        if not entries:
            return
        yield entries
        if len(entries) < page_size:
            return
        start = "(" + redis_io.text(entries[-1][0])


def _on_missing(
    options: SourceOptions, link: Link, piece: RangeSlice
) -> Callable[[str, str | None], None]:
    """What a streaming read does when entries of slice ``piece`` went missing before it
    read them: fail (``failOnDataLoss``), or warn, record it (a named archive) and go on."""

    def missing(first: str, present: str | None) -> None:
        found = Loss(
            queue=piece.stream.queue,
            partition=piece.stream.part,
            table=options.table.value,
            archive=options.archive,
            after=piece.lo.lstrip("("),
            first=first,
            last=None if present else piece.hi,
            before=present,
        )
        settled = loss.report(found, options.fail_on_data_loss)
        archive = options.archive
        if archive:
            upto = redis_io.previous_id(present) if present else piece.hi

            def record() -> None:
                archives = places.archives(link.client, options.prefix)
                where = piece.stream.place
                archives.settle(where, archive, found.table, upto, settled.to_json())

            link.run(record, f"recording a data loss of {piece.stream.key}")

    return missing


def plan_ranges(
    options: SourceOptions,
    conn: Any,
    stream: StreamRef,
    lo: str,
    hi: str,
    *,
    checked: bool = False,
) -> list[RangeSlice]:
    """Slices covering ``stream`` from ``lo`` to ``hi``: ``options.slices_per_stream``
    equal time spans, those with no entry left out and those holding more than
    ``options.max_entries_per_slice`` entries cut by count (:mod:`.sizing`).

    Args:
        options: the source's options.
        conn: a client (from :func:`redis_io.client`).
        stream: the stream to read.
        lo: the first id, inclusive, or ``"(id"``: after ``id``.
        hi: the last id, inclusive, or ``"+"``: the stream's last entry now.
        checked: give each slice its first entry now, so that its read notices
            entries removed before it read them (streaming); ranges with none are left
            out (no entry can appear in a range of ids already past).
    """
    exclusive = lo.startswith("(")
    start = lo[1:] if exclusive else lo
    edges = redis_io.bounds(conn, stream.key)
    if edges is None:
        return []
    # Split the part of [start, hi] that holds entries, not the years before the first.
    first = redis_io.later(edges[0], start)
    last = edges[1] if hi == "+" else redis_io.earlier(edges[1], hi)
    if redis_io.parse_id(first) > redis_io.parse_id(last):
        return []
    slices = redis_io.split(first, last, options.slices_per_stream)
    whole = first == edges[0] and last == edges[1]
    ranges = sizing.size_split(conn, stream.key, slices, options.max_entries_per_slice, whole=whole)
    out = [RangeSlice(stream, a, b) for a, b in ranges]
    if out and exclusive and out[0].lo == start:
        out[0] = RangeSlice(stream, f"({start}", out[0].hi)
    if not checked:
        return out
    expects = redis_io.first_ids(conn, stream.key, [(p.lo, p.hi) for p in out])
    return [
        RangeSlice(stream, p.lo, p.hi, expect)
        for p, expect in zip(out, expects, strict=True)
        if expect is not None
    ]


class RedisqReader(DataSourceReader):
    """Batch read: every stream of the table, as it is at planning time (each queue
    partition's of a partitioned queue: at least one slice each).

    No ``pushFilters``: in PySpark 4.3 a DataFrame reuses the slices planned for a
    filtered query derived from the same ``load()`` (``df.where(queue == "a").count()``
    then ``df.count()`` counted queue ``a`` only; Spark does not even call
    ``pushFilters`` for the unfiltered query, so the reader cannot undo it), and
    narrowing the id ranges by pushed filters would make later queries silently miss
    rows. Filters apply after the scan; options ``since`` and ``until`` narrow the
    ranges read, explicitly, for the whole DataFrame.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        # A batch read that never reached Redis: a wrong URL fails now, not in 10 min
        self.link = Link(options, first_contact="fail fast")

    def partitions(self) -> Sequence[InputPartition]:
        """Plan the read on the driver: each stream's first and last ids, split by time
        and size (a transient Redis fault is waited out: see :mod:`.outages`)."""
        try:
            return self._plan()
        finally:
            self.link.close()

    @waits_out_outages("planning a read")
    def _plan(self) -> list[InputPartition]:
        conn = self.link.client
        queues = redis_io.list_queues(conn, self.options)
        lo = self.options.since or redis_io.ZERO_ID
        hi = self.options.until or "+"
        if hi != "+" and redis_io.parse_id(lo) > redis_io.parse_id(hi):
            return []
        return [
            piece
            for stream in redis_io.streams(conn, self.options, queues, {})
            for piece in plan_ranges(self.options, conn, stream, lo, hi)
        ]

    def read(self, partition: InputPartition) -> Iterator[Batch]:
        """The rows of ``partition``, a slice (record batches, see :mod:`.columns`)."""
        return read_slice(self.options, partition)
