"""Per-message acknowledgements, pipelined: a crash repeats at most what was running.

A handler thread acknowledges each message as soon as its handler returns, without
waiting for Redis: the acknowledgement is written to a connection of its own just before
the next handler starts (or before the next fetch), and the replies are read at the end
of the batch, when the handler thread settles anyway. Redis's work (the ``XACK``, or
``ack.lua`` with its ``handled`` event when history is on) overlaps with the next
handlers, so per-message acks cost one small write each, no round trip.

Handled messages waiting when a write happens go in one call (one ``handled`` event with
history on). Replies, and the ``after_settle`` hooks of the acknowledged messages, come
in the handler's thread at :meth:`AckPipe.flush`. A write or a reply that fails (Redis
away, refusing) leaves its messages queued: acknowledging again is harmless (ids no
longer pending are skipped, and so are their records), so :meth:`flush` simply sends
them again once Redis is back. A cold stop loses only acks not yet written; their
messages are delivered again (at-least-once).

The same write records which message the thread starts next (``mark``), so that
``reclaim.lua`` counts a delivery only for a message whose handler actually started.

With trends on, the batch's handled messages and their handler time are counted in the
queue's per-minute trends (``core/trends.py``) by the batch's last write (:meth:`flush`),
with their replies skipped: the counters ride in the same pipeline as the batch's
acknowledgements, at one small command per batch instead of one per message. A worker
killed in the middle of a batch leaves that batch uncounted.

The connection, the unread replies and their errors are the pipelining layer's
(``core/pipelining.py``): after a NOSCRIPT (Redis restarted) it loads ``ack.lua`` and
sends the refused acknowledgements again before :meth:`AckPipe.flush` returns.

Clients without one connection pool (a Redis Cluster client) acknowledge synchronously.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from redisq_django.core import lifecycle, trends
from redisq_django.core.batch import run_batch
from redisq_django.core.delivery import Delivery, Stream
from redisq_django.core.errors import translate_errors
from redisq_django.core.leases import TAG_PREFIX, started_tag
from redisq_django.core.outcome import Outcome, Settlement
from redisq_django.core.pipelining import SKIP_REPLY, Pipe, packed, skipping_replies
from redisq_django.core.scripts import ScriptName
from redisq_django.core.subscription import Subscription
from redisq_django.core.types import execute
from redisq_django.core.wire import to_bytes

#: Writes whose replies may wait unread before :meth:`AckPipe.send` reads them.
MAX_UNREAD_WRITES = 256


class AckPipe:
    """The acknowledgements of one instance (subscription), written without waiting.

    Args:
        sub: the instance.
        on_acked: called in the handler's thread with the messages Redis acknowledged
            (or found settled already), in order: once per read of the replies, with
            every message whose reply it read.
    """

    def __init__(self, sub: Subscription, on_acked: Callable[[list[Delivery]], None]) -> None:
        self.sub = sub
        self.client = sub.client
        self.queue, self.consumer = sub.queue, sub.consumer  # for translate_errors
        self._on_acked = on_acked
        #: Acknowledgements written whose reply is not read yet, each tagged with the
        #: messages it settles.
        self._pipe: Pipe[list[Delivery]] = Pipe(sub.client, sub.scripts)
        self._pooled = self._pipe.available
        self._packed = _Prepacked(sub)
        self._counter = trends.counter(sub.keys) if sub.config.trends else None
        #: Trend counts of this batch not written yet: what handlers settled themselves
        #: (a task's), and, two plain sums per handled message, handled and their ms.
        self._counts: dict[str, int] = {}
        self._handled = self._handled_ms = 0
        self._handled_field = trends.per_consumer(trends.HANDLED, sub.consumer)
        self._ms_field = trends.per_consumer(trends.HANDLER_MS, sub.consumer)
        self._queued: list[Delivery] = []  # handled; acknowledgement not written yet
        self._unread_writes = 0  # acknowledgements written, their reply not read yet

    @property
    def pending(self) -> int:
        """Handled messages whose acknowledgement Redis has not confirmed yet."""
        return len(self._queued) + sum(len(ms) for ms in self._pipe.tags())

    def unconfirmed(self) -> list[Delivery]:
        """Handled messages whose acknowledgement Redis has not confirmed yet, in order."""
        return [m for ms in self._pipe.tags() for m in ms] + self._queued

    def add(self, delivery: Delivery) -> None:
        """``delivery``'s handler returned: acknowledge it with the next write (and count
        it with the batch's last)."""
        self._queued.append(delivery)
        if self._pooled:  # else acknowledged (and counted) by Subscription.ack
            self._handled += 1
            self._handled_ms += delivery.duration_ms or 0

    def count_settled(self, delivery: Delivery, settlement: Settlement) -> None:
        """``delivery``'s handler settled it itself (a Django task): count it in the trends
        with the batch's last write, as if it went through :meth:`add` or a failure."""
        outcome = settlement.outcome
        if outcome is Outcome.ACKED:
            counts = trends.handled_counts(self.sub.consumer, [delivery.duration_ms])
        elif outcome in (Outcome.RETRIED, Outcome.DEAD):
            counts = trends.settle_counts(
                self.sub.consumer, settlement.failed, outcome.value, delivery.duration_ms
            )
        else:
            return
        for name, n in counts.items():
            self._counts[name] = self._counts.get(name, 0) + n

    @translate_errors
    def send(self, mark: Delivery | None = None, *, counts: bool = False) -> None:
        """Write the queued acknowledgements (and ``mark``, the message about to start;
        with ``counts``, the trend counters of what was handled) now, without waiting
        for the reply."""
        acked = self._queued
        counted = counts and self._counter is not None and bool(self._counts or self._handled)
        if not acked and mark is None and not counted:
            return
        if not self._pooled:  # no single connection to pipeline on: synchronous
            self._run_now(mark)
            return
        if self._unread_writes >= MAX_UNREAD_WRITES:
            self._read_replies()
        packed_ack, script = self._packed_command(acked) if acked else (b"", None)
        data = packed_ack
        if counted:  # their replies are skipped too
            data += self._packed_counts()
        if mark is not None:  # its reply is skipped: only the ack's is read back
            data += self._packed.marked(mark)
        self._queued = []
        try:
            if acked:  # the one reply read back: the ack's (sent again after a NOSCRIPT)
                self._unread_writes += 1
                self._pipe.write_one(data, acked, script, packed_ack)
            else:
                self._pipe.write(data)
        except BaseException:
            self._read_replies()  # no reading: the failure (acknowledged again later)
            raise
        if counted:
            self._counts = {}

    @translate_errors
    def flush(self) -> None:
        """Write what is queued, with the batch's trend counters, and read every reply:
        when this returns, every handled message is acknowledged (and its
        ``after_settle`` hooks ran)."""
        self.send(counts=True)
        self._read_replies()
        self._pipe.release()

    def close(self) -> None:
        """Give the connection back (unread replies: it is closed instead)."""
        self._pipe.release()

    # -- internals ---------------------------------------------------------------------

    def _packed_command(self, deliveries: list[Delivery]) -> tuple[bytes, ScriptName | None]:
        """The acknowledgement of ``deliveries``, packed, and the script it calls (None:
        a plain ``XACK``)."""
        if len(deliveries) == 1 and not self.sub.ordered:  # the usual write: mostly prepacked
            m = deliveries[0]
            log = m.stream is Stream.LOG
            if not self.sub.history:
                if log:
                    return self._packed.xack.fill(m.entry_id), None
                return self._packed.direct.fill(m.entry_id), "ack"
            message = m.message
            records = b"[" + lifecycle.record(message.id, message.attempts, m.duration_ms) + b"]"
            template = self._packed.recorded if log else self._packed.recorded_direct
            return template.fill(m.entry_id, records), "ack"
        command, script = self._ack_command(deliveries)
        return packed(command), script

    def _ack_command(self, deliveries: list[Delivery]) -> tuple[tuple[Any, ...], ScriptName | None]:
        """The acknowledgement of ``deliveries`` and the script it calls (None: ``XACK``)."""
        settle = self.sub.settling.ack(deliveries)
        if settle.script is None:
            return ("XACK", *settle.keys, *settle.args), None
        return self.sub.scripts.command(settle.script, settle.keys, settle.args), settle.script

    def _packed_counts(self) -> bytes:
        """The trend counters of the batch, each after a ``CLIENT REPLY SKIP``."""
        assert self._counter is not None
        counts = self._counts
        if self._handled:  # into the batch's counts (kept there if the write fails)
            counts[self._handled_field] = counts.get(self._handled_field, 0) + self._handled
            counts[self._ms_field] = counts.get(self._ms_field, 0) + self._handled_ms
            self._handled = self._handled_ms = 0
        commands = self._counter.commands(counts)
        return skipping_replies(commands)

    def _mark_command(self, delivery: Delivery) -> tuple[Any, ...]:
        return ("HSET", self.sub.gkeys.running, self.sub.instance, started_tag(delivery))

    def _run_now(self, mark: Delivery | None) -> None:
        acked = self._queued
        if acked:
            self.sub.ack(acked)
            self._queued = []
            self._on_acked(acked)
        if mark is not None:
            execute(self.client, *self._mark_command(mark))
        if self._counts and self._counter is not None:  # what handlers settled themselves
            run_batch(
                self.client, [], transaction=False, quiet=self._counter.commands(self._counts)
            )
            self._counts = {}

    def _read_replies(self) -> None:
        """Read every reply: messages acknowledged go to ``on_acked``; the others are
        queued again (acknowledging twice is harmless), and the first failure raised."""
        failure: BaseException | None = None
        failed: list[Delivery] = []
        done: list[Delivery] = []
        self._unread_writes = 0
        for acked, reply in self._pipe.read():
            if isinstance(reply, BaseException):  # not acknowledged: send again
                failed += acked
                failure = failure or reply
            else:
                done += acked
        if done:  # one call per read, not one per write (a write per message)
            self.sub.report.handled += len(done)
            self._on_acked(done)
        if failure is None:
            return
        self._queued[:0] = failed
        if not isinstance(failure, redis.ResponseError) and self._counter is not None:
            self._counter.forget()  # the connection was lost: a write with an EXPIRE may be
        raise failure


def _bulk(value: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%b\r\n" % (len(value), value)


def _head(count: int, *parts: Any) -> bytes:
    """The start of a RESP command of ``count`` arguments: its header and ``parts``."""
    return b"*%d\r\n" % count + b"".join(_bulk(to_bytes(p)) for p in parts)


#: Stand-ins for what a prepacked command gets with each write: the entry id, and with
#: history the event's records.
_ID, _RECORDS = object(), object()
_STAND_INS = (_ID, _RECORDS)


class _Template:
    """A command packed once but for its stand-ins, which :meth:`fill` puts in."""

    def __init__(self, command: tuple[Any, ...]) -> None:
        parts: list[bytes] = []
        current = [b"*%d\r\n" % len(command)]
        for arg in command:
            if any(arg is stand_in for stand_in in _STAND_INS):
                parts.append(b"".join(current))
                current = []
            else:
                current.append(_bulk(to_bytes(arg)))
        parts.append(b"".join(current))
        # One %-format per write, the cheapest way to put a few values into bytes.
        self._format = b"$%d\r\n%b\r\n".join(p.replace(b"%", b"%%") for p in parts)

    def fill(self, first: bytes, second: bytes | None = None) -> bytes:
        """The command with ``first`` (and ``second``) in place of its stand-ins (an
        entry id; with history, then its records), in order. Spelt out, not a loop:
        once per message."""
        if second is None:
            return self._format % (len(first), first)
        return self._format % (len(first), first, len(second), second)


class _Prepacked:
    """What one instance's single-message writes share, packed once: a write per message
    is the worker's hot path, and hiredis would encode the same keys every time. Each is
    a command as ``Settling.call`` builds it, but for the entry (and with history its
    records), which each write puts in."""

    def __init__(self, sub: Subscription) -> None:
        gkeys, instance, scripts, settling = sub.gkeys, sub.instance, sub.scripts, sub.settling
        self.xack = _Template(("XACK", sub.keys.log, gkeys.group, _ID))  # + the entry id

        def template(stream: Stream, *, history: bool) -> _Template:
            event = settling.handled_event(_RECORDS) if history else []
            # (not ordered: the entry's message id and ordering key are not read)
            keys, args = settling.call([(stream, _ID, "", "")], event)
            return _Template(scripts.command("ack", keys, args))

        self.recorded = template(Stream.LOG, history=True)  # + the entry id, its records
        self.recorded_direct = template(Stream.DIRECT, history=True)  # + the same
        self.direct = template(Stream.DIRECT, history=False)  # + the entry id
        # The start record, after a CLIENT REPLY SKIP: one %-format per write, its tag
        # (the stream's prefix, then the entry id) written straight into the bulk.
        mark = (SKIP_REPLY + _head(4, "HSET", gkeys.running, instance)).replace(b"%", b"%%")
        self._marks = {
            stream: (mark + b"$%d\r\n" + prefix + b"%b\r\n", len(prefix))
            for stream, prefix in TAG_PREFIX.items()
        }

    def marked(self, delivery: Delivery) -> bytes:
        """``CLIENT REPLY SKIP`` and the record that ``delivery`` starts, packed."""
        template, extra = self._marks[delivery.stream]
        entry_id = delivery.entry_id
        return template % (len(entry_id) + extra, entry_id)
