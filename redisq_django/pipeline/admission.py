"""Admission control of streaming reads: how far the next micro-batch reads.

Two limits, both optional: ``maxEntriesPerTrigger`` counts stream entries, and
``maxRecordsPerTrigger`` counts rows. They differ for the events table only, where one
entry holds a row per message of a settle (an acknowledged batch of 1,000 messages is one
entry and 1,000 rows). The budget is shared among the streams with something new, the
ones furthest behind first; a stream's unused share goes to the next. A micro-batch
never holds more rows than the limit, except that an entry holding more rows than the
limit by itself is read whole, alone in its micro-batch (so the query always moves on).

Counting costs a read on the driver: the micro-batch's entries are fetched once there
(pages of ``pageSize``; only the events' ``m`` field is parsed) before the executors read
them again, so a limit costs about what it admits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redisq_django.pipeline import redis_io
from redisq_django.pipeline.columns import event_rows
from redisq_django.pipeline.schemas import Table


@dataclass(frozen=True)
class Behind:
    """A stream with entries after its position: ``name`` (offset key), its ``key``,
    ``position`` (last id read) and ``last`` (the id to read up to at most)."""

    name: str
    key: str
    position: str
    last: str


@dataclass(frozen=True)
class Taken:
    """What one stream admits: up to ``end`` (None: nothing), ``entries`` and ``rows``."""

    end: str | None
    entries: int
    rows: int


def _share(left: int | None, streams: int) -> int | None:
    return None if left is None else -(-max(0, left) // streams)  # rounded up


def take(
    conn: Any,
    table: Table,
    stream: Behind,
    entries: int | None,
    rows: int | None,
    page_size: int,
    *,
    overshoot: bool,
) -> Taken:
    """The entries of ``stream`` after its position that fit in ``entries`` entries and
    ``rows`` rows (None: no such limit); with ``overshoot``, the first entry is taken
    even when its rows alone are more than ``rows``."""
    start, end, n, counted = f"({stream.position}", None, 0, 0
    while True:
        want = page_size
        for left in (
            None if entries is None else entries - n,
            None if rows is None else rows - counted,
        ):
            if left is not None:
                want = min(want, left)
        if want <= 0:
            want = 1 if overshoot and n == 0 else 0
        if want <= 0:
            return Taken(end, n, counted)
        page = redis_io.page(conn, stream.key, start, stream.last, want)
        for entry_id, flat in page:
            size = event_rows(flat) if table is Table.EVENTS else 1
            if rows is not None and counted + size > rows and not (overshoot and n == 0):
                return Taken(end, n, counted)
            end, n, counted = redis_io.text(entry_id), n + 1, counted + size
            if entries is not None and n >= entries:
                return Taken(end, n, counted)
        if len(page) < want:
            # Nothing more up to `last`: the batch may end there. `last` can be after the
            # stream's last entry (the last id retention removed: entries gone unread
            # still move the stream on, so that the batch finds their loss).
            return Taken(stream.last, n, counted)
        start = "(" + redis_io.text(page[-1][0])


def admit(
    conn: Any,
    table: Table,
    behind: Sequence[Behind],
    entries: int | None,
    rows: int | None,
    page_size: int,
) -> dict[str, str]:
    """The end id of each stream of ``behind`` (furthest behind first) that admits
    something, within ``entries`` entries and ``rows`` rows in all."""
    out: dict[str, str] = {}
    for i, stream in enumerate(behind):
        count = len(behind) - i
        share_entries, share_rows = _share(entries, count), _share(rows, count)
        if share_entries == 0 or share_rows == 0:
            break
        taken = take(conn, table, stream, share_entries, share_rows, page_size, overshoot=not out)
        if taken.end is not None:
            out[stream.name] = taken.end
        entries = None if entries is None else entries - taken.entries
        rows = None if rows is None else rows - taken.rows
    return out
