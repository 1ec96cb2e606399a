"""``async def`` handlers: one event loop per worker process, and instances that keep
``concurrency`` handlers running on it.

A logical consumer whose handler is a coroutine function gets one
:class:`AsyncHandlerThread` per worker process instead of ``concurrency`` handler
threads: one instance (one subscription) that keeps up to ``concurrency`` handlers in
flight on the process's event loop (:class:`EventLoop`, a thread of its own shared by
every async consumer of the process). As soon as handlers end, their messages are settled
and as many new ones fetched as slots are free, so a slow handler holds its own slot
only: ``concurrency`` is the number of handlers in flight at any time, not of threads,
and nothing is prefetched (``--prefetch`` does not apply). A fetch waits for messages only
while no handler runs; otherwise it does not block, and the instance waits for the first
handler to end (or :data:`REFILL_POLL_S`, to look for new messages again). Fetching,
acknowledging, retries, dead letters, leases (every running message's lease is renewed
by the liveness thread), heartbeats, graceful shutdown (no new fetch; the running
handlers end within the grace period and are settled) and the middleware are the
handler thread's own: only running the handlers differs. ``before_batch`` sees each
fetch, ``after_batch`` the messages of each set of handlers settled together.

Every message an instance holds is running (it fetches only what it starts at once), so
it records no single "started" message in ``running`` (PROTOCOL.md: "record every start,
or none"): when its process dies, each message it held counts a delivery, as they all
started.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from redisq_django.core.delivery import Delivery
from redisq_django.core.errors import ConsumerNotFound
from redisq_django.core.handler import Reject
from redisq_django.core.limits import Tokens
from redisq_django.core.outcome import Settlement
from redisq_django.core.wire import loggable
from redisq_django.core.worker.flow import Flow
from redisq_django.core.worker.priority import GATE_POLL_S
from redisq_django.core.worker.refusals import TEMPORARY, Condition
from redisq_django.core.worker.state import WAKE_S
from redisq_django.core.worker.threads import HandlerThread, _stop_watch
from redisq_django.core.worker.time_limits import exceeded

logger = logging.getLogger("redisq.worker")

#: How long stopping the loop waits for its thread (s).
LOOP_STOP_TIMEOUT_S = 5.0
#: While handlers run and the queue is empty, how often an instance looks for new
#: messages (s); a handler that ends wakes it at once.
REFILL_POLL_S = 0.05
#: How often a paused consumer looks whether it is resumed (s), as a handler thread.
PAUSED_POLL_S = 0.2

#: A message whose handler ended, with what it returned, or the error it raised.
_Ended = tuple[Delivery, object, BaseException | None]


def is_async_handler(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` is an ``async def`` function (or a callable object whose
    ``__call__`` is one)."""
    call = type(handler).__dict__.get("__call__")  # an object whose __call__ is async
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


class EventLoop:
    """The worker process's event loop, run by a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="redisq-asyncio", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # Closes what handlers opened on this loop: async generators, and with them
            # the loop's own Redis client (redisq_django/connection.py) that apublish uses.
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def stop(self) -> None:
        """Stop the loop once what runs now returns to it, and wait for its thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=LOOP_STOP_TIMEOUT_S)


class AsyncHandlerThread(HandlerThread):
    """One instance of a logical consumer with an ``async def`` handler: keeps up to
    ``spec.concurrency`` handlers running on ``loop``, settling each message as its
    handler ends and fetching as many as slots are free (see the module docstring).
    Takes :class:`HandlerThread`'s arguments and ``loop``."""

    def __init__(self, *, loop: EventLoop, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.event_loop = loop
        #: The messages whose handlers run on the loop, by ``id()``, in the order started.
        self._flight: dict[int, Delivery] = {}
        #: Handlers that ended, handed over by the loop once per loop iteration (handlers
        #: ending together wake this thread once), taken by this thread: no future per
        #: message to watch (a few KiB each, and a wait on all of them per round).
        self._ended: queue.SimpleQueue[list[_Ended]] = queue.SimpleQueue()
        self._ending: list[_Ended] = []  # (loop only) ended in this loop iteration
        self._taken: list[_Ended] = []  # taken from _ended while waiting, not settled yet
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps weak references only
        #: When each running handler started (``time.monotonic()``), by ``id()``.
        self._began_at: dict[int, float] = {}

    def watch_time(self, now: float, grace: float) -> bool:
        """True when a handler still runs ``grace`` seconds after its time limit: its
        ``asyncio.timeout`` cancelled it at the limit, so only a handler that blocks the
        event loop (a synchronous call in it) is still there."""
        limit = self.spec.time_limit
        if limit is None:
            return False
        return any(now - began >= limit + grace for began in list(self._began_at.values()))

    def _loop(self) -> None:
        # Redis refusing is waited out as by a handler thread (logged once); handlers
        # that end meanwhile are settled when it is back (their leases still renewed).
        redis_state = Condition(self.sub, logger)
        while True:
            self._settle_ended()
            if self.stopping or self.quota.exhausted:  # fetch nothing more; let them end
                if not self._flight:
                    return
                self._idle(WAKE_S)
                continue
            try:
                self._flush_unsettled()
                batch = self._refill()
                redis_state.ok()
            except TEMPORARY as exc:
                wait = redis_state.failed(exc)
                if isinstance(exc, ConsumerNotFound) and self._register_again(redis_state):
                    continue
                self._idle(wait)
                continue
            if batch is None:  # a burst is over: the queue is drained
                return
            if batch:
                self._start(batch)

    def _refill(self) -> list[Delivery] | None:
        """Fetch as many messages as slots are free, or wait a little ([] : nothing
        fetched; None: a burst is over)."""
        free = self.spec.concurrency - len(self._flight)  # < 0: concurrency lowered
        if self.spec.paused:
            if self.gate is not None:
                self.gate.report(busy=False)  # a paused level holds back no other
            self._idle(PAUSED_POLL_S)
            return []
        if free <= 0:
            self._idle(WAKE_S)  # wakes as soon as a handler ends
            return []
        if self.gate is not None and not self.gate.may_fetch():
            self._idle(GATE_POLL_S)
            return []
        self._batch_size = free
        batch = self._receive()
        if self.gate is not None:
            self.gate.report(busy=bool(batch))
        if batch:
            return batch
        if self._flight:
            self._idle(REFILL_POLL_S)  # wakes as soon as a handler ends
            return []
        if self.pace.burst and not self.held_back and self._drained():
            # A retry promoted between that fetch and the count in _drained() is in the
            # direct stream now: a burst ends only when a look finds none.
            batch = self._look_again()
            return batch if batch or self.held_back else None
        return []

    def _receive_limited(self, flow: Flow) -> list[Delivery]:
        """Fetch no more than the consumer's limits let this instance start now: a slot
        and a rate token per message. With handlers in flight it never waits for
        either: the ones that end are settled (and their slots given back) first."""
        idle = not self._flight
        if idle and self._place_idle:  # the last look found none: wait, holding nothing
            return self._keep_to_key_rates(flow, self._wait_for_one(flow))
        want = self._batch_size
        if flow.slots is not None:
            want = flow.take_slots(self, want, wait=idle)
        tokens = Tokens(want)
        if want and flow.rate is not None:
            tokens = flow.take_tokens(self, want, wait=idle)
        self.held_back = not tokens.count
        batch: list[Delivery] = []
        if tokens.count:
            # Never waiting for messages while holding slots or tokens (as a thread).
            waits = flow.rate is None and flow.slots is None and idle
            batch = self._fetch_or_reclaim(tokens.count, self._block_ms() if waits else 0)
            self._place_idle = idle and not batch and not waits
            batch = self._keep_to_key_rates(flow, batch)
            flow.give_tokens(tokens, len(batch))
        self._return_slots(len(self._flight) + len(batch))
        return batch

    def _block_ms(self) -> int:
        """A fetch waits only while no handler runs: one that ends is settled, and its
        slot refilled, at once."""
        return 0 if self._flight else super()._block_ms()

    def _idle(self, seconds: float) -> None:
        """Wait up to ``seconds``: until a handler ends, or a stop request if none runs."""
        if self._flight:
            if not self._taken:
                with contextlib.suppress(queue.Empty):
                    self._taken += self._ended.get(timeout=seconds)
        else:
            self.stop_signal.wait(seconds)

    def _start(self, batch: list[Delivery]) -> None:
        """Start the handlers of ``batch`` on the loop (the ones a stop or the message
        budget leaves unstarted are handed back)."""
        self.hooks.before_batch(batch)
        starting: list[Delivery] = []
        for i, delivery in enumerate(batch):
            if self.stopping or not self.quota.take():
                self._settle(functools.partial(self._release, batch[i:]))
                break
            starting.append(delivery)
            self._flight[id(delivery)] = delivery
            self._began_at[id(delivery)] = time.monotonic()
        self.held = list(self._flight.values())  # every running message's lease is renewed
        if starting:
            self.event_loop.loop.call_soon_threadsafe(self._create_tasks, starting)

    def _settle_ended(self) -> None:
        """Settle the messages whose handlers ended (acked together, with one reply read)."""
        ended, self._taken = self._taken, []
        with contextlib.suppress(queue.Empty):
            while True:
                ended += self._ended.get_nowait()
        if not ended:
            return
        for delivery, returned, error in ended:
            del self._flight[id(delivery)]
            self._began_at.pop(id(delivery), None)
            if self._finish(delivery, returned, error):
                self.acks.add(delivery)
        self.held = list(self._flight.values())
        self._return_slots(len(self._flight))
        self.hooks.after_batch([m for m, _, _ in ended])
        self._settle(self.acks.flush)

    def _create_tasks(self, deliveries: list[Delivery]) -> None:
        """Start the handlers of ``deliveries`` (on the loop)."""
        for delivery in deliveries:
            # In a task of its own: the middleware's per-message hooks run in its
            # context, so a span made current in before_process is current in this
            # handler only.
            task = self.event_loop.loop.create_task(self._run(delivery))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, delivery: Delivery) -> None:
        """Run ``delivery``'s handler and hand what it returned (or raised) to the thread."""
        try:
            returned, error = await self._run_one(delivery)
        except BaseException as exc:  # escaped a hook (hooks log Exception): the message fails
            returned, error = None, exc
        if not self._ending:  # the first to end in this iteration: hand over after it
            self.event_loop.loop.call_soon(self._hand_over)
        self._ending.append((delivery, returned, error))

    def _hand_over(self) -> None:
        """Hand the handlers that ended in the last loop iteration to the thread."""
        ending, self._ending = self._ending, []
        self._ended.put(ending)

    async def _run_one(self, delivery: Delivery) -> tuple[object, BaseException | None]:
        hooks = self.hooks
        if hooks.wants_before_process:
            hooks.before_process(delivery)
        started = time.perf_counter_ns()
        handler = cast("Callable[[Any], Awaitable[object]]", self.spec.handler)
        limit = self.spec.time_limit
        try:
            if limit is None:
                returned = await handler(delivery.message)
            else:  # cancelled at its limit: a failed attempt (core/worker/time_limits.py)
                async with asyncio.timeout(limit) as deadline:
                    returned = await handler(delivery.message)
        except BaseException as raised:  # CancelledError too: its message fails, the loop goes on
            timed_out = limit is not None and deadline.expired()
            exc = exceeded(limit) if timed_out and limit is not None else raised
            _stop_watch(delivery, started)
            if hooks.wants_after_process:
                hooks.after_process(delivery, error=exc)
            return None, exc
        _stop_watch(delivery, started)
        if hooks.wants_after_process:
            hooks.after_process(delivery, error=None)
        return returned, None

    def _finish(self, delivery: Delivery, returned: object, error: BaseException | None) -> bool:
        """Settle a failed handler's message (in this thread); True when it is to be acked."""
        if error is None:
            if isinstance(returned, Settlement):  # settled by the handler itself
                self._settled_by_handler(delivery, returned)
                return False
            return True
        delivery.failed = True
        if isinstance(error, Reject):
            self._settle(functools.partial(self._fail, delivery, error, reject=True))
            return False
        self._count("failed")
        logger.info(
            "Handler %s/%s failed on %s (attempt %d): %r",
            self.spec.queue,
            self.spec.name,
            loggable(delivery.id),
            delivery.attempts,
            error,
        )
        self._settle(functools.partial(self._fail, delivery, error, reject=False))
        return False
