"""One running instance of a logical consumer: fetch, settle (ack, fail, dead-letter,
release), extend, reclaim."""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from redisq_django.core import ended, leases, ordered, trends
from redisq_django.core import envelope as env
from redisq_django.core.clock import monotonic_ms
from redisq_django.core.config import CoreConfig
from redisq_django.core.dead_entry import DeadReason, Failure
from redisq_django.core.delivery import Delivery, Stream
from redisq_django.core.errors import RedisRefused, translate_errors
from redisq_django.core.groups import entries_of, leave_group
from redisq_django.core.instances import Report
from redisq_django.core.keys import QueueKeys
from redisq_django.core.message import Message, MessageFields
from redisq_django.core.outcome import Outcome, Settlement
from redisq_django.core.renamed import renamed_keyword
from redisq_django.core.replica_wait import ReplicaWait
from redisq_django.core.retry import RetryPolicy
from redisq_django.core.scripts import Scripts
from redisq_django.core.settle import Settle, Settling
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str

logger = logging.getLogger("redisq.worker")

#: After a refused promotion (a full Redis), wait this long before the next (ms).
PROMOTE_RETRY_MS = 1000


class Subscription:
    """An instance of logical consumer ``consumer`` on a queue (see ``Broker.subscribe``).

    Not thread-safe: give each thread its own (they may share the client).

    Attributes:
        policy: its retry policy; the worker replaces it when the admin changes it.
        settling: how it settles its deliveries: every settling script's call is built
            there (``core/settle.py``), and run here, or by the worker's ack pipe.
        dead_on_receive: dead letters it made while receiving (undecodable entries,
            leases expired past the retry budget), so far: its worker counts them.
        replica_wait: an ordered consumer's wait for replicas after each read (None:
            none; ``core/ordered.py``, ``core/replica_wait.py``).
        unreplicated: reads whose keyed messages went out although fewer replicas than
            ``replica_wait`` asked for confirmed them in time, so far: its worker
            counts them.
    """

    def __init__(
        self,
        *,
        client: RedisClient,
        scripts: Scripts,
        config: CoreConfig,
        keys: QueueKeys,
        consumer: str,
        instance: str,
        policy: RetryPolicy,
        ordered: bool = False,
        replica_wait: ReplicaWait | None = None,
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.config = config
        self.keys = keys
        self.queue = keys.queue
        self.gkeys = keys.group(consumer)
        self.consumer = consumer
        self.instance = instance
        self.policy = policy
        self.ordered = ordered  # one message of an ordering key out at a time (core/ordered.py)
        self.history = config.history  # on: each settle records its event (same script)
        self.settling = Settling(self.gkeys, instance, ordered=ordered, history=self.history)
        self._streams = {keys.log.encode(): Stream.LOG, self.gkeys.direct.encode(): Stream.DIRECT}
        #: When (``monotonic_ms()``) due delayed messages and retries should next be
        #: promoted: the next known due time, or one poll interval after the last check.
        self.next_promote_ms = 0
        self._cursors = ["0-0", "0-0"]
        self._rng = random.Random()
        #: What it reports with each heartbeat (its handled and failed counts among it).
        self.report = Report(self.gkeys, instance)
        self._call = trends.CountedCalls(client, scripts, keys, config.trends)
        self.dead_on_receive = 0
        self.replica_wait = replica_wait if ordered else None
        self.unreplicated = 0
        self._replicas_short = False  # the last wait that mattered timed out (logged)
        self._reader = ended.LogReader(client, scripts, self.gkeys)
        #: Log entries an operator ended that it read and settled without running
        #: (dead letters or deletions, ``core/ended.py``), so far.
        self.ended = 0

    def __repr__(self) -> str:
        return f"<Subscription {self.queue}/{self.consumer} as {self.instance}>"

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.leave()

    # -- receiving ---------------------------------------------------------------------

    @translate_errors
    def promote(self, now: int | None = None) -> int | None:
        """Move due delayed messages and retries into the streams.

        Redis's clock decides what is due; ``now`` (``monotonic_ms()``, which no step of
        this host's wall clock moves) only times the next call (``next_promote_ms``).

        Returns:
            When the next delayed message or retry is due (ms, Redis's clock), or None.
        """
        now = monotonic_ms() if now is None else now
        try:
            _, _, next_due, redis_now = self.scripts(
                "promote",
                [self.keys.delayed, self.keys.log, self.gkeys.retry, self.gkeys.direct],
                ["", self.config.script_batch],
            )
        except BaseException:
            # Set only on failure: the worker's main thread reads this attribute while a
            # handler thread promotes, and a "1 s from now" seen meanwhile made it sleep
            # through due times (p99 lateness 40-90 ms instead of ~2 ms).
            self.next_promote_ms = now + PROMOTE_RETRY_MS
            raise
        next_due = int(next_due)
        poll = now + self.config.poll_interval_ms
        wait = next_due - int(redis_now)  # by Redis's clock, whatever this host's says
        self.next_promote_ms = min(poll, now + max(0, wait)) if next_due >= 0 else poll
        return next_due if next_due >= 0 else None

    @translate_errors
    def fetch(self, count: int = 10, block_ms: int = 1000) -> list[Delivery]:
        """Receive up to ``count`` new messages from the log and up to ``count`` from the
        consumer's private input (retries, re-drives).

        Waits up to ``block_ms`` (0: do not wait) for the first one. Due delayed messages
        and retries are promoted on the way, so no separate scheduler is needed.
        Entries that are not valid envelopes become dead letters (reason
        ``undecodable``) and are not returned.

        Raises:
            ConsumerNotFound: the logical consumer is not registered.
        """
        # Monotonic: a wall-clock step back must not block the read past due times.
        deadline = monotonic_ms() + max(0, block_ms)
        while True:
            now = monotonic_ms()
            if now >= self.next_promote_ms:
                # A full Redis refuses promotions but serves reads and acks (reported).
                with contextlib.suppress(RedisRefused):
                    self.promote(now)
                now = monotonic_ms()
            wait = min(deadline, self.next_promote_ms) - now
            block = wait if wait > 0 else None
            if self.ordered:
                got = ordered.read_or_wait(
                    self.client,
                    self.scripts,
                    self.gkeys,
                    self.instance,
                    count,
                    block,
                    self.replica_wait,
                )
                deliveries = self._decode(got.reply)
                if got.confirmed is not None and any(m.key is not None for m in deliveries):
                    self._replicated(got.confirmed, len(deliveries))
                marked = got.marked
            else:
                reply, marked = self._reader.read(self.instance, count, block)
                deliveries = self._decode(reply)
            if marked and deliveries:
                deliveries = self._end_marked(deliveries)
            if deliveries or monotonic_ms() >= deadline:
                return deliveries

    def _end_marked(self, deliveries: list[Delivery]) -> list[Delivery]:
        """``deliveries`` without the log entries an operator ended for this consumer
        (``core/ended.py``): each of those becomes a dead letter (reason ``ended``) or is
        acknowledged (``delete``) without running, then its mark goes. A settle Redis
        refuses raises, and the entries stay pending with their marks: whoever takes
        them over asks again."""
        log = [d.entry_id for d in deliveries if d.stream is Stream.LOG]
        if not log:
            return deliveries
        marks = ended.marks_of(self.scripts, self.gkeys, log)
        if not marks:
            return deliveries
        kept, settled_ids = [], []
        for delivery in deliveries:
            mark = marks.get(delivery.entry_id) if delivery.stream is Stream.LOG else None
            if mark is None:
                kept.append(delivery)
                continue
            settle = self.settling.ended(delivery, mark.delete, mark.error_message)
            if self._call(settle.script, settle.keys, settle.args, settle.counts):
                self.dead_on_receive += not mark.delete
                self.ended += 1
                # A dead letter's settle (fail.lua) checked that this instance held it;
                # an acknowledgement does not, so a deleted entry's mark is left to the
                # sweep: an instance that took it over meanwhile still finds it.
                if not mark.delete:
                    settled_ids.append(delivery.entry_id)
            # else another instance took it over meanwhile (this one's lease ran out):
            # its mark stays, for that instance to find
        # After the settles: a crash before this leaves marks of settled entries, which
        # the sweep removes; never a marked entry without its mark.
        if settled_ids:
            self.client.hdel(self.gkeys.ended, *settled_ids)
        return kept

    def _replicated(self, confirmed: int, read: int) -> None:
        """Note how many replicas confirmed a read that let keyed messages out (logged
        when it starts falling short, and when replicas confirm again)."""
        assert self.replica_wait is not None
        wanted = self.replica_wait.replicas
        if confirmed >= wanted:
            if self._replicas_short:
                self._replicas_short = False
                logger.info(
                    "%s/%s: %d replica(s) confirm this instance's reads again",
                    self.queue,
                    self.consumer,
                    confirmed,
                )
            return
        self.unreplicated += 1
        if not self._replicas_short:
            self._replicas_short = True
            logger.warning(
                "%s/%s: only %d of %d replica(s) confirmed the read of %d message(s) within "
                "%d ms (WAIT); they run anyway, and so do later reads, each waiting as long "
                "(counted in redisq_replica_wait_timeouts_total): until replicas confirm "
                "again, a failover may run a key's earlier message again after them",
                self.queue,
                self.consumer,
                confirmed,
                wanted,
                read,
                self.replica_wait.timeout_ms,
            )

    def _decode(self, reply: Any) -> list[Delivery]:
        deliveries = []
        streams = self._streams
        for key, entry_id, fields in entries_of(reply):
            delivery = self._delivery(streams[key], entry_id, fields, 1)
            if delivery is not None:
                deliveries.append(delivery)
        return deliveries

    def _delivery(
        self, stream: Stream, entry_id: bytes, fields: Any, delivery_count: int
    ) -> Delivery | None:
        if isinstance(fields, list):  # flat: a script's reply, or a read's through a Pipe
            pairs = iter(fields)  # (no slices: two lists fewer per message)
            fields = dict(zip(pairs, pairs, strict=False))
        try:
            parts = env.decode(entry_id, fields)
        except env.UndecodableEntry as exc:
            settle = self.settling.undecodable(stream, entry_id, fields or {}, str(exc))
            if self._run(settle).outcome is Outcome.DEAD:
                self.dead_on_receive += 1
            return None
        # Positional: once per message fetched, where keywords cost a measurable share.
        # Built writable, then frozen by its class (core/message.py: a frozen
        # dataclass's __init__ costs about 1.3 µs more per message).
        message: Any = MessageFields(
            parts.id,
            self.queue,
            parts.payload,
            parts.headers,
            parts.attempts + delivery_count,  # attempts
            self.consumer,
            parts.published_at_ms,
            parts.due_at_ms,
            parts.first_failed_at_ms,
            parts.failures,
            self.instance,
            parts.key,
        )
        message.__class__ = Message
        return Delivery(message, stream, entry_id, fields, self.policy)

    # -- settling ----------------------------------------------------------------------

    @renamed_keyword("messages", "deliveries")
    @translate_errors
    def ack(self, deliveries: Iterable[Delivery]) -> int:
        """Acknowledge handled deliveries (one round trip for the batch, with their trend
        counters and, history on, their ``handled`` event).

        Returns:
            How many were still pending (the rest were acknowledged already).
        """
        batch = list(deliveries)
        if not batch:
            return 0
        settle = self.settling.ack(batch)
        self.report.handled += len(batch)
        counts = trends.handled_counts(self.consumer, (m.duration_ms for m in batch))
        return int(self._call(settle.script, settle.keys, settle.args, counts))

    @renamed_keyword("message", "delivery")
    @translate_errors
    def fail(self, delivery: Delivery, failure: Failure | BaseException) -> Settlement:
        """Settle a failed delivery: retry after a backoff, or dead-letter it.

        The delivery is retried while it has had fewer than ``max_retries + 1``
        deliveries; otherwise it becomes a dead letter (reason ``failed``) with the
        error class, message and traceback of ``failure`` (or of the exception).

        Returns:
            Its settlement: ``RETRIED`` (with its backoff), ``DEAD`` (with the reason),
            or ``LOST`` when this instance no longer holds the delivery (its lease
            expired; the instance that took it over settles it).
        """
        return self._run(
            self.settling.failure(delivery, Failure.of(failure), self.policy, self._rng)
        )

    @renamed_keyword("message", "delivery")
    @translate_errors
    def dead_letter(
        self, delivery: Delivery, failure: Failure | BaseException, reason: DeadReason
    ) -> Settlement:
        """Make ``delivery`` a dead letter now, whatever its retry budget.

        Returns:
            Its settlement: ``DEAD`` (for ``reason``), or ``LOST`` when this instance no
            longer holds the delivery.
        """
        return self._run(self.settling.dead(delivery, Failure.of(failure), reason))

    @renamed_keyword("message", "delivery")
    def reject(self, delivery: Delivery, failure: Failure | BaseException) -> Settlement:
        """Dead-letter ``delivery`` at once, without retries (reason ``rejected``)."""
        return self.dead_letter(delivery, failure, DeadReason.REJECTED)

    @renamed_keyword("messages", "deliveries")
    @translate_errors
    def release(self, deliveries: Sequence[Delivery]) -> int:
        """Hand fetched-but-unstarted deliveries back at once (graceful shutdown).

        Each goes to the consumer's retry set due now, without counting an attempt, so
        another instance receives it within one poll interval instead of waiting for the
        visibility timeout. Returns how many were released (held by this instance).
        """
        runs = (self._run(self.settling.release(d)) for d in deliveries)
        return sum(r.outcome is not Outcome.LOST for r in runs)

    @translate_errors
    def defer(self, deliveries: Sequence[tuple[Delivery, int]]) -> int:
        """Hand fetched-but-unstarted deliveries back until their turn: each to the
        consumer's retry set due that many ms after Redis's now, without counting an
        attempt (its ordering key's rate limit, ``core/limits.py``). An ordered
        consumer's key stays held by it. Returns how many were deferred."""
        runs = (self._run(self.settling.release(d, after_ms)) for d, after_ms in deliveries)
        return sum(r.outcome is not Outcome.LOST for r in runs)

    def _run(self, settle: Settle) -> Settlement:
        """Run ``settle`` with its trend counters, in one write: its settlement, or
        ``LOST`` when this instance no longer held the delivery."""
        self.report.failed += settle.failures
        settled = self._call(settle.script, settle.keys, settle.args, settle.counts)
        return settle.settled if settled else Settlement.lost()

    @renamed_keyword("messages", "deliveries")
    @translate_errors
    def extend(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Renew the lease (visibility timeout) of deliveries still being handled: the
        consumer's, or a delivery's own (``lease_ms``, ``core/leases.py``).

        Returns:
            The deliveries another instance holds now (it took them over after the lease
            expired) and will settle. Messages settled meanwhile are not reported.
        """
        own = [m for m in deliveries if m.lease_ms]
        lost: set[bytes] = set()
        if own:
            lost.update(self.scripts("lease", *leases.renew_call(self.gkeys, self.instance, own)))
        log = [m.entry_id for m in deliveries if m.stream is Stream.LOG and not m.lease_ms]
        direct = [m.entry_id for m in deliveries if m.stream is not Stream.LOG and not m.lease_ms]
        if log or direct:
            keys = [self.keys.log, self.gkeys.direct]
            args = [self.consumer, self.instance, len(log), *log, *direct]
            lost.update(self.scripts("extend", keys, args))
        return [m for m in deliveries if m.entry_id in lost]

    @translate_errors
    def reclaim(self, count: int = 100) -> list[Delivery]:
        """Take over messages whose lease expired or whose instance is known dead.

        A takeover counts a delivery only for a message whose handler started (see
        ``reclaim.lua``). A message started more than ``max_retries + 1`` times without
        ever being settled (instances keep crashing on it) becomes a dead letter (reason
        ``lease_expired``) instead of being returned; deliveries its envelope counts as
        ``failures`` (a task's failed attempts, settled) are not crashes.
        """
        gkeys = self.gkeys
        keys = [self.keys.log, gkeys.direct, gkeys.instances, gkeys.running, gkeys.leases]
        if self.history:  # the script records a `reclaimed` event for what it takes
            keys.append(self.keys.events)
        cur_log, cur_direct, log_entries, direct_entries = self.scripts(
            "reclaim",
            keys,
            [
                self.consumer,
                self.instance,
                self.policy.visibility_timeout_ms,
                count,
                "",  # "now" is Redis's clock (the script reads TIME)
                self._cursors[0],
                self._cursors[1],
            ],
        )
        self._cursors = [to_str(cur_log), to_str(cur_direct)]
        out: list[Delivery] = []
        for stream, entries in ((Stream.LOG, log_entries), (Stream.DIRECT, direct_entries)):
            for entry_id, fields, deliveries in entries:
                delivery = self._delivery(stream, entry_id, fields, int(deliveries))
                if delivery is None:
                    continue
                if not self.policy.should_retry(delivery.attempts - 1 - delivery.failures):
                    # This claim is not a delivery: the dead letter records the
                    # deliveries actually made (max_retries + 1 crashes, and failures).
                    delivery.message = replace(delivery.message, attempts=delivery.attempts - 1)
                    failure = Failure.lease_expired(delivery.attempts, delivery.failures)
                    dead = self.dead_letter(delivery, failure, DeadReason.LEASE_EXPIRED)
                    self.dead_on_receive += dead.outcome is Outcome.DEAD
                    continue
                out.append(delivery)
        # An instance that crashed may have held marked entries: asked again here.
        return self._end_marked(out) if out else out

    # -- liveness ----------------------------------------------------------------------

    @translate_errors
    def heartbeat(self, ttl_ms: int, running: Delivery | None = None) -> None:
        """Announce this instance alive for ``ttl_ms`` by Redis's clock (``heartbeat.lua``),
        with its report (``running``: the message its handler runs); once that passes
        without a new heartbeat, others take over its messages at once."""
        self.scripts("heartbeat", *self.report.heartbeat_call(ttl_ms, running))

    @translate_errors
    def waiting_retries(self) -> int:
        """Failed messages of this logical consumer waiting for their backoff."""
        return int(self.client.zcard(self.gkeys.retry))

    @translate_errors
    def leave(self) -> None:
        """Withdraw this instance (``groups.leave_group``)."""
        leave_group(self.client, self.gkeys, self.instance)
