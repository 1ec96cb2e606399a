"""Writing to the ``redisq`` data source: every row becomes a published message.

Rows need a ``payload`` column (JSON text); ``headers`` (a JSON object as text),
``message_id`` and ``key`` (the ordering key; null: none) are optional, and so is
``queue`` when option ``queue`` names the target.
The original ``message_id`` travels in header ``redisq-original-id`` (or the value of an
optional ``original_id`` column, for a job that publishes once under ids of its own, as
``replay --once`` does). Each task sends its rows in batches of ``batchSize`` (500)
envelopes, one round trip each: to the queue (every logical consumer gets them), or with
option ``consumer`` to that consumer's private input only. With ``once=true`` each
message keeps its id and is published at most once per id (a retried task does not
publish twice); with ``consumer`` too, "once" is per consumer: its own marker, so a
message sent once to the queue can still be sent once to one consumer.

A row that cannot be a message (a payload that is null or no JSON text, headers that are
no JSON object, a bad key) fails the task with :class:`UnpublishableRow`, naming the row
and the column: the rows before it in that task are published, none from it on.

A batch is written without waiting and confirmed when the next one is ready (so Redis
appends a batch while the next is built: ``core/ahead.py``); nothing is written after
a batch that is not confirmed, and the task ends when its last batch is.
A send that meets a transient Redis fault is sent again once Redis is back (option
``retryTimeout``, :mod:`~redisq_django.pipeline.outages`). A refused send did nothing; a
send whose reply was lost may have published: with ``once=true`` sending it again
publishes nothing twice, without it that batch may be published twice (as when Spark
runs a failed task again).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from redisq_django.core.ahead import SendAhead
from redisq_django.core.envelope import Envelope, check_key
from redisq_django.core.errors import RedisqError
from redisq_django.core.json import loads_text
from redisq_django.pipeline import places, redis_io
from redisq_django.pipeline.options import OptionError
from redisq_django.pipeline.outages import Link
from redisq_django.pipeline.source_options import SourceOptions

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

    from redisq_django.core.broker import Broker

#: The header carrying a replayed message's original id.
ORIGINAL_ID_HEADER = "redisq-original-id"


class UnpublishableRow(RedisqError, ValueError):
    """A row written to the ``redisq`` data source cannot be published as a message."""


class _BadColumn(RedisqError, ValueError):
    """What is wrong with one column of a row, and what to do (``to_envelope``)."""

    def __init__(self, column: str, problem: str) -> None:
        super().__init__(f"column {column!r} {problem}")
        self.column = column


@dataclass
class Sent(WriterCommitMessage):
    """What one task published."""

    count: int


@dataclass(frozen=True)
class RowLayout:
    """Where the columns a writer uses are in a row (None: absent)."""

    payload: int
    headers: int | None
    message_id: int | None
    queue: int | None
    original_id: int | None = None
    key: int | None = None

    @classmethod
    def of(cls, schema: StructType, options: SourceOptions) -> RowLayout:
        """Check ``schema`` against the write ``options``.

        Raises:
            OptionError: no ``payload`` column, no target queue, or ``once`` without a
                ``message_id`` column.
        """
        names = [f.name for f in schema.fields]
        columns = ("payload", "headers", "message_id", "queue", "original_id", "key")
        index = {n: names.index(n) for n in columns if n in names}
        if "payload" not in index:
            raise OptionError(f"Writing to redisq needs a 'payload' column; got {names}.")
        if len(options.queues) > 1:
            raise OptionError("Option 'queue' names one target queue when writing.")
        if not options.queues and "queue" not in index:
            raise OptionError("Writing to redisq needs option 'queue' or a 'queue' column.")
        if options.once and "message_id" not in index:
            raise OptionError("once=true needs a 'message_id' column (the id to publish once).")
        return cls(
            index["payload"],
            index.get("headers"),
            index.get("message_id"),
            index.get("queue"),
            index.get("original_id"),
            index.get("key"),
        )


def _plain_json_string(text: str) -> bool:
    """Whether JSON carries ``text`` between quotes as it is (no escape needed): ASCII
    without quotes, backslashes and control characters (an entry id, a hex id). Other
    text is escaped by ``json.dumps``, whatever it holds."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


#: The headers of a row with none of its own, up to its original id.
_ORIGINAL_ONLY = '{"' + ORIGINAL_ID_HEADER + '":"'


def _headers(raw: Any, original_id: Any) -> bytes | None:
    """The headers JSON with the original message id merged in."""
    if not raw and isinstance(original_id, str) and _plain_json_string(original_id):
        # The usual replayed row: no headers of its own, an entry id or hex id.
        return (_ORIGINAL_ONLY + original_id + '"}').encode()
    headers: dict[str, Any] = {}
    if raw is not None and raw != "":
        headers = json.loads(raw)
        if not isinstance(headers, dict):
            raise ValueError(f"headers must be a JSON object, got {raw[:100]!r}")
    if original_id is not None:
        headers[ORIGINAL_ID_HEADER] = str(original_id)
    if not headers:
        return None
    return json.dumps(headers, separators=(",", ":"), ensure_ascii=False).encode()


#: What to do about a payload that is no JSON text.
_JSON_PAYLOAD = (
    "must hold JSON text, as every consumer decodes it (an object, an array, a number, "
    "a string in quotes): build it with to_json(struct(...)), or to_json(col.cast("
    "'variant')) to send a plain string as a JSON string"
)


def to_envelope(row: Sequence[Any], layout: RowLayout, options: SourceOptions) -> Envelope:
    """The message one row publishes.

    Every replayed message passes here: its cost is a replay's speed (bench/RESULTS.md,
    issue 37), hence the local names and :meth:`Envelope.immediate`.

    Raises:
        ValueError: the payload is missing or not JSON, the headers not a JSON object,
            or the key not one ``publish`` takes; the message names the column.
    """
    payload = row[layout.payload]
    if payload is None:
        raise _BadColumn("payload", "is null: every message needs a payload (JSON text)")
    try:
        loads_text(payload)  # refuse what every consumer would dead-letter as undecodable
    except ValueError as exc:
        raise _BadColumn(
            "payload", f"is not JSON ({exc}; it starts {payload[:40]!r}): " + _JSON_PAYLOAD
        ) from None
    at = layout.message_id
    original = None if at is None else row[at]
    at = layout.original_id
    named = original if at is None else row[at]
    at = layout.headers
    try:
        headers_json = _headers(None if at is None else row[at], named)
    except ValueError as exc:
        raise _BadColumn("headers", f"must hold a JSON object as text, or null ({exc})") from None
    at = layout.key
    key = None if at is None else row[at]
    if key is not None:
        try:
            key = check_key(key)
        except ValueError as exc:
            raise _BadColumn("key", f"is no ordering key: {exc}") from None
    queues = options.queues
    return Envelope.immediate(
        queues[0] if queues else row[layout.queue],  # type: ignore[index]
        str(original) if options.once and original is not None else None,
        payload.encode(),
        headers_json,
        key,
    )


def _unpublishable(
    row: Sequence[Any], position: int, layout: RowLayout, problem: _BadColumn, sent: int
) -> UnpublishableRow:
    """The error for the row at ``position`` (from 1) of the rows one call publishes,
    ``sent`` rows having been published before it."""
    which = [f"row {position} of this task"]
    for name, index in (("message_id", layout.message_id), ("key", layout.key)):
        if index is not None and row[index] is not None:
            which.append(f"{name} {str(row[index])[:100]!r}")
    return UnpublishableRow(
        f"Cannot publish {', '.join(which)}: {problem}. The {sent} rows before it in this "
        "task were published; it and the rows after it were not."
    )


class _Sender:
    """Sends batches through a :class:`Link`, in order, each written while the one
    before is confirmed later (:class:`~redisq_django.core.ahead.SendAhead`: Redis
    appends a batch while the next is built), with one broker per client (a broker
    remembers the queues it registered and its loaded scripts) that knows the number of
    partitions Redis records for each queue it sends to, so that it routes as every
    other process does (a keyed message to its key's partition).

    After a transient fault the batch whose outcome it left unknown is sent again
    first (at most one: nothing is written after a batch that is not confirmed)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.link = Link(options)
        self._broker: Broker | None = None
        self._ahead: SendAhead | None = None
        self._client: Any = None  # the link's client the broker was built on
        self._counts: dict[str, int] = {}  # queue -> K, as Redis records it

    def send(self, batch: list[Envelope]) -> None:
        """Send ``batch`` after the ones before (confirmed by a later call or
        :meth:`settle`)."""
        self.link.run(lambda: self._send(batch), "sending")

    def settle(self) -> None:
        """Confirm every batch sent."""
        self.link.run(lambda: self._send([]), "sending")

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.close()
        self.link.close()

    def _send(self, batch: list[Envelope]) -> None:
        ahead = self._ahead_now(batch)
        again = ahead.unsure
        if again is not None:  # a fault left it unknown: sent again, as any failed send
            ahead.unsure = None
            self._send_on(ahead, again)
            if again is batch:  # this call's own, tried again by the link
                ahead.settle()
                return
        if batch:
            self._send_on(ahead, batch)
        else:
            ahead.settle()

    def _send_on(self, ahead: SendAhead, batch: Sequence[Envelope]) -> None:
        if not self.options.consumer:
            ahead.send(batch, once=self.options.once)
            return
        ahead.settle()  # a consumer's direct input: through its own path, in order
        ahead.unsure = batch
        ahead.broker.consumers.deliver(self.options.consumer, batch, once=self.options.once)
        ahead.unsure = None

    def _ahead_now(self, batch: list[Envelope]) -> SendAhead:
        """The sender on the link's client now (a new one after a fault: the batch the
        old one left unknown is carried over)."""
        client = self.link.client
        new = [q for q in dict.fromkeys(e.queue for e in batch) if q not in self._counts]
        if new:  # read once per queue (K changes only on a drained queue, all restarted)
            self._counts.update(places.counts(client, self.options.prefix, new))
        if self._broker is None or self._client is not client or new:
            partitioned = {q: k for q, k in self._counts.items() if k > 1}
            self._broker, self._client = redis_io.broker(self.options, client, partitioned), client
        if self._ahead is None or self._ahead.broker is not self._broker:
            unsure = None
            if self._ahead is not None:
                # Confirmed first: a connection closed with replies unread may lose
                # what Redis had not read yet (nothing in flight after a fault).
                self._ahead.settle()
                unsure = self._ahead.unsure
                self._ahead.close()
            self._ahead = SendAhead(self._broker)
            self._ahead.unsure = unsure
        return self._ahead


def batch_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[Any, ...]]:
    """The rows of Arrow record batches as tuples (column order kept)."""
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


def publish_rows(options: SourceOptions, layout: RowLayout, rows: Iterable[Any]) -> int:
    """Publish ``rows`` in batches of ``options.write_batch``; returns how many.

    Raises:
        UnpublishableRow: a row cannot be a message; the rows before it were published.
    """
    sender = _Sender(options)
    sent = 0
    batch: list[Envelope] = []
    try:
        for position, row in enumerate(rows, 1):
            try:
                batch.append(to_envelope(row, layout, options))
            except _BadColumn as bad:
                # Every row before it goes, none from it on: a rule a user can act on,
                # rather than "up to the last full batch of batchSize".
                if batch:
                    sender.send(batch)
                    sent += len(batch)
                sender.settle()
                raise _unpublishable(row, position, layout, bad, sent) from None
            if len(batch) >= options.write_batch:
                sender.send(batch)
                sent += len(batch)
                batch = []
        if batch:
            sender.send(batch)
            sent += len(batch)
        sender.settle()
    finally:
        sender.close()
    return sent


class RedisqWriter(DataSourceArrowWriter):
    """Batch writes (``df.write.format("redisq").mode("append")``). Spark hands the rows
    over as Arrow record batches: cheaper than one ``Row`` object per message."""

    def __init__(self, options: SourceOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("A queue cannot be overwritten: write with mode('append').")
        self.options = options
        self.layout = RowLayout.of(schema, options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Sent:
        """Publish one task's rows."""
        return Sent(publish_rows(self.options, self.layout, batch_rows(iterator)))


class RedisqStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writes: each micro-batch's rows are published as they come (published
    messages cannot be taken back, so ``commit`` and ``abort`` have nothing to do)."""

    def __init__(self, options: SourceOptions, schema: StructType, overwrite: bool) -> None:
        self.options = options
        self.layout = RowLayout.of(schema, options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Sent:
        """Publish one task's rows of a micro-batch."""
        return Sent(publish_rows(self.options, self.layout, batch_rows(iterator)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: the rows are published already."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: what was published stays published."""
