"""Raw XRANGE pages to Arrow record batches, one function per table.

``read()`` yields ``pyarrow.RecordBatch`` objects (PySpark >= 4.0 accepts them from a
Python data source and ships them to the JVM as they are): each column is built from
plain lists in one pass over the page, with no ``Row`` or per-row tuple, and payloads
stay the raw JSON text of the entry (never parsed). Odd content never fails a read:
a non-numeric time becomes null, invalid UTF-8 is escaped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from redisq_django.core.wire import wire_int
from redisq_django.pipeline.redis_io import RawEntry, StreamRef
from redisq_django.pipeline.schemas import Table, arrow_schema

#: What ``read()`` yields.
Batch: TypeAlias = pa.RecordBatch

#: Times after this (9999-12-31) are not milliseconds; they are read as null.
_MAX_MS = 253_402_300_799_999
_TS = pa.timestamp("us", tz="UTC")


def _int(raw: Any, limit: int = 2**31 - 1) -> int | None:
    """``raw`` as an integer in ``[0, limit]``, else None: text by the wire's rule (1 to 15
    digits, ``core.wire.wire_int``: what the consumers decode), a number from JSON as is."""
    if isinstance(raw, bytes | str):
        value = wire_int(raw)
    else:
        try:
            value = int(raw)
        except (TypeError, ValueError, OverflowError):
            return None
    return value if value is not None and 0 <= value <= limit else None


def _ms(raw: Any) -> int | None:
    return _int(raw, _MAX_MS)


def _strings(values: Sequence[bytes | str | None]) -> pa.Array:
    """A string column from bytes (validated as UTF-8 by Arrow, escaped when invalid)."""
    try:
        return pa.array(values, pa.binary()).cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(
            [v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v for v in values],
            pa.string(),
        )


def _times(ms: Sequence[int | None] | pa.Array) -> pa.Array:
    """A UTC microsecond timestamp column from milliseconds since the epoch."""
    return pc.multiply(pa.array(ms, pa.int64()), 1000).cast(_TS)


def _entry_ms(entry_ids: pa.Array) -> pa.Array:
    """The milliseconds part of each entry id (``"1700000000000-3"``), computed by Arrow:
    a Python loop over the ids cost as much as the rest of the page's conversion."""
    head = pc.list_element(pc.split_pattern(entry_ids, "-", max_splits=1), 0)
    return head.cast(pa.int64())


def messages(stream: StreamRef, page: list[RawEntry]) -> pa.RecordBatch:
    """The ``messages`` rows of a page of a queue's log."""
    n = len(page)
    ids = [e[0] for e in page]
    payloads: list[bytes | None] = [None] * n
    headers: list[bytes | None] = [None] * n
    message_ids: list[bytes | None] = [None] * n
    published: list[int | None] = [None] * n
    due: list[int | None] = [None] * n
    attempts: list[int | None] = [0] * n
    keys: list[bytes | None] = [None] * n
    for i, (_, flat) in enumerate(page):
        if len(flat) == 2 and flat[0] == b"payload":  # a plain publish: the common case
            payloads[i] = flat[1]
            continue
        fields = dict(zip(flat[::2], flat[1::2], strict=False))
        payloads[i] = fields.get(b"payload")
        headers[i] = fields.get(b"headers")
        message_ids[i] = fields.get(b"id")
        if b"published_at" in fields:
            published[i] = _ms(fields[b"published_at"])
        if b"due_at" in fields:
            due[i] = _ms(fields[b"due_at"])
        if b"attempts" in fields:
            attempts[i] = _int(fields[b"attempts"])
        keys[i] = fields.get(b"key")
    entry_ids = _strings(ids)
    entry_ms = _entry_ms(entry_ids)
    columns = [
        pa.array([stream.queue] * n, pa.string()),
        pc.coalesce(_strings(message_ids), entry_ids),
        entry_ids,
        _times(pc.coalesce(pa.array(published, pa.int64()), entry_ms)),
        _times(due),
        _strings(payloads),
        _strings(headers),
        pa.array(attempts, pa.int32()),
        _strings(keys),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(Table.MESSAGES))


def _event_messages(raw: bytes | None) -> list[tuple[Any, Any, Any]]:
    """The ``m`` field's ``[[message_id, attempt, duration_ms], ...]``; a reset's ``[]``
    (or a malformed value) gives one row without a message."""
    try:
        items = json.loads(raw) if raw is not None else []
    except (ValueError, RecursionError):
        items = []
    out = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, list) and item:
            padded = [*item, None, None]
            mid = padded[0] if isinstance(padded[0], str) else json.dumps(padded[0])
            out.append((mid, _int(padded[1]), _int(padded[2], 2**63 - 1)))
    return out or [(None, None, None)]


def event_rows(flat: Sequence[Any]) -> int:
    """The rows of the events table one raw events entry (``[field, value, ...]``)
    gives: one per message of its ``m`` field, one for a reset."""
    for name, value in zip(flat[::2], flat[1::2], strict=False):
        if name == b"m":
            return len(_event_messages(value))
    return 1


def events(stream: StreamRef, page: list[RawEntry]) -> pa.RecordBatch:
    """The ``events`` rows of a page of a queue's events stream: one per message."""
    cols: list[list[Any]] = [[] for _ in range(14)]
    (queue, consumer, instance, event, time, entry_id, message_id, attempt, duration) = cols[:9]
    error_class, error_message, reason, next_due, start_id = cols[9:]
    for raw_id, flat in page:
        fields = dict(zip(flat[::2], flat[1::2], strict=False))
        ms = int(raw_id[: raw_id.index(b"-")])
        shared = (
            fields.get(b"g"),
            fields.get(b"c"),
            fields.get(b"e"),
            raw_id,
            fields.get(b"error_class"),
            fields.get(b"error_message"),
            fields.get(b"reason"),
            _ms(fields[b"next_due"]) if b"next_due" in fields else None,
            fields.get(b"start"),
        )
        for mid, att, dur in _event_messages(fields.get(b"m")):
            consumer.append(shared[0])
            instance.append(shared[1])
            event.append(shared[2])
            time.append(ms)
            entry_id.append(shared[3])
            message_id.append(mid)
            attempt.append(att)
            duration.append(dur)
            error_class.append(shared[4])
            error_message.append(shared[5])
            reason.append(shared[6])
            next_due.append(shared[7])
            start_id.append(shared[8])
    queue.extend([stream.queue] * len(time))
    columns = [
        pa.array(queue, pa.string()),
        _strings(consumer),
        _strings(instance),
        _strings(event),
        _times(time),
        _strings(entry_id),
        pa.array(message_id, pa.string()),
        pa.array(attempt, pa.int32()),
        pa.array(duration, pa.int64()),
        _strings(error_class),
        _strings(error_message),
        _strings(reason),
        _times(next_due),
        _strings(start_id),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(Table.EVENTS))


def dead(stream: StreamRef, page: list[RawEntry]) -> pa.RecordBatch:
    """The ``dead`` rows of a page of one consumer's dead-letter stream."""
    rows = [(raw_id, dict(zip(flat[::2], flat[1::2], strict=False))) for raw_id, flat in page]

    def field(name: bytes) -> pa.Array:
        return _strings([f.get(name) for _, f in rows])

    def when(name: bytes) -> pa.Array:
        return _times([_ms(f[name]) if name in f else None for _, f in rows])

    entry_ids = _strings([raw_id for raw_id, _ in rows])
    columns = [
        pa.array([stream.queue] * len(rows), pa.string()),
        pa.array([stream.consumer] * len(rows), pa.string()),
        entry_ids,
        pc.coalesce(field(b"id"), entry_ids),
        field(b"payload"),
        field(b"headers"),
        pa.array([_int(f.get(b"attempts", 0)) for _, f in rows], pa.int32()),
        field(b"reason"),
        field(b"error_class"),
        field(b"error_message"),
        field(b"traceback"),
        when(b"published_at"),
        when(b"first_failed_at"),
        when(b"last_failed_at"),
        field(b"key"),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(Table.DEAD))


#: The page converter of each table.
CONVERTERS: dict[Table, Callable[[StreamRef, list[RawEntry]], pa.RecordBatch]] = {
    Table.MESSAGES: messages,
    Table.EVENTS: events,
    Table.DEAD: dead,
}
