"""Handler threads: one instance of a logical consumer each (fetch, handle, settle).

Started and supervised by :class:`~redisq_django.core.worker.Worker`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from redisq_django.core.errors import ConsumerNotFound, RedisUnavailable
from redisq_django.core.handler import ConsumerSpec, Reject
from redisq_django.core.message import Message
from redisq_django.core.subscription import DEAD, Subscription

if TYPE_CHECKING:
    from redisq_django.core.worker import Worker, WorkerOptions

logger = logging.getLogger("redisq.worker")

ACKED = "acked"
#: Reconnection waits grow from the first to the last value (seconds).
RECONNECT_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
#: A handler thread's first batch size; it adapts between 1 and ``prefetch``.
INITIAL_BATCH = 10
#: A full batch handled faster than this doubles the next one (seconds)...
FAST_BATCH_S = 0.25
#: ...and a batch slower than this halves it.
SLOW_BATCH_S = 2.0
#: In burst mode, how long a fetch waits before concluding the queue is drained (ms).
BURST_BLOCK_MS = 100


class Quota:
    """The ``max_messages`` budget shared by all threads."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.taken = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        if self.limit is None:
            return True
        with self._lock:
            if self.taken >= self.limit:
                return False
            self.taken += 1
            return True

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.taken >= self.limit


class HandlerThread(threading.Thread):
    """One instance of a logical consumer: fetch, handle, settle, repeat."""

    def __init__(self, worker: Worker, spec: ConsumerSpec, index: int) -> None:
        super().__init__(name=f"redisq-{spec.queue}-{spec.name}-{index}", daemon=True)
        self.worker = worker
        self.spec = spec
        self.sub: Subscription = worker.broker.subscribe(
            spec.queue, spec.name, f"{worker.instance_prefix}-{spec.name}-{index}"
        )
        self.apply(spec)
        self.held: list[Message] = []  # fetched and not yet settled (leases to extend)
        self.retire = False  # finish the current batch, then exit (concurrency lowered)
        self._unsettled: list[Callable[[], None]] = []
        self._settle_failed = False  # a settlement waits for Redis (to log its return)
        self._last_reclaim = 0.0
        self._batch_size = min(INITIAL_BATCH, worker.options.prefetch)

    def apply(self, spec: ConsumerSpec) -> None:
        self.spec = spec
        self.sub.max_retries = spec.max_retries
        self.sub.backoff_s = spec.backoff_s
        self.sub.max_backoff_s = spec.max_backoff_s
        self.sub.visibility_timeout_ms = spec.visibility_timeout_ms

    @property
    def stopping(self) -> bool:
        return self.worker.stopping or self.retire

    def run(self) -> None:
        try:
            self._loop()
        except Exception:
            self.worker.crashed = True
            logger.exception(
                "Handler thread %s crashed; its messages will be redelivered", self.name
            )
        finally:
            try:
                if not self.worker.cold:
                    self.sub.leave()
            except Exception:  # Redis gone at shutdown: the heartbeat simply expires
                logger.debug("Could not leave the consumer group cleanly", exc_info=True)

    def _loop(self) -> None:
        opts = self.worker.options
        failures = 0
        while not self.stopping:
            try:
                self._flush_unsettled()
                if self.spec.paused or self.worker.quota.exhausted:
                    if self.worker.quota.exhausted:
                        return
                    self.worker.wait(0.2)
                    continue
                batch = self._receive(opts)
                if failures:
                    logger.warning("Redis is reachable again (%s)", self.sub)
                    failures = 0
            except RedisUnavailable as exc:
                wait = RECONNECT_BACKOFF_S[min(failures, len(RECONNECT_BACKOFF_S) - 1)]
                if failures == 0:
                    logger.warning("%s; retrying in the background", exc)
                failures += 1
                self.worker.wait(wait)
                continue
            except ConsumerNotFound:
                # The group vanished (e.g. Redis restarted without persistence).
                logger.warning(
                    "Consumer group %s/%s missing; registering it again",
                    self.spec.queue,
                    self.spec.name,
                )
                self.worker.broker.ensure_consumer(self.spec.queue, self.spec.name, self.spec.start)
                continue
            if batch:
                self._process(batch)
            elif opts.burst and self._drained():
                return

    def _receive(self, opts: WorkerOptions) -> list[Message]:
        now = time.monotonic()
        if now - self._last_reclaim >= opts.reclaim_interval:
            self._last_reclaim = now
            reclaimed = self.sub.reclaim(self._batch_size)
            if reclaimed:
                logger.info(
                    "%s took over %d message(s) of stopped instances",
                    self.sub.consumer,
                    len(reclaimed),
                )
                return reclaimed
        block = min(opts.block_ms, BURST_BLOCK_MS) if opts.burst else opts.block_ms
        return self.sub.fetch(count=self._batch_size, block_ms=block)

    def _drained(self) -> bool:
        return not self._unsettled and self.sub.waiting_retries() == 0

    def _process(self, batch: list[Message]) -> None:
        started = time.monotonic()
        self.held = list(batch)
        mw = self.worker.middleware
        mw.call("before_batch", batch)
        acks: list[Message] = []
        quota = self.worker.quota
        for i, message in enumerate(batch):
            if self.stopping or not quota.take():
                self._settle(functools.partial(self._release, batch[i:]))
                break
            if self._run_handler(message):
                acks.append(message)
            else:
                self.held.remove(message)
        mw.call("after_batch", batch)
        if acks:
            self._settle(functools.partial(self._ack, acks))
        self.held = []
        self._adapt_batch(len(batch), time.monotonic() - started)

    def _adapt_batch(self, size: int, elapsed: float) -> None:
        if size >= self._batch_size and elapsed < FAST_BATCH_S:
            self._batch_size = min(self.worker.options.prefetch, self._batch_size * 2)
        elif elapsed > SLOW_BATCH_S:
            self._batch_size = max(1, self._batch_size // 2)

    def _run_handler(self, message: Message) -> bool:
        """Run the handler; True when the message is to be acked."""
        mw = self.worker.middleware
        if mw.has("before_process"):
            mw.call("before_process", message)
        error: BaseException | None = None
        try:
            self.spec.handler(message)
        except Reject as exc:
            error = exc
            self._settle(functools.partial(self._fail, message, exc, reject=True))
        except Exception as exc:
            error = exc
            self.worker.count("failed", self.spec)
            logger.info(
                "Handler %s/%s failed on %s (attempt %d): %r",
                self.spec.queue,
                self.spec.name,
                message.id,
                message.attempts,
                exc,
            )
            self._settle(functools.partial(self._fail, message, exc, reject=False))
        if mw.has("after_process"):
            mw.call("after_process", message, error=error)
        return error is None

    # Settlement survives Redis outages: what cannot be sent now is retried before
    # anything new is fetched (the messages stay pending meanwhile, so nothing is lost).
    def _settle(self, action: Callable[[], None]) -> None:
        self._unsettled.append(action)
        try:
            self._flush_unsettled()
        except RedisUnavailable as exc:
            self._settle_failed = True
            logger.warning(
                "%s; will settle %d message(s) when it is back", exc, len(self._unsettled)
            )

    def _flush_unsettled(self) -> None:
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

    def _ack(self, messages: list[Message]) -> None:
        self.sub.ack(messages)
        self.worker.count("handled", self.spec, len(messages))
        mw = self.worker.middleware
        if mw.has("after_settle"):
            for m in messages:
                mw.call("after_settle", m, ACKED)

    def _fail(self, message: Message, exc: BaseException, *, reject: bool) -> None:
        outcome = self.sub.reject(message, exc) if reject else self.sub.fail(message, exc)
        self.worker.count(outcome, self.spec)
        if outcome == DEAD:
            logger.warning(
                "Message %s of %s/%s is a dead letter after %d attempt(s): %r",
                message.id,
                self.spec.queue,
                self.spec.name,
                message.attempts,
                exc,
            )
        self.worker.middleware.call("after_settle", message, outcome)

    def _release(self, messages: list[Message]) -> None:
        released = self.sub.release(messages)
        if released:
            logger.info("%s handed back %d unstarted message(s)", self.sub.consumer, released)
