"""Handler threads: one instance of a logical consumer each (fetch, handle, settle).

A thread gets its collaborators (subscription, stop signal, budget, middleware, counters,
a crash callback) and knows nothing of the worker that started it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import cast

import redis

from redisq_django.core.dead_entry import Failure
from redisq_django.core.delivery import Delivery
from redisq_django.core.errors import ConsumerNotFound
from redisq_django.core.groups import register
from redisq_django.core.handler import (
    DUPLICATE,
    ConsumerSpec,
    Reject,
    Settled,
    settles_itself,
)
from redisq_django.core.limits import Tokens
from redisq_django.core.outcome import ACKED, Outcome, Settlement
from redisq_django.core.start import StartPoint
from redisq_django.core.subscription import Subscription
from redisq_django.core.wire import loggable
from redisq_django.core.worker.acks import AckPipe
from redisq_django.core.worker.crew import Crew
from redisq_django.core.worker.flow import Flow
from redisq_django.core.worker.middleware import MiddlewareChain
from redisq_django.core.worker.priority import GATE_POLL_S, GateSlot
from redisq_django.core.worker.refusals import TEMPORARY, Condition
from redisq_django.core.worker.state import Pace, Quota, StopSignal, Tally
from redisq_django.core.worker.time_limits import Watch, exceeded

logger = logging.getLogger("redisq.worker")

#: A handler thread's first batch size; it adapts between 1 and ``prefetch``.
INITIAL_BATCH = 10
#: A full batch handled faster than this doubles the next one (seconds)...
FAST_BATCH_S = 0.25
#: ...and a batch slower than this halves it.
SLOW_BATCH_S = 2.0
#: In burst mode, how long a fetch waits before concluding the queue is drained (ms).
BURST_BLOCK_MS = 100
#: Only the running message's lease is renewed: a batch older than this fraction of the
#: visibility timeout hands back what it has not started (other instances may be taking
#: it over) instead of starting it. A third, as leases are renewed every third, so that a
#: message started late in its batch still keeps a third of its timeout as a margin.
STALE_BATCH_FRACTION = 1 / 3


class HandlerThread(threading.Thread):
    """One instance of a logical consumer: fetch, handle, settle, repeat."""

    def __init__(
        self,
        *,
        spec: ConsumerSpec,
        sub: Subscription,
        index: int | str,
        stop: StopSignal,
        pace: Pace,
        quota: Quota,
        hooks: MiddlewareChain,
        tally: Tally,
        on_crash: Callable[[HandlerThread, BaseException], None],
        gate: GateSlot | None = None,
        crew: Crew | None = None,
        flow: Flow | None = None,
    ) -> None:
        super().__init__(name=f"redisq-{spec.queue}-{spec.name}-{index}", daemon=True)
        self.sub = sub
        self.spec = spec
        self.apply(spec)
        self.stop_signal = stop
        self.pace = pace
        self.quota = quota
        self.hooks = hooks
        self.tally = tally
        self.on_crash = on_crash
        self.gate = gate  # a priority level: fetch only when higher levels hold no work
        self.crew = crew  # the consumer's threads (it joins them): a spare waits its turn
        self.flow = flow  # the consumer's limits: rate tokens and slots (core/worker/flow.py)
        self.slots_held = 0  # of the consumer's max_in_flight slots (changed by the flow)
        self.held_back = False  # the last receive fetched nothing as the limits said so
        self._place_idle = False  # with limits: the last look found its place empty
        self.finished = False  # run() returned
        self.held: list[Delivery] = []  # the running message (its lease is renewed)
        self.acks = AckPipe(sub, self._acked)  # each message acked as its handler returns
        self.retire = False  # finish the current batch, then exit (concurrency lowered)
        self._unsettled: list[Callable[[], None]] = []
        self._settle_failed = False  # a settlement waits for Redis (to log its return)
        self._last_reclaim = 0.0
        self._counted: dict[str, int] = {}  # of what the subscription counts itself
        self._batch_size = min(INITIAL_BATCH, pace.prefetch)
        self.watch = Watch()  # the running handler, for its time limit

    def apply(self, spec: ConsumerSpec) -> None:
        """Use ``spec`` (changed in the admin) from the next message on."""
        self.spec = spec
        self.sub.policy = spec.policy
        # A handler gets the message; one that settles its delivery itself (a Django
        # task's, see ``settles_itself``) gets the delivery, which it settles.
        self._handles_delivery = settles_itself(spec.handler)

    @property
    def stopping(self) -> bool:
        return self.stop_signal.is_set() or self.retire

    @property
    def instance(self) -> str:
        return self.sub.instance

    def _count(self, what: str, n: int = 1) -> None:
        self.tally.add(self.spec.queue, self.spec.name, what, n)

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a bug or a failing hook: the thread is gone
            logger.exception(
                "Handler thread %s crashed; its messages will be redelivered", self.name
            )
            self.on_crash(self, exc)
        finally:
            if self.gate is not None:
                self.gate.report(busy=False)  # a stopped level holds back no other
            self._return_slots(0)
            try:
                if not self.stop_signal.cold:
                    self.acks.flush()  # warm: everything handled is acked before leaving
                    self.sub.leave()
            except Exception:  # Redis gone at shutdown: the heartbeat simply expires
                logger.debug("Could not leave the consumer group cleanly", exc_info=True)
            finally:
                self.acks.close()
                self.finished = True
                if self.crew is not None:
                    self.crew.wake()  # a spare takes this thread's place

    def _loop(self) -> None:
        # Redis refusing (down, full, read-only, loading, group gone...) is a condition
        # to wait out, logged once: this thread keeps acking and fetching what it can.
        redis_state = Condition(self.sub, logger)
        while not self.stopping:
            try:
                self._flush_unsettled()
                if self.spec.paused or self.quota.exhausted:
                    if self.quota.exhausted:
                        return
                    self._return_slots(0)  # a paused consumer holds none
                    if self.gate is not None:
                        self.gate.report(busy=False)  # a paused level holds back no other
                    self.stop_signal.wait(0.2)
                    continue
                if self.gate is not None and not self.gate.may_fetch():
                    self.stop_signal.wait(GATE_POLL_S)
                    continue
                if self.crew is not None and not self.crew.may_fetch(self):
                    if self.pace.burst and self.crew.drained:
                        return  # a crew-mate found the queue drained: nothing to help with
                    if self.gate is not None:
                        self.gate.report(busy=False)  # a waiting spare holds back no level
                    self._return_slots(0)
                    self.crew.wait_turn(lambda: self.stopping)
                    continue
                fetched_at = time.monotonic()  # the leases start later than this
                batch = self._receive()
                if self.gate is not None:
                    self.gate.report(busy=bool(batch))
                if not batch and self.pace.burst and not self.held_back and self._drained():
                    # A retry promoted between that fetch and the count in _drained() is
                    # in the direct stream now: a burst ends only when a look finds none.
                    batch = self._look_again()
                    if not batch and not self.held_back:
                        if self.crew is not None:
                            self.crew.drained = True
                        return
                redis_state.ok()
            except TEMPORARY as exc:
                wait = redis_state.failed(exc)
                if isinstance(exc, ConsumerNotFound) and self._register_again(redis_state):
                    continue
                self.stop_signal.wait(wait)
                continue
            if batch:
                self._process(batch, fetched_at)
            self._return_slots(0)  # its handlers ran one at a time, on one slot

    def _register_again(self, redis_state: Condition) -> bool:
        """Re-create the missing consumer group; False when Redis refused (wait, retry).

        The group is gone because Redis came back empty (a restart without persistence,
        an evicting Redis) or someone removed it. It is created again at the start of
        what the log holds now, whatever the consumer's start point: after data loss the
        log is new, and at-least-once prefers a message delivered again to one skipped.
        """
        sub = self.sub
        try:  # (a partition's record of the layout, lost too, is recorded again)
            register(sub.client, sub.scripts, sub.gkeys, StartPoint.parse("earliest"))
        except (redis.RedisError, *TEMPORARY) as exc:
            redis_state.failed(exc)
            return False
        return True

    def _receive(self) -> list[Delivery]:
        self.held_back = False
        try:
            flow = self.flow
            if flow is None or not flow.active:
                return self._fetch_or_reclaim(self._batch_size, self._block_ms())
            return self._receive_limited(flow)
        finally:
            self._count_on_receive()

    def _receive_limited(self, flow: Flow) -> list[Delivery]:
        """Fetch no more than the consumer's limits let this thread start now: a slot,
        its handlers running one at a time, and a rate token per message."""
        if flow.rate is None and flow.slots is None:  # a rate per key only: checked after
            batch = self._fetch_or_reclaim(self._batch_size, self._block_ms())
            return self._keep_to_key_rates(flow, batch)
        if self._place_idle:  # the last look found none: wait for one, holding nothing
            return self._keep_to_key_rates(flow, self._wait_for_one(flow))
        if flow.slots is not None and not self.slots_held and not flow.take_slots(self, 1):
            self.held_back = True
            return []
        tokens = Tokens(self._batch_size)
        if flow.rate is not None:
            tokens = flow.take_tokens(self, tokens.count)
            if not tokens.count:
                self.held_back = True
                return []
        # Never waiting for messages while holding a slot or tokens: held idle, they would
        # keep others from running what comes, and tokens would pile up into a burst.
        batch = self._fetch_or_reclaim(tokens.count, 0)
        self._place_idle = not batch  # the next look waits for a message, holding nothing
        batch = self._keep_to_key_rates(flow, batch)
        flow.give_tokens(tokens, len(batch))
        return batch

    def _keep_to_key_rates(self, flow: Flow, batch: list[Delivery]) -> list[Delivery]:
        """``batch`` but for the messages over their ordering key's rate, handed back
        until their turn (no attempt counted)."""
        if flow.key_rates is None or not batch:
            return batch
        over = flow.key_turns(batch)
        if not over:
            return batch
        self._settle(functools.partial(self._defer, over))
        self.held_back = True  # the queue is not drained: they come back
        deferred = {id(d) for d, _ in over}
        return [d for d in batch if id(d) not in deferred]

    def _wait_for_one(self, flow: Flow) -> list[Delivery]:
        """Wait for the next message of this thread's place holding no slot and no
        token, then for them (``Flow.admit_fetched``). A place that stays empty costs no
        slot and no token: threads of a partitioned queue's idle partitions wait here."""
        self._return_slots(0)
        batch = self._fetch_or_reclaim(1, self._block_ms())
        if not batch:
            return []
        self._place_idle = False
        if not flow.admit_fetched(self, self.spec.policy.visibility_timeout_ms):
            self._settle(functools.partial(self._release, batch))  # its turn is too far
            return []
        return batch

    def _defer(self, over: list[tuple[Delivery, int]]) -> None:
        self.sub.defer(over)

    def _return_slots(self, keep: int) -> None:
        """Give back the slots this thread holds beyond ``keep`` (Redis refusing: they
        are given back at the next call, or their leases end)."""
        if self.slots_held > keep and self.flow is not None:
            try:
                self.flow.give_slots(self, self.slots_held - keep)
            except (redis.RedisError, *TEMPORARY) as exc:
                logger.debug("%s could not give back its slots yet: %s", self.sub.instance, exc)

    def _count_on_receive(self) -> None:
        # Undecodable entries and leases expired past the budget die inside fetch and
        # reclaim, not in a settle of ours, and an ordered consumer's reads may go out
        # unconfirmed by its replicas: count them too, at two comparisons per fetch.
        sub = self.sub
        for what, total in (("dead", sub.dead_on_receive), ("unreplicated", sub.unreplicated)):
            made = total - self._counted.get(what, 0)
            if made:
                self._counted[what] = total
                self._count(what, made)

    def _fetch_or_reclaim(self, count: int, block_ms: int) -> list[Delivery]:
        now = time.monotonic()
        if now - self._last_reclaim >= self.pace.reclaim_interval:
            self._last_reclaim = now
            reclaimed = self.sub.reclaim(count)
            if reclaimed:
                self._count("reclaimed", len(reclaimed))
                logger.info(
                    "%s took over %d message(s) of stopped instances",
                    self.sub.instance,
                    len(reclaimed),
                )
                return reclaimed
        return self.sub.fetch(count=count, block_ms=block_ms)

    def _look_again(self) -> list[Delivery]:
        """One more fetch that does not wait (the end of a burst), within the limits."""
        if self.flow is not None and self.flow.active:
            return self._receive()
        try:
            return self.sub.fetch(count=self._batch_size, block_ms=0)
        finally:
            self._count_on_receive()

    def _block_ms(self) -> int:
        """How long the next fetch waits for a first message (ms)."""
        return min(self.pace.block_ms, BURST_BLOCK_MS) if self.pace.burst else self.pace.block_ms

    def _drained(self) -> bool:
        return not self._unsettled and not self.acks.pending and self.sub.waiting_retries() == 0

    def _process(self, batch: list[Delivery], fetched_at: float) -> None:
        started = time.monotonic()
        # Leases of prefetched messages run out while a long handler runs (only the
        # running one's is renewed), so that idle instances can take them over.
        timeout_s = self.spec.policy.visibility_timeout_ms / 1000
        stale_at = fetched_at + timeout_s * STALE_BATCH_FRACTION
        self.hooks.before_batch(batch)
        for i, delivery in enumerate(batch):
            stale = time.monotonic() >= stale_at
            if self.stopping or stale or not self.quota.take():
                self._settle(functools.partial(self._release, batch[i:]))
                break
            if self.pace.batch_ack:
                # Acks go at the end of the batch: the handled ones' leases are renewed
                # with the running one's until then.
                self.held = [*self.acks.unconfirmed(), delivery]
            else:
                self._send_acks(delivery)  # the last ack and "started", before the handler
                self.held = [delivery]
            if self._run_handler(delivery):
                self.acks.add(delivery)
            self.held = []
        self.hooks.after_batch(batch)
        self._settle(self.acks.flush)  # the last ack; every reply read, hooks run
        self._adapt_batch(len(batch), time.monotonic() - started)

    def _adapt_batch(self, size: int, elapsed: float) -> None:
        if size >= self._batch_size and elapsed < FAST_BATCH_S:
            self._batch_size = min(self.pace.prefetch, self._batch_size * 2)
        elif elapsed > SLOW_BATCH_S:
            self._batch_size = max(1, self._batch_size // 2)

    def _run_handler(self, delivery: Delivery) -> bool:
        """Run the handler; True when the message is to be acked."""
        hooks = self.hooks
        if hooks.wants_before_process:
            hooks.before_process(delivery)
        error: BaseException | None = None
        settled = False  # by the handler itself: never acked here as well
        started = time.perf_counter_ns()
        returned: object = None
        duplicate = False  # a plain handler said it was handled before (an inbox had it)
        raised: BaseException | None = None
        limit = self.spec.time_limit
        try:
            if limit is not None:  # watched (core/worker/time_limits.py)
                self.watch.arm(delivery, limit)
            try:
                if self._handles_delivery:
                    returned = cast("Callable[[Delivery], object]", self.spec.handler)(delivery)
                elif self.spec.handler(delivery.message) is DUPLICATE:
                    duplicate = True
            finally:
                if limit is not None:
                    self.watch.disarm()
        except BaseException as exc:
            # SystemExit and KeyboardInterrupt too: a handler thread gets no signal (the
            # main thread does), so they are the handler's own, and fail its message
            # like any error instead of killing the thread (and, redelivered, the next).
            raised = exc
            if limit is not None:  # a time limit's exception may have cut the first short
                self.watch.disarm()
        _stop_watch(delivery, started)
        if delivery.timed_out:  # the watchdog settled it as failed: nothing more to do
            error = exceeded(self.spec.time_limit or 0)
        elif raised is None:  # the usual case: none of the checks below applies
            pass
        elif isinstance(raised, Settled):  # deprecated: how a handler said it before Settlement
            returned = raised.settlement
        elif isinstance(raised, Reject):
            delivery.failed = True
            error = raised
            self._settle(functools.partial(self._fail, delivery, raised, reject=True))
        else:
            delivery.failed = True
            error = raised
            self._count("failed")
            logger.info(
                "Handler %s/%s failed on %s (attempt %d): %r",
                self.spec.queue,
                self.spec.name,
                loggable(delivery.id),  # from Redis: a newline in it forges no log line
                delivery.attempts,
                raised,
            )
            self._settle(functools.partial(self._fail, delivery, raised, reject=False))
        # (only a handler that gets the delivery returns something: a Django task's)
        if returned is not None and isinstance(returned, Settlement) and not delivery.timed_out:
            error, settled = returned.error, True
            duplicate = returned.duplicate
            self._settled_by_handler(delivery, returned)
        if duplicate and error is None:  # handled before: acked, and counted apart
            self._count("skipped")
        if hooks.wants_after_process:
            hooks.after_process(delivery, error=error)
        return error is None and not settled

    def watch_time(self, now: float, grace: float) -> bool:
        """Stop a handler that ran past its consumer's time limit (the watchdog's turn,
        in the worker's main thread); True when one is still on its message ``grace``
        seconds later: stuck in a call Python cannot interrupt."""
        if self.spec.time_limit is None:
            return False
        delivery = self.watch.overdue(now)
        if delivery is not None:
            self.time_out(delivery)
        return self.watch.stuck(now, grace)

    def time_out(self, delivery: Delivery) -> None:
        """Settle ``delivery``, whose handler ran past its limit, as a failed attempt
        (called by the watchdog, in the worker's main thread, while the handler may
        still run: it ignores what the handler does next)."""
        limit = self.spec.time_limit or 0
        error = exceeded(limit)
        delivery.failed = True
        self._count("failed")
        logger.warning(
            "Handler %s/%s ran past its time limit of %g s on %s (attempt %d): %s",
            self.spec.queue,
            self.spec.name,
            limit,
            loggable(delivery.id),
            delivery.attempts,
            "stopped; the message is retried or dead-lettered as a failed attempt",
        )
        # Its lease is no longer renewed: the delivery is settled, whatever the handler does.
        self.held = [d for d in self.held if d is not delivery]
        self._fail(delivery, error, reject=False)

    # Settlement survives Redis outages: what cannot be sent now is retried before
    # anything new is fetched (the messages stay pending meanwhile, so nothing is lost).
    def _settle(self, action: Callable[[], None]) -> None:
        self._unsettled.append(action)
        try:
            self._flush_unsettled()
        except TEMPORARY as exc:  # the loop waits it out, then settles first
            if not self._settle_failed:
                logger.warning(
                    "%s; will settle %d message(s) when it is back", exc, len(self._unsettled)
                )
            self._settle_failed = True

    def _send_acks(self, starting: Delivery) -> None:
        # One write, no waiting: the previous message's ack and the record that this one
        # starts, which reclaim.lua needs to count only started deliveries.
        try:
            self.acks.send(mark=starting)
        except TEMPORARY as exc:  # kept queued: the end of the batch sends them again
            logger.debug("%s; acks wait for the end of the batch", exc)

    def _flush_unsettled(self) -> None:
        self.acks.flush()
        settled = 0
        while self._unsettled:
            self._unsettled[0]()
            self._unsettled.pop(0)
            settled += 1
        if self._settle_failed:
            self._settle_failed = False
            logger.warning(
                "Redis is reachable again (%s); settled %d waiting message(s)", self.sub, settled
            )

    def _acked(self, deliveries: list[Delivery]) -> None:
        self._count("handled", len(deliveries))
        if self.hooks.wants_after_settle:
            for m in deliveries:
                self.hooks.after_settle(m, ACKED)

    def _fail(self, delivery: Delivery, exc: BaseException, *, reject: bool) -> None:
        failure = Failure.from_exception(exc)
        settled = self.sub.reject(delivery, failure) if reject else self.sub.fail(delivery, failure)
        self._settled(delivery, settled.with_error(exc))

    def _settled_by_handler(self, delivery: Delivery, settlement: Settlement) -> None:
        """Count (with the trends: the batch's last write) a delivery its handler
        settled itself, as the worker counts the ones it settles."""
        delivery.failed = settlement.failed
        if settlement.failed:
            self._count("failed")
        self.acks.count_settled(delivery, settlement)
        self._settled(delivery, settlement)

    def _settled(self, delivery: Delivery, settlement: Settlement) -> None:
        """Count, log and hand on how a delivery was settled (but by an ack)."""
        self._count(settlement.outcome.counted_as)
        if settlement.outcome is Outcome.DEAD:
            logger.warning(
                "Message %s of %s/%s is a dead letter after %d attempt(s): %r",
                loggable(delivery.id),
                self.spec.queue,
                self.spec.name,
                delivery.attempts,
                settlement.error,
            )
        self.hooks.after_settle(delivery, settlement)

    def _release(self, deliveries: list[Delivery]) -> None:
        released = self.sub.release(deliveries)
        if released:
            logger.info("%s handed back %d unstarted message(s)", self.sub.instance, released)


def _stop_watch(delivery: Delivery, started_ns: int) -> None:
    """Record how long ``delivery``'s handler ran since ``started_ns`` (perf counter)."""
    delivery.ended_ns = ended = time.perf_counter_ns()
    delivery.duration_ns = elapsed = ended - started_ns
    delivery.duration_ms = elapsed // 1_000_000
