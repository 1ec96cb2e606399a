"""Settling deliveries: what becomes of each (acknowledged, retried after its backoff,
dead-lettered, handed back), and every call of the settling scripts (``ack.lua``,
``ack_ordered.lua``, ``fail.lua``, ``task_settle.lua``), built here in their one layout
(PROTOCOL.md, "The settle layout") with what it writes: the envelope of a message's next
delivery or its dead letter, its lifecycle event and its trend counts. Built without
touching Redis; whoever runs it (a subscription, the worker's ack pipe, the task store,
its pipe) runs it as built."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from random import Random
from typing import Any

from redisq_django.core import envelope as env
from redisq_django.core import lifecycle, trends
from redisq_django.core.clock import now_ms
from redisq_django.core.dead_entry import DeadReason, Failure, dead_fields, undecodable_fields
from redisq_django.core.delivery import Delivery, Stream
from redisq_django.core.keys import GroupKeys
from redisq_django.core.lifecycle import EventName
from redisq_django.core.outcome import ACKED, Settlement
from redisq_django.core.retry import RetryPolicy
from redisq_django.core.scripts import ScriptName
from redisq_django.core.wire import flatten

#: What ``fail.lua`` (and ``task_settle.lua``) make of an entry: a retry member, or a
#: dead letter (``task_settle.lua``: or an acknowledgement).
RETRY, DEAD, ACK = "retry", "dead", "ack"

#: One entry as a settle names it: the stream it was read from, its entry id, and for an
#: ordered consumer its message id and ordering key as stored ("": none; both "" for a
#: consumer that is not ordered, whose settles read neither).
Entry = tuple[Stream, Any, Any, Any]


@dataclass(frozen=True, slots=True)
class Settle:
    """One settle, built: what a caller runs (``trends.CountedCalls``, a pipe).

    Attributes:
        script: the settling script; None for a plain ``XACK <log> <group> <ids…>``
            (log entries of a consumer that is not ordered, history off: cheaper for
            Redis too).
        keys: its KEYS (of ``XACK``: the log).
        args: its ARGV without the protocol token (of ``XACK``: the group and the ids).
        counts: what it adds to the queue's trends (``core/trends.py``).
        settled: the settlement once the script settled it (else: ``LOST``, another
            instance holds the delivery now).
        failures: how many of its deliveries' handlers raised (the instance's report).
    """

    script: ScriptName | None
    keys: list[str]
    args: list[Any]
    counts: dict[str, int]
    settled: Settlement = ACKED
    failures: int = 0


class Settling:
    """How one instance of a logical consumer settles its deliveries: the calls of the
    settling scripts, built here and nowhere else.

    Args:
        gkeys: the logical consumer's keys.
        instance: the instance that settles (a failure is settled only while the entry
            is pending for it).
        ordered: an ordered consumer (its acknowledgements and dead letters hand ordering
            keys on).
        history: history on (each settle writes its lifecycle event, in the same script).
    """

    __slots__ = ("_handled", "_head", "consumer", "gkeys", "history", "instance", "keys", "ordered")

    def __init__(
        self, gkeys: GroupKeys, instance: str, *, ordered: bool = False, history: bool = False
    ) -> None:
        qkeys = gkeys.queue_keys
        self.gkeys, self.consumer, self.instance = gkeys, gkeys.group, instance
        self.ordered, self.history = ordered, history
        #: KEYS of every settle (PROTOCOL.md, "The settle layout"), built once.
        self.keys = [
            qkeys.log,
            gkeys.direct,
            gkeys.retry,
            gkeys.dead,
            gkeys.holders,
            gkeys.held_back,
            qkeys.events,
        ]
        self._head = (gkeys.group, instance, gkeys.waiting_prefix if ordered else "")
        self._handled = [b"e", b"handled", b"g", gkeys.group.encode(), b"c", instance.encode()]

    def call(
        self,
        entries: Iterable[Entry],
        event: Sequence[Any] = (),
        own: Sequence[Any] = (),
        extra_keys: Sequence[str] = (),
    ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of a settling script: the one place they are built.

        Args:
            entries: the entries it settles.
            event: its lifecycle event's field, value pairs (none: history off).
            own: the script's own arguments, after the event.
            extra_keys: the script's own keys, after the layout's (``task_settle.lua``).
        """
        args: list[Any] = [*self._head, 0]
        for stream, entry_id, message_id, key in entries:
            args += ("log" if stream is Stream.LOG else "direct", entry_id, message_id, key)
        args[3] = (len(args) - 4) // 4  # m
        args.append(len(event) // 2)
        args += event
        args += own
        return [*self.keys, *extra_keys], args

    def entry(self, delivery: Delivery) -> Entry:
        """``delivery`` as this consumer's settles name it."""
        if not self.ordered:
            return delivery.stream, delivery.entry_id, "", ""
        message = delivery.message
        return delivery.stream, delivery.entry_id, message.id, message.key or ""

    def entries(self, deliveries: Sequence[Delivery]) -> Iterable[Entry]:
        """``deliveries`` as this consumer's settles name them (:meth:`entry` of each)."""
        if not self.ordered:
            return ((d.stream, d.entry_id, "", "") for d in deliveries)
        return ((d.stream, d.entry_id, d.message.id, d.message.key or "") for d in deliveries)

    # -- acknowledgements --------------------------------------------------------------

    def handled_event(self, records: Any) -> list[Any]:
        """The ``handled`` event of an acknowledgement whose records (one JSON array,
        ``lifecycle.records_array``) are ``records``: ``m`` last, as ``ack.lua`` rewrites
        it when only some entries were still pending."""
        return [*self._handled, b"m", records]

    def ack(self, deliveries: Sequence[Delivery]) -> Settle:
        """The acknowledgement of handled ``deliveries`` (``ack.lua``, ``ack_ordered.lua``,
        or a plain ``XACK`` where that does the same). Its trend counts are the caller's
        (``trends.handled_counts``): the worker's ack pipe counts a batch at once."""
        if not (self.history or self.ordered) and all(d.stream is Stream.LOG for d in deliveries):
            ids = [d.entry_id for d in deliveries]
            return Settle(None, [self.keys[0]], [self.consumer, *ids], {})
        event: list[Any] = []
        if self.history:
            records = [(d.message.id, d.message.attempts, d.duration_ms) for d in deliveries]
            event = self.handled_event(lifecycle.records_array(records))
        keys, args = self.call(self.entries(deliveries), event)
        return Settle("ack_ordered" if self.ordered else "ack", keys, args, {})

    # -- failures (fail.lua) -----------------------------------------------------------

    def failure(
        self, delivery: Delivery, failure: Failure, policy: RetryPolicy, rng: Random
    ) -> Settle:
        """A delivery whose handler raised: retried after ``policy``'s backoff while it
        has had fewer than ``max_retries + 1`` deliveries, else a dead letter (reason
        ``failed``) with ``failure``'s error class, message and traceback."""
        attempts = delivery.message.attempts
        if not policy.should_retry(attempts):
            return self.dead(delivery, failure, DeadReason.FAILED)
        wait_ms = max(1, int(policy.backoff(attempts, rng) * 1000))
        return self.retry(delivery, failure, wait_ms)

    def retry(self, delivery: Delivery, failure: Failure, wait_ms: int) -> Settle:
        """A failed delivery retried ``wait_ms`` after Redis's now (the script makes the
        due time by Redis's clock, and adds it to the ``retried`` event)."""
        fields = next_delivery(delivery, now_ms(), failed=True, error=failure)
        event = self._event(EventName.RETRIED, delivery, failure=failure)
        counts = trends.settle_counts(
            self.consumer, True, trends.RETRIED, delivery.duration_ms, failure.error_class
        )
        keys, args = self._fail(self.entry(delivery), RETRY, f"+{wait_ms}", fields, event)
        return Settle("fail", keys, args, counts, Settlement.retried(wait_ms), failures=1)

    def dead(self, delivery: Delivery, failure: Failure, reason: DeadReason) -> Settle:
        """``delivery`` made a dead letter now, for ``reason``."""
        now = now_ms()  # the failure time kept for the operators: this host's clock
        fields = dead_fields(
            next_delivery(delivery, now, failed=True),
            consumer=self.consumer,
            reason=reason,
            failure=failure,
            failed_at_ms=now,
        )
        event = self._event(EventName.DEAD, delivery, failure=failure, reason=reason)
        ran = reason in (DeadReason.FAILED, DeadReason.REJECTED)  # its handler raised
        counts = trends.settle_counts(
            self.consumer, ran, trends.DEAD, delivery.duration_ms, failure.error_class
        )
        keys, args = self._fail(self.entry(delivery), DEAD, 0, fields, event)
        return Settle("fail", keys, args, counts, Settlement.dead(reason), failures=int(ran))

    def ended(self, delivery: Delivery, delete: bool, error_message: str) -> Settle:
        """A log entry an operator ended before this consumer read it (``core/ended.py``),
        settled without running: acknowledged (``delete``: no ``handled`` event, it never
        ran), or a dead letter (reason ``ended``, error class ``Ended``) whose attempts
        do not count this delivery. An ordered consumer's entry was delivered without
        taking its key (``read_ordered.lua``): nothing is handed on."""
        if delete:
            if not (self.history or self.ordered):
                return Settle(None, [self.keys[0]], [self.consumer, delivery.entry_id], {})
            keys, args = self.call(self.entries([delivery]), [])
            return Settle("ack_ordered" if self.ordered else "ack", keys, args, {})
        now = now_ms()
        failure = Failure("Ended", error_message)
        fields = dead_fields(
            next_delivery(delivery, now, failed=False),
            consumer=self.consumer,
            reason=DeadReason.ENDED,
            failure=failure,
            failed_at_ms=now,
        )
        event = self._event(EventName.DEAD, delivery, failure=failure, reason=DeadReason.ENDED)
        counts = trends.settle_counts(self.consumer, False, trends.DEAD, 0, failure.error_class)
        keys, args = self._fail(self.entry(delivery), DEAD, 0, fields, event)
        return Settle("fail", keys, args, counts, Settlement.dead(DeadReason.ENDED))

    def release(self, delivery: Delivery, after_ms: int = 0) -> Settle:
        """A fetched-but-unstarted delivery handed back: due now, or ``after_ms`` after
        Redis's now (its ordering key's rate limit: its turn), this delivery not counted
        (it never ran)."""
        fields = next_delivery(delivery, now_ms(), failed=False)
        event = self._event(EventName.RELEASED, delivery, handed_back=True)
        due: int | str = f"+{after_ms}" if after_ms > 0 else 0
        keys, args = self._fail(self.entry(delivery), RETRY, due, fields, event)
        return Settle("fail", keys, args, {}, Settlement.retried(max(0, after_ms)))

    def undecodable(
        self, stream: Stream, entry_id: bytes, fields: Mapping[bytes, bytes], reason: str
    ) -> Settle:
        """An entry that is no valid envelope, made a dead letter as it was read. Its key
        and id are passed as stored, also when they are not UTF-8: an ordered consumer's
        read made it hold that key, which it hands on."""
        dead = undecodable_fields(
            entry_id, fields, consumer=self.consumer, reason=reason, now=now_ms()
        )
        event: list[bytes] = []
        if self.history:
            event = lifecycle.fields(
                EventName.DEAD,
                self.consumer,
                self.instance,
                [lifecycle.record(entry_id.decode(), 1)],
                failure=Failure("UndecodableEntry", reason),
                reason=DeadReason.UNDECODABLE,
            )
        counts = trends.settle_counts(self.consumer, False, trends.DEAD, None)
        entry: Entry = (stream, entry_id, "", "")
        if self.ordered:
            entry = (stream, entry_id, fields.get(env.F_ID) or entry_id, fields.get(env.F_KEY, b""))
        keys, args = self._fail(entry, DEAD, 0, dead, event)
        return Settle("fail", keys, args, counts, Settlement.dead(DeadReason.UNDECODABLE))

    def _event(
        self, name: EventName, delivery: Delivery, *, handed_back: bool = False, **details: Any
    ) -> list[bytes]:
        """The event of a failure's settle, or nothing when history is off; a delivery
        ``handed_back`` unstarted did not count, nor run."""
        if not self.history:
            return []
        m = delivery.message
        if handed_back:
            record = lifecycle.record(m.id, m.attempts - 1)
        else:
            record = lifecycle.record(m.id, m.attempts, delivery.duration_ms)
        return lifecycle.fields(name, self.consumer, self.instance, [record], **details)

    def _fail(
        self,
        entry: Entry,
        mode: str,
        due: int | str,
        fields: Mapping[bytes, bytes],
        event: Sequence[bytes],
    ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of ``fail.lua``: ``entry`` made a retry due at ``due`` (ms, or
        ``"+<ms>"`` after Redis's now) or a dead letter, with ``fields``."""
        return self.call([entry], event, [mode, due, *flatten(fields)])


def next_delivery(
    delivery: Delivery, now: int, *, failed: bool, error: Failure | None = None
) -> dict[bytes, bytes]:
    """The envelope of ``delivery``'s next delivery: a retry (``failed``: this delivery
    counts, its failure time is the first one if none was recorded; ``error``: what the
    operators' pages show as its last error) or a hand-back."""
    m = delivery.message
    first = m.first_failed_at_ms
    fields = env.next_delivery_fields(
        delivery.fields,
        message_id=m.id,
        published_at_ms=m.published_at_ms,
        attempts=m.attempts - (0 if failed else 1),
        first_failed_at_ms=first if first is not None or not failed else now,
    )
    if error is not None:
        text = f"{error.error_class}: {error.message}"[: env.MAX_LAST_ERROR]
        fields[env.F_LAST_ERROR] = text.encode("utf-8", "backslashreplace")
    return fields
